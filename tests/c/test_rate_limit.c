/* test_rate_limit.c — the per-key token buckets of runtime/serve/rate_limit.c
 * at explicit times: admission charges, refusals name the wait, refill is
 * continuous and capped at a minute's allowance, settling returns what was
 * not used, keys are independent, and thousands of idle keys are evicted
 * without losing the ones that still hold a debt. */
#include "rate_limit.h"

#include <math.h>
#include <stdio.h>

#include "check.h"

static int near(double a, double b) { return fabs(a - b) < 1e-6; }

static void test_requests_per_minute(void) {
    rl_limiter *l = rl_create(6, 0); /* one request back every 10 s */
    double wait = -1;
    for (int i = 0; i < 6; i++) CHECK(rl_admit(l, "a", 1000, 0.0, &wait) == RL_OK, "request %d admitted", i);
    CHECK(rl_admit(l, "a", 1, 0.0, &wait) == RL_REQUESTS && near(wait, 10), "7th refused, wait %g (want 10)", wait);
    CHECK(rl_admit(l, "a", 1, 4.0, &wait) == RL_REQUESTS && near(wait, 6), "at 4 s: wait %g (want 6)", wait);
    CHECK(rl_admit(l, "a", 1, 10.0, &wait) == RL_OK, "at 10 s one is back%s", "");
    CHECK(rl_admit(l, "b", 1, 10.0, &wait) == RL_OK, "another key has its own bucket%s", "");
    /* an idle hour refills to one minute's allowance, not more */
    for (int i = 0; i < 6; i++) CHECK(rl_admit(l, "a", 1, 3600.0, &wait) == RL_OK, "after an hour: %d", i);
    CHECK(rl_admit(l, "a", 1, 3600.0, &wait) == RL_REQUESTS, "capped at 6%s", "");
    /* a request refused after admission (a full queue) gets its request back */
    rl_settle(l, "a", 0, 0, 1, 3600.0);
    CHECK(rl_admit(l, "a", 1, 3600.0, &wait) == RL_OK, "refunded request admitted%s", "");
    rl_free(l);
}

static void test_tokens_per_minute(void) {
    rl_limiter *l = rl_create(0, 600); /* 10 tokens a second */
    double wait = -1;
    CHECK(rl_admit(l, "k", 601, 0.0, &wait) == RL_TOO_LARGE && near(wait, 60), "over a minute's tokens%s", "");
    CHECK(rl_admit(l, "k", 500, 0.0, &wait) == RL_OK, "500 reserved%s", "");
    CHECK(rl_admit(l, "k", 200, 0.0, &wait) == RL_TOKENS && near(wait, 10), "100 left: wait %g (want 10)", wait);
    /* the first request used 50 of its 500: 450 go back */
    rl_settle(l, "k", 500, 50, 0, 0.0);
    CHECK(rl_admit(l, "k", 550, 0.0, &wait) == RL_OK, "550 fit after the correction%s", "");
    CHECK(rl_admit(l, "k", 1, 0.0, &wait) == RL_TOKENS, "nothing left%s", "");
    /* settling more than was reserved never takes tokens, and never overfills */
    rl_settle(l, "k", 10, 20, 0, 0.0);
    rl_settle(l, "k", 1e9, 0, 0, 0.0);
    CHECK(rl_admit(l, "k", 600, 0.0, &wait) == RL_OK, "full again, capped at 600%s", "");
    CHECK(rl_admit(l, "k", 1, 0.0, &wait) == RL_TOKENS, "and not above it%s", "");
    rl_free(l);
}

static void test_many_keys(void) {
    rl_limiter *l = rl_create(1, 0);
    double wait;
    char key[32];
    /* 20000 keys at once: every one charged; the table grows */
    for (int i = 0; i < 20000; i++) {
        snprintf(key, sizeof key, "addr:%d", i);
        if (rl_admit(l, key, 0, 0.0, &wait) != RL_OK) CHECK(0, "key %d refused", i);
    }
    int refused = 0;
    for (int i = 0; i < 20000; i++) {
        snprintf(key, sizeof key, "addr:%d", i);
        refused += rl_admit(l, key, 0, 1.0, &wait) == RL_REQUESTS;
    }
    CHECK(refused == 20000, "%d of 20000 keys remember their charge", refused);
    /* a minute later all are full again: new keys evict them instead of growing */
    for (int i = 0; i < 20000; i++) {
        snprintf(key, sizeof key, "new:%d", i);
        if (rl_admit(l, key, 0, 120.0, &wait) != RL_OK) CHECK(0, "new key %d refused", i);
    }
    snprintf(key, sizeof key, "new:%d", 7);
    CHECK(rl_admit(l, key, 0, 120.5, &wait) == RL_REQUESTS, "a charged new key is still charged%s", "");
    rl_free(l);
}

static void test_no_limits(void) {
    double wait;
    CHECK(rl_admit(NULL, "x", 1e12, 0, &wait) == RL_OK, "no limiter: everything passes%s", "");
    rl_limiter *l = rl_create(0, 0);
    CHECK(rl_admit(l, "x", 1e12, 0, &wait) == RL_OK, "zero limits: everything passes%s", "");
    rl_free(l);
}

int main(void) {
    test_requests_per_minute();
    test_tokens_per_minute();
    test_many_keys();
    test_no_limits();
    return check_summary();
}
