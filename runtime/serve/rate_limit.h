/* rate_limit.h — per-key request and token rate limits (rl_ prefix).
 *
 * Each key (an API key, or a client address when the server has none) has
 * two token buckets: one of requests (--rate-limit-rpm) and one of tokens
 * (--rate-limit-tpm), each holding at most one minute's allowance and
 * refilled continuously at limit / 60 per second. A request is admitted when
 * both buckets hold what it takes: 1 request, and the tokens it reserves
 * (prompt + the most it may generate); then both are taken. When it ends, the
 * tokens it reserved but did not use go back (rl_settle), so the token limit
 * counts what requests really used, while a burst of large requests is held
 * back by what they might use.
 *
 * Single-threaded (the server's event loop); memory is bounded by evicting
 * keys whose buckets are full again (they hold nothing a new key would not).
 */
#ifndef INGOT_RATE_LIMIT_H
#define INGOT_RATE_LIMIT_H

typedef struct rl_limiter rl_limiter;

typedef enum {
    RL_OK,
    RL_REQUESTS,  /* the request bucket is empty */
    RL_TOKENS,    /* the token bucket holds less than the reservation */
    RL_TOO_LARGE, /* the reservation is more than a whole minute's tokens: it can never be admitted */
} rl_verdict;

/* rpm, tpm: limits per minute; 0 means none. NULL on OOM. */
rl_limiter *rl_create(double rpm, double tpm);
void rl_free(rl_limiter *l);

/* Admits (and charges) one request of key reserving tokens at time now
 * (seconds, monotonic). On refusal nothing is charged and *retry_after gets
 * the seconds until it would be admitted (for RL_TOO_LARGE: 60). */
rl_verdict rl_admit(rl_limiter *l, const char *key, double tokens, double now, double *retry_after);

/* A request admitted with `reserved` tokens ended having used `used`: the
 * difference goes back to key's token bucket (never above its capacity).
 * refund_request: also give back its request (it never ran). */
void rl_settle(rl_limiter *l, const char *key, double reserved, double used, int refund_request, double now);

#endif
