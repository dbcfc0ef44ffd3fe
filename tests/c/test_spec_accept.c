/* test_spec_accept.c — speculative decoding's acceptance rule keeps the output distributed as p,
 * and greedy decoding's pick (samp_argmax) is the token a plain scan would pick.
 *
 * samp_spec_pick(p, q, draft, u1, u2) is a deterministic function of its two
 * uniform draws, so the distribution of the token it emits is a measure over
 * [0,1)^2 that is computed here, not sampled: acceptance is u1 below a
 * threshold, found by bisection to double precision; after a rejection the
 * token is a step function of u2 that walks the vocabulary in order, whose
 * steps are found the same way (and checked to be the same for several
 * rejecting u1). For a point-mass draft (n-gram) the emitted token must be
 * distributed as p for every draft token; for a draft model with
 * distribution q, the draft itself drawn from q, the marginal must be p.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "sampler.h"
#include "xorshift.h"

#define V 6
#define EPS 1e-12

static int pick(const float *p, const float *q, int draft, double u1, double u2, int *acc) {
    return samp_spec_pick(p, q, V, draft, u1, u2, acc);
}

/* The least u in [0, 1] for which pred(u) holds, pred monotone (false then true). */
static double threshold(int (*pred)(double u, const void *ctx), const void *ctx) {
    double lo = 0.0, hi = 1.0;
    if (pred(0.0, ctx)) return 0.0;
    for (int i = 0; i < 80; i++) {
        const double mid = 0.5 * (lo + hi);
        if (pred(mid, ctx)) hi = mid;
        else lo = mid;
    }
    return hi;
}

typedef struct {
    const float *p, *q;
    int draft, token;
    double u1;
} pick_ctx;

static int rejected_at(double u1, const void *ctx) {
    const pick_ctx *c = ctx;
    int acc;
    pick(c->p, c->q, c->draft, u1, 0.5, &acc);
    return !acc;
}

static int reaches_token(double u2, const void *ctx) {
    const pick_ctx *c = ctx;
    int acc;
    return pick(c->p, c->q, c->draft, c->u1, u2, &acc) >= c->token;
}

/* P(emitted = x) for a fixed draft, and the acceptance probability. */
static void emitted_given_draft(const float *p, const float *q, int draft, double *out, double *accept_rate) {
    pick_ctx c = {p, q, draft, 0, 0};
    const double acc = threshold(rejected_at, &c);
    /* acceptance is "u1 below the threshold": check it on a grid */
    for (int i = 0; i < 256; i++) {
        const double u1 = (i + 0.5) / 256;
        int a;
        const int tok = pick(p, q, draft, u1, 0.5, &a);
        check(a == (u1 < acc), "draft %d: u1 = %g accepted %d, threshold %g", draft, u1, a, acc);
        if (a) check(tok == draft, "an accepted token must be the draft (%d, got %d)", draft, tok);
    }
    *accept_rate = acc;
    for (int x = 0; x < V; x++) out[x] = x == draft ? acc : 0.0;
    if (acc >= 1.0) return;
    double rej[V] = {0};
    const double u1s[3] = {acc + (1 - acc) * 0.001, acc + (1 - acc) * 0.5, acc + (1 - acc) * 0.999};
    for (int k = 0; k < 3; k++) {
        c.u1 = u1s[k];
        double lo[V + 1];
        for (int x = 0; x < V; x++) {
            c.token = x;
            lo[x] = x == 0 ? 0.0 : threshold(reaches_token, &c);
        }
        lo[V] = 1.0;
        for (int x = 0; x < V; x++) {
            const double m = lo[x + 1] - lo[x];
            if (k == 0) rej[x] = m;
            else check(fabs(m - rej[x]) < EPS, "draft %d: the rejection's draw depends on u1", draft);
        }
        /* a step function walking the vocabulary in order: check it between the steps */
        for (int i = 0; i < 512; i++) {
            const double u2 = (i + 0.5) / 512;
            int a, want = 0;
            while (want < V - 1 && u2 >= lo[want + 1]) want++;
            const int tok = pick(p, q, draft, c.u1, u2, &a);
            check(!a && tok == want, "draft %d: u2 = %g gave %d, steps say %d", draft, u2, tok, want);
        }
    }
    for (int x = 0; x < V; x++) out[x] += (1.0 - acc) * rej[x];
}

static void point_mass_drafts(const char *what, const float *p) {
    for (int d = 0; d < V; d++) {
        double got[V], acc;
        emitted_given_draft(p, NULL, d, got, &acc);
        check(fabs(acc - p[d]) < EPS, "%s: draft %d accepted with probability %g, want p = %g", what, d, acc, p[d]);
        for (int x = 0; x < V; x++)
            check(fabs(got[x] - p[x]) < EPS, "%s: draft %d: P(emit %d) = %.17g, want %g", what, d, x, got[x], p[x]);
    }
}

static void draft_model(const char *what, const float *p, const float *q) {
    double marginal[V] = {0};
    for (int d = 0; d < V; d++) {
        if (q[d] == 0.0f) continue; /* never drafted */
        double got[V], acc;
        emitted_given_draft(p, q, d, got, &acc);
        const double want_acc = p[d] >= q[d] ? 1.0 : (double)p[d] / q[d];
        check(fabs(acc - want_acc) < EPS, "%s: draft %d accepted with probability %g, want min(1, p/q) = %g", what, d, acc,
              want_acc);
        for (int x = 0; x < V; x++) marginal[x] += q[d] * got[x];
    }
    for (int x = 0; x < V; x++)
        check(fabs(marginal[x] - p[x]) < 1e-12, "%s: P(emit %d) = %.17g, want p = %g", what, x, marginal[x], p[x]);
}

/* samp_verify on a greedy sampler returns what samp_sample returns, after the
 * same bias and penalties (which depend on the history before the position). */
static void greedy_matches_plain(void) {
    samp_params sp = samp_default_params();
    sp.repetition_penalty = 1.3f;
    sp.frequency_penalty = 0.5f;
    const int32_t bias_id = 4;
    const float bias = 0.75f;
    sp.bias_ids = &bias_id;
    sp.bias_values = &bias;
    sp.n_bias = 1;
    samp_sampler a, b;
    CHECK(samp_init(&a, V, &sp) == 0 && samp_init(&b, V, &sp) == 0, "samp_init");
    const int32_t history[] = {1, 1, 2, 5};
    for (int trial = 0; trial < 200; trial++) {
        float la[V], lb[V];
        for (int x = 0; x < V; x++) la[x] = lb[x] = (float)((trial * 7 + x * 13) % 11) * 0.37f - 1.5f;
        const int plain = samp_sample(&a, la, history, 4);
        for (int d = 0; d < V; d++) {
            float lc[V];
            memcpy(lc, lb, sizeof lc);
            int acc;
            const int tok = samp_verify(&b, lc, history, 4, d, NULL, &acc);
            check(tok == plain && acc == (d == plain), "trial %d draft %d: verify gave %d (accepted %d), plain %d",
                  trial, d, tok, acc, plain);
        }
    }
    samp_free(&a);
    samp_free(&b);
}

/* Sampled verification draws from the sampler's own seeded generator: the
 * same seed and logits give the same tokens. */
static void seeded_is_reproducible(void) {
    samp_params sp = samp_default_params();
    sp.temperature = 0.9f;
    sp.top_k = 4;
    sp.seed = 1234;
    int first[100];
    for (int run = 0; run < 2; run++) {
        samp_sampler s;
        CHECK(samp_init(&s, V, &sp) == 0, "samp_init");
        for (int t = 0; t < 100; t++) {
            float lg[V];
            for (int x = 0; x < V; x++) lg[x] = (float)((t + x * 3) % 5) * 0.5f;
            int acc;
            const int tok = samp_verify(&s, lg, NULL, 0, t % V, NULL, &acc);
            if (run == 0) first[t] = tok;
            else check(first[t] == tok, "step %d: %d then %d with the same seed", t, first[t], tok);
        }
        samp_free(&s);
    }
}

/* The reference: the first index holding a strictly larger value than all before it. */
static int argmax_scan(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* samp_argmax (two vector passes) against the scan on every length up to 70 (the vector tails)
 * and a 49152-entry vocabulary, with ties, signed zeros, infinities and NaNs planted. */
static void argmax_matches_scan(void) {
    static float x[49152];
    int bad = 0, cases = 0;
    for (int rep = 0; rep < 400; rep++) {
        const int n = rep < 280 ? 1 + rep % 70 : 49152;
        const int kind = rep % 4;
        for (int i = 0; i < n; i++) x[i] = kind == 1 ? (float)rndi(-3, 3) : rndf() * 20.0f; /* kind 1: many ties */
        if (kind == 2) { /* planted specials */
            for (int k = 0; k < 4; k++) x[rndi(0, n - 1)] = NAN;
            x[rndi(0, n - 1)] = -0.0f;
            x[rndi(0, n - 1)] = 0.0f;
            x[rndi(0, n - 1)] = -INFINITY;
        }
        if (kind == 3) { /* everything at or below zero, zeros of both signs the largest */
            for (int i = 0; i < n; i++) x[i] = rnd() % 3 ? -fabsf(x[i]) : (rnd() % 2 ? -0.0f : 0.0f);
            if (rep % 8 == 3) x[0] = NAN;
            if (rep % 8 == 7) x[rndi(0, n - 1)] = INFINITY;
        }
        bad += samp_argmax(x, n) != argmax_scan(x, n);
        cases++;
    }
    CHECK(bad == 0, "samp_argmax differs from the plain scan in %d of %d cases", bad, cases);
}

int main(void) {
    argmax_matches_scan();
    const float skewed[V] = {32 / 64.f, 16 / 64.f, 8 / 64.f, 5 / 64.f, 3 / 64.f, 0};
    const float certain[V] = {0, 0, 1, 0, 0, 0};
    const float flat[V] = {0.17f, 0.17f, 0.17f, 0.17f, 0.16f, 0.16f};
    point_mass_drafts("skewed", skewed);
    point_mass_drafts("certain", certain);
    point_mass_drafts("flat", flat);

    /* draft models: q over- and under-proposing tokens */
    const float p1[V] = {32 / 64.f, 16 / 64.f, 8 / 64.f, 8 / 64.f, 0, 0};
    const float q1[V] = {8 / 64.f, 8 / 64.f, 32 / 64.f, 16 / 64.f, 0, 0};
    draft_model("q under-proposes the likely tokens", p1, q1);
    const float q2[V] = {16 / 64.f, 16 / 64.f, 16 / 64.f, 16 / 64.f, 0, 0};
    draft_model("uniform q", p1, q2);
    draft_model("q == p", p1, p1);
    const float q3[V] = {0, 0, 0, 0, 32 / 64.f, 32 / 64.f}; /* q proposes only tokens p never emits */
    draft_model("disjoint q", p1, q3);
    const float q4[V] = {20 / 64.f, 6 / 64.f, 6 / 64.f, 12 / 64.f, 12 / 64.f, 8 / 64.f};
    draft_model("q with mass where p has none", p1, q4);

    greedy_matches_plain();
    seeded_is_reproducible();
    return check_summary();
}
