/* test_scheduler.c — the scheduler against a model whose every answer is known.
 *
 * The model here is not a neural network: its "KV cache" stores each token id
 * in the cell of its position, and its next token is a hash of the ids it can
 * see through the block table (the whole prefix, or the last KV_WINDOW
 * positions of a sliding-window model). So a run is right only if every
 * block table maps every visible position to the cell that holds the
 * sequence's own token there: a block shared wrongly, freed early, reused
 * while live or overwritten shows up as a different token. The expected
 * output of each request is computed directly from the same rule.
 * Its final hidden state (for embedding requests) is a vector hashed from the
 * same visible ids, so a pooled embedding is right only if every chunk's rows
 * were seen, pooled once, and a preempted sequence started its pool afresh.
 *
 * Randomized over many seeds (tiny pools, random lengths, shared prefixes,
 * cancellations, late arrivals, stop tokens), each run must finish every
 * request (progress: a deadline catches a stall), give every request its
 * expected tokens and finish reason, and return every block: none in use once
 * all requests are done. tests/c/test_scheduler_window.c includes this file
 * with KV_WINDOW set, tests/c/test_scheduler_state.c with RECURRENT set (the
 * same hash, kept running in each sequence's state slot).
 */
#include "scheduler.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef KV_WINDOW
#define KV_WINDOW 0
#endif
#ifndef RECURRENT
#define RECURRENT 0
#endif

/* What a recurrent model keeps per sequence: the hash of positions [0, next_pos). */
typedef struct {
    uint32_t hash;
    int next_pos;
} seq_state;

enum { VOCAB = 48, MAX_CTX = 192, MAX_STEP = 64, STOP_TOKEN = 0, DIM = 4 };

static const char *const KERNEL_NAMES[] = {"hash"};
static const ingot_desc hash_model_desc = {
    .name = "hash-model", .arch = "test", .backend = "cpu", .source = "", .source_format = "none",
    .fused = 1, .dim = DIM, .n_layers = 1, .n_heads = 1, .n_kv_heads = 1, .head_dim = 1, .ffn_dim = 1,
    .vocab = VOCAB, .max_ctx = MAX_CTX, .weight_dtypes = "", .kv_bytes_per_token = sizeof(int32_t),
    .kv_window = KV_WINDOW, .state_bytes_per_seq = RECURRENT ? sizeof(seq_state) : 0, .kernels_per_step = 1, .n_kernel_kinds = 1, .kernel_names = KERNEL_NAMES,
    .generator = "test",
};
static void (*hash_model_moe_observer)(int, int, int, const int32_t *);

struct ingot_model {
    int max_step;
    int contract_errors; /* written on the scheduler thread, read after it stopped */
    char first_error[200];
};

static int hash_model_max_tokens(const ingot_model *m) { return m->max_step; }
/* no LoRA adapters: requests with one are refused at submit (tests/test_lora.py serves real ones) */
static int hash_model_lora_count(const ingot_model *m) { (void)m; return 0; }

static int hash_model_kv_alloc(ingot_model *m, ingot_kv *kv, int n_blocks, char *err, size_t errlen) {
    (void)m;
    (void)err;
    (void)errlen;
    kv->data = malloc(sizeof(int32_t) * (size_t)n_blocks * INGOT_KV_BLOCK);
    kv->n_blocks = n_blocks;
    if (!kv->data) return -1;
    /* poison: a cell read before it is written gives a wrong token */
    for (size_t i = 0; i < (size_t)n_blocks * INGOT_KV_BLOCK; i++) ((int32_t *)kv->data)[i] = -7;
    return 0;
}

static void hash_model_kv_release(ingot_model *m, ingot_kv *kv) {
    (void)m;
    free(kv->data);
    kv->data = NULL;
    free(kv->state);
    kv->state = NULL;
}

static int hash_model_state_alloc(ingot_model *m, ingot_kv *kv, int n_slots, char *err, size_t errlen) {
    (void)m;
    (void)err;
    (void)errlen;
    kv->state = NULL;
    kv->n_state_slots = 0;
    if (!RECURRENT) return 0;
    seq_state *st = malloc(sizeof(seq_state) * (size_t)n_slots);
    if (!st) return -1;
    /* poison: a slot read before its sequence's first step gives a wrong token */
    for (int i = 0; i < n_slots; i++) st[i] = (seq_state){.hash = 12345u, .next_pos = -7};
    kv->state = st;
    kv->n_state_slots = n_slots;
    return 0;
}

static uint32_t mix(uint32_t h, int32_t v) { return (h ^ (uint32_t)v) * 16777619u; }
static const uint32_t HASH_BASIS = 2166136261u;

static int token_of_hash(uint32_t h) {
    h ^= h >> 13;
    return (int)(h % VOCAB);
}

/* The next token after positions [first, last] holding ids. */
static int next_token(const int32_t *ids, int first, int last) {
    uint32_t h = HASH_BASIS;
    for (int p = first; p <= last; p++) h = mix(h, ids[p]);
    return token_of_hash(h);
}

static void hidden_of_hash(uint32_t h, float *out) {
    for (int d = 0; d < DIM; d++) {
        h = mix(h, d + 1000);
        h ^= h >> 15;
        out[d] = (float)(h % 2000u) / 1000.0f - 1.0f;
    }
}

/* The "final hidden state" at the last of positions [first, last]: DIM values in [-1, 1). */
static void hidden_state(const int32_t *ids, int first, int last, float *out) {
    uint32_t h = HASH_BASIS;
    for (int p = first; p <= last; p++) h = mix(h, ids[p]);
    hidden_of_hash(h, out);
}

static int first_visible(int pos) { return KV_WINDOW > 0 && pos - KV_WINDOW + 1 > 0 ? pos - KV_WINDOW + 1 : 0; }

static void contract_error(ingot_model *m, const char *fmt, int a, int b) {
    if (m->contract_errors++ == 0) snprintf(m->first_error, sizeof m->first_error, fmt, a, b);
}

/* The recurrent model's outputs: each token advances its sequence's hash in the sequence's
 * slot, which must hold the position before it (or the token is at position 0). */
static int recurrent_outputs(ingot_model *m, ingot_kv *kv, const ingot_batch *b) {
    seq_state *states = kv->state;
    uint32_t after[MAX_STEP];
    if (!states || !b->state_slots) {
        contract_error(m, "no state slots (%d of %d)", b->state_slots != NULL, kv->n_state_slots);
        return 0;
    }
    for (int s = 0; s < b->n_seqs; s++)
        for (int r = 0; r < s; r++)
            if (b->state_slots[r] == b->state_slots[s]) contract_error(m, "sequences %d and %d share a slot", r, s);
    for (int i = 0; i < b->n_tokens; i++) {
        const int slot = b->state_slots[b->seq[i]], pos = b->pos[i];
        if (slot < 0 || slot >= kv->n_state_slots) {
            contract_error(m, "token %d: state slot %d out of range", i, slot);
            continue;
        }
        seq_state *st = &states[slot];
        if (pos != 0 && st->next_pos != pos) contract_error(m, "a slot holding position %d is given position %d",
                                                            st->next_pos, pos);
        st->hash = mix(pos == 0 ? HASH_BASIS : st->hash, b->tokens[i]);
        st->next_pos = pos + 1;
        after[i] = st->hash;
    }
    for (int k = 0; k < b->n_logits; k++) {
        float *row = b->logits + (size_t)k * VOCAB;
        const int t = token_of_hash(after[b->logit_rows[k]]);
        for (int v = 0; v < VOCAB; v++) row[v] = v == t ? 1.0f : 0.0f;
    }
    for (int k = 0; k < b->n_hidden; k++) hidden_of_hash(after[b->hidden_rows[k]], b->hidden + (size_t)k * DIM);
    return 0;
}

/* A scenario whose shape matters (which request gets preempted) must not
 * depend on thread timing: the scheduler's thread plans a step as soon as a
 * request arrives, so a step could take the first request alone or the whole
 * first wave (under ASan on a loaded machine the embedding scenario once ran
 * without its preemption). With the gate closed, the first forward waits
 * (forward_waiting says it does) while the rest of the wave is submitted:
 * the first step holds the first request alone, every later one sees all. */
static atomic_int forward_gate_closed, forward_waiting;

static int hash_model_forward(ingot_model *m, ingot_kv *kv, const ingot_batch *b, tp_pool *pool, char *err, size_t errlen) {
    (void)pool;
    if (atomic_load(&forward_gate_closed)) {
        atomic_store(&forward_waiting, 1);
        while (atomic_load(&forward_gate_closed)) {
            const struct timespec pause = {0, 100000};
            nanosleep(&pause, NULL);
        }
    }
    int32_t *cells = kv->data;
    if (b->n_tokens < 1 || b->n_tokens > m->max_step) {
        snprintf(err, errlen, "bad step of %d tokens", b->n_tokens);
        return -1;
    }
    for (int i = 0; i < b->n_tokens; i++) {
        const int s = b->seq[i], pos = b->pos[i];
        if (s < 0 || s >= b->n_seqs || pos < 0 || pos >= b->seq_len[s] || pos >= MAX_CTX) {
            contract_error(m, "token %d: bad sequence or position %d", i, pos);
            continue;
        }
        const int blk = b->block_tables[s][pos / INGOT_KV_BLOCK];
        if (blk < 0 || blk >= kv->n_blocks) {
            contract_error(m, "position %d maps to block %d", pos, blk);
            continue;
        }
        cells[blk * INGOT_KV_BLOCK + pos % INGOT_KV_BLOCK] = b->tokens[i];
    }
    if (RECURRENT) return recurrent_outputs(m, kv, b);
    for (int k = 0; k < b->n_logits; k++) {
        const int i = b->logit_rows[k], s = b->seq[i], pos = b->pos[i];
        int32_t seen[MAX_CTX];
        for (int p = first_visible(pos); p <= pos; p++) {
            const int blk = b->block_tables[s][p / INGOT_KV_BLOCK];
            if (blk < 0 || blk >= kv->n_blocks) {
                contract_error(m, "visible position %d maps to block %d", p, blk);
                seen[p] = -1;
            } else {
                seen[p] = cells[blk * INGOT_KV_BLOCK + p % INGOT_KV_BLOCK];
            }
        }
        float *row = b->logits + (size_t)k * VOCAB;
        const int t = next_token(seen, first_visible(pos), pos);
        for (int v = 0; v < VOCAB; v++) row[v] = v == t ? 1.0f : 0.0f;
    }
    for (int k = 0; k < b->n_hidden; k++) {
        const int i = b->hidden_rows[k], s = b->seq[i], pos = b->pos[i];
        int32_t seen[MAX_CTX];
        for (int p = first_visible(pos); p <= pos; p++) {
            const int blk = b->block_tables[s][p / INGOT_KV_BLOCK];
            seen[p] = blk < 0 || blk >= kv->n_blocks ? -1 : cells[blk * INGOT_KV_BLOCK + p % INGOT_KV_BLOCK];
            if (seen[p] < 0) contract_error(m, "hidden row: visible position %d maps to block %d", p, blk);
        }
        hidden_state(seen, first_visible(pos), pos, b->hidden + (size_t)k * DIM);
    }
    return 0;
}

/* The hash model's entry points, as a generated model exports its table (model_api.h): only what
 * the scheduler calls. */
static const ingot_model_api hash_model = {
    .desc = &hash_model_desc,
    .max_tokens = hash_model_max_tokens,
    .lora_count = hash_model_lora_count,
    .kv_alloc = hash_model_kv_alloc,
    .kv_release = hash_model_kv_release,
    .state_alloc = hash_model_state_alloc,
    .forward = hash_model_forward,
    .moe_observer = &hash_model_moe_observer,
};

/* ---- expected outputs ---------------------------------------------------- */

typedef struct {
    int32_t prompt[MAX_CTX];
    int n_prompt, max_tokens, ignore_eos;
    int32_t expect[MAX_CTX];
    int n_expect;
    int expect_finish;
    sched_task task;        /* SCHED_GENERATE, or an embedding with its expected vector */
    float expect_vec[DIM];
    /* observed */
    uint64_t id;
    int submitted, rejected, done, cancel_after, cancelled_sent;
    int32_t got[MAX_CTX];
    int n_got;
    int finish;
    int got_vec;            /* 1: the DONE event carried an embedding, equal to expect_vec */
} request;

static void expected_output(request *r) {
    if (r->task != SCHED_GENERATE) { /* pooled over the prompt, L2-normalised */
        double sum[DIM] = {0}, norm = 0;
        float h[DIM];
        for (int p = r->task == SCHED_EMBED_LAST ? r->n_prompt - 1 : 0; p < r->n_prompt; p++) {
            hidden_state(r->prompt, first_visible(p), p, h);
            for (int d = 0; d < DIM; d++) sum[d] += h[d];
        }
        for (int d = 0; d < DIM; d++) norm += sum[d] * sum[d];
        for (int d = 0; d < DIM; d++) r->expect_vec[d] = norm > 0 ? (float)(sum[d] / sqrt(norm)) : 0.0f;
        r->n_expect = 0;
        r->expect_finish = SCHED_FINISH_LENGTH;
        return;
    }
    int32_t ids[MAX_CTX];
    memcpy(ids, r->prompt, sizeof(int32_t) * (size_t)r->n_prompt);
    int n = r->n_prompt;
    const int capacity = r->n_prompt + r->max_tokens < MAX_CTX ? r->n_prompt + r->max_tokens : MAX_CTX;
    r->n_expect = 0;
    for (;;) {
        const int t = next_token(ids, first_visible(n - 1), n - 1);
        if (t == STOP_TOKEN && !r->ignore_eos) {
            r->expect_finish = SCHED_FINISH_EOS;
            return;
        }
        r->expect[r->n_expect++] = t;
        ids[n++] = t;
        if (r->n_expect >= r->max_tokens || n >= capacity) {
            r->expect_finish = SCHED_FINISH_LENGTH;
            return;
        }
    }
}

/* ---- harness ------------------------------------------------------------- */

#include "check.h"

static uint64_t rng_state;
static uint32_t rnd(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}
static int rnd_in(int lo, int hi) { return lo + (int)(rnd() % (uint32_t)(hi - lo + 1)); }

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void sleep_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* The most blocks a request may hold at once; it must fit in the pool. */
static int blocks_needed(const request *r) {
    int cap = r->n_prompt + (r->task == SCHED_GENERATE ? r->max_tokens : 0);
    if (cap > MAX_CTX) cap = MAX_CTX;
    return (cap + INGOT_KV_BLOCK - 1) / INGOT_KV_BLOCK;
}

typedef struct {
    int kv_blocks, max_running, max_batch_tokens, prefix_cache, n_requests, cancels, late;
    int first_alone; /* the first request's first step runs alone, then the rest of the wave arrives */
} scenario;

static int submit(sched *s, request *r) {
    sched_request sr = {.prompt = r->prompt, .n_prompt = (size_t)r->n_prompt, .max_tokens = r->max_tokens,
                        .top_logprobs = -1, .ignore_eos = r->ignore_eos, .task = r->task};
    sr.sampling = samp_default_params(); /* greedy */
    char err[200];
    r->submitted = 1;
    if (sched_submit(s, &sr, &r->id, err, sizeof err) != 0) {
        r->rejected = 1;
        r->done = 1;
        return -1;
    }
    return 0;
}

static int n_preempted; /* preemptions of the scenarios run since it was reset */

/* Runs one scenario; returns 0 when every check held. */
static int run_scenario(const char *label, const scenario *sc, request *reqs) {
    const int fails_before = n_fail;
    ingot_model model = {.max_step = MAX_STEP};
    int32_t stops[] = {STOP_TOKEN};
    sched_config cfg = {.n_threads = 1, .kv_blocks = sc->kv_blocks, .max_batch_tokens = sc->max_batch_tokens,
                        .max_running = sc->max_running, .prefix_cache = sc->prefix_cache, .max_waiting = 4096,
                        .stop_ids = stops, .n_stop_ids = 1};
    char err[256];
    sched *s = sched_create(&hash_model, &model, &cfg, err, sizeof err);
    CHECK(s != NULL, "%s: sched_create: %s", label, err);
    if (!s) return -1;
    const int n_first = sc->n_requests - sc->late;
    if (sc->first_alone) {
        atomic_store(&forward_waiting, 0);
        atomic_store(&forward_gate_closed, 1);
        if (submit(s, &reqs[0]) == 0)
            for (const double until = now_s() + 5.0; !atomic_load(&forward_waiting) && now_s() < until;) sleep_us(100);
        CHECK(atomic_load(&forward_waiting), "%s: the first request's step never started", label);
        for (int i = 1; i < n_first; i++) submit(s, &reqs[i]);
        atomic_store(&forward_gate_closed, 0);
    } else {
        for (int i = 0; i < n_first; i++) submit(s, &reqs[i]);
    }
    int n_done = 0, n_events = 0;
    for (int i = 0; i < sc->n_requests; i++) n_done += reqs[i].done;
    const double deadline = now_s() + 20.0;
    if (getenv("TEST_SCHED_VERBOSE"))
        for (int i = 0; i < sc->n_requests; i++)
            printf("%s: request %d: prompt %d, max %d, needs %d blocks, %s\n", label, i, reqs[i].n_prompt,
                   reqs[i].max_tokens, blocks_needed(&reqs[i]), reqs[i].submitted ? (reqs[i].rejected ? "rejected" : "submitted") : "late");
    sched_event ev[64];
    while (n_done < sc->n_requests && now_s() < deadline) {
        size_t n = sched_poll(s, ev, 64);
        if (n == 0) sleep_us(200);
        for (size_t e = 0; e < n; e++) {
            request *r = NULL;
            for (int i = 0; i < sc->n_requests; i++)
                if (reqs[i].submitted && !reqs[i].rejected && reqs[i].id == ev[e].id) r = &reqs[i];
            CHECK(r != NULL && !r->done, "%s: event for an unknown or finished id %llu", label,
                  (unsigned long long)ev[e].id);
            if (!r || r->done) continue;
            n_events++;
            if (ev[e].kind == SCHED_EV_TOKEN) {
                if (r->n_got < MAX_CTX) r->got[r->n_got++] = ev[e].token;
                if (r->cancel_after > 0 && r->n_got >= r->cancel_after && !r->cancelled_sent) {
                    sched_cancel(s, r->id);
                    r->cancelled_sent = 1;
                }
            } else {
                r->done = 1;
                r->finish = ev[e].finish;
                if (ev[e].embedding) {
                    float worst = 0;
                    for (int d = 0; d < DIM; d++) {
                        const float diff = fabsf(ev[e].embedding[d] - r->expect_vec[d]);
                        worst = diff > worst ? diff : worst;
                    }
                    CHECK(r->task != SCHED_GENERATE && worst < 1e-5f, "%s: request %llu: embedding off by %g",
                          label, (unsigned long long)r->id, worst);
                    r->got_vec = 1;
                    free(ev[e].embedding);
                }
                n_done++;
            }
        }
        /* late arrivals: one per few events once the first wave is moving, or
         * the next one at once when nothing is in flight */
        int in_flight = 0;
        for (int i = 0; i < sc->n_requests; i++) in_flight += reqs[i].submitted && !reqs[i].done;
        for (int i = n_first; i < sc->n_requests; i++) {
            if (reqs[i].submitted) continue;
            if (n_events > 4 * (i - n_first + 1) || in_flight == 0) {
                submit(s, &reqs[i]);
                in_flight++;
            }
            break;
        }
        n_done = 0;
        for (int i = 0; i < sc->n_requests; i++) n_done += reqs[i].done;
    }
    sched_stats st;
    sched_get_stats(s, &st);
    CHECK(n_done == sc->n_requests, "%s: stalled: %d of %d requests finished in 20 s (running %d, waiting %d, "
          "%d of %d blocks in use, steps %llu, stalled flag %d)", label, n_done, sc->n_requests, st.running,
          st.waiting, st.kv_blocks_used, st.kv_blocks_total, (unsigned long long)st.steps, st.stalled);
    for (int i = 0; i < sc->n_requests; i++) {
        request *r = &reqs[i];
        if (!r->done) continue;
        if (r->rejected) {
            CHECK(blocks_needed(r) > sc->kv_blocks, "%s: request %d (%d blocks) rejected by a pool of %d", label, i,
                  blocks_needed(r), sc->kv_blocks);
            continue;
        }
        CHECK(blocks_needed(r) <= sc->kv_blocks || KV_WINDOW > 0, "%s: request %d admitted, needs %d of %d blocks",
              label, i, blocks_needed(r), sc->kv_blocks);
        if (r->finish == SCHED_FINISH_CANCELLED) {
            CHECK(r->cancelled_sent, "%s: request %d cancelled unasked", label, i);
            CHECK(r->n_got <= r->n_expect && !memcmp(r->got, r->expect, sizeof(int32_t) * (size_t)r->n_got),
                  "%s: request %d's tokens before its cancel differ", label, i);
            continue;
        }
        CHECK(r->finish == r->expect_finish, "%s: request %d finished with %d, expected %d", label, i, r->finish,
              r->expect_finish);
        CHECK(r->got_vec == (r->task != SCHED_GENERATE), "%s: request %d (task %d) %s an embedding", label, i,
              r->task, r->got_vec ? "got" : "did not get");
        int agree = 0;
        while (agree < r->n_got && agree < r->n_expect && r->got[agree] == r->expect[agree]) agree++;
        CHECK(agree == r->n_got && agree == r->n_expect, "%s: request %d: %d tokens, expected %d (first differing "
              "at %d)", label, i, r->n_got, r->n_expect, agree);
    }
    /* every block comes back once nothing is live: none in use */
    for (int tries = 0; tries < 200; tries++) {
        sched_get_stats(s, &st);
        if (st.kv_blocks_used == 0 && st.running == 0 && st.waiting == 0) break;
        sleep_us(1000);
    }
    CHECK(st.kv_blocks_used == 0, "%s: %d blocks still in use after every request ended", label, st.kv_blocks_used);
    CHECK(st.running == 0 && st.waiting == 0, "%s: gauges say %d running, %d waiting with nothing live", label,
          st.running, st.waiting);
    CHECK(st.kv_blocks_cached <= st.kv_blocks_total, "%s: %d cached of %d", label, st.kv_blocks_cached,
          st.kv_blocks_total);
    CHECK(!st.stalled, "%s: stalled flag set", label);
    n_preempted += (int)st.preemptions;
    sched_destroy(s);
    CHECK(model.contract_errors == 0, "%s: %d forward-contract errors, first: %s", label, model.contract_errors,
          model.first_error);
    return n_fail == fails_before ? 0 : -1;
}

static void make_requests(request *reqs, const scenario *sc, int max_prompt, int max_new) {
    int32_t shared[MAX_CTX];
    for (int i = 0; i < MAX_CTX; i++) shared[i] = rnd_in(1, VOCAB - 1);
    for (int i = 0; i < sc->n_requests; i++) {
        request *r = &reqs[i];
        memset(r, 0, sizeof *r);
        r->n_prompt = rnd_in(1, max_prompt);
        r->max_tokens = rnd_in(1, max_new);
        const int prefix = rnd() % 2 ? rnd_in(0, r->n_prompt) : 0; /* shared prefixes: prefix-cache hits */
        for (int k = 0; k < r->n_prompt; k++) r->prompt[k] = k < prefix ? shared[k] : rnd_in(1, VOCAB - 1);
        r->ignore_eos = rnd() % 3 != 0;
        r->cancel_after = (int)(rnd() % 100) < sc->cancels ? rnd_in(1, 6) : 0;
        /* a quarter are embeddings: prefill-only, pooled across their chunks */
        const int kind = rnd_in(0, 7);
        r->task = kind == 0 ? SCHED_EMBED_LAST : kind == 1 ? SCHED_EMBED_MEAN : SCHED_GENERATE;
        expected_output(r);
    }
}

/* The reported stall: a pool of 24 blocks, 8 running, 24 requests of about
 * 40 prompt tokens and 120 new ones, all at once, with a shared prefix. */
static void test_tight_pool_all_finish(void) {
    static request reqs[24];
    scenario sc = {.kv_blocks = 24, .max_running = 8, .max_batch_tokens = 64, .prefix_cache = 1, .n_requests = 24};
    int32_t system[32];
    for (int k = 0; k < 32; k++) system[k] = rnd_in(1, VOCAB - 1);
    for (int i = 0; i < 24; i++) {
        request *r = &reqs[i];
        memset(r, 0, sizeof *r);
        r->n_prompt = 40 + i % 5;
        memcpy(r->prompt, system, sizeof system);
        for (int k = 32; k < r->n_prompt; k++) r->prompt[k] = rnd_in(1, VOCAB - 1);
        r->max_tokens = 120;
        r->ignore_eos = 1;
        expected_output(r);
    }
    run_scenario("tight pool", &sc, reqs);
}

/* An embedding preempted mid-prefill: a generation (15 prompt tokens) and a
 * long mean-pooled embedding fill a 4-block pool; the embedding's chunks go
 * in beside the generation's decode steps until the generation needs its
 * second block, and the newest sequence, the embedding, is preempted with
 * part of its prompt pooled. Recomputed, its vector must be the pool of one
 * pass over the prompt. A last-pooled embedding waits behind them. */
static void test_embedding_preempted_mid_prefill(void) {
    static request reqs[3];
    scenario sc = {.kv_blocks = 4, .max_running = 3, .max_batch_tokens = 8, .prefix_cache = 0, .n_requests = 3,
                   .first_alone = 1};
    const sched_task tasks[3] = {SCHED_GENERATE, SCHED_EMBED_MEAN, SCHED_EMBED_LAST};
    for (int i = 0; i < 3; i++) {
        request *r = &reqs[i];
        memset(r, 0, sizeof *r);
        r->task = tasks[i];
        r->n_prompt = i == 0 ? 15 : 40;
        for (int k = 0; k < r->n_prompt; k++) r->prompt[k] = rnd_in(1, VOCAB - 1);
        r->max_tokens = 20;
        r->ignore_eos = 1;
        expected_output(r);
    }
    n_preempted = 0;
    run_scenario("embedding preempted", &sc, reqs);
    CHECK(n_preempted > 0, "embedding preempted: no preemption happened (the scenario no longer tests it)%s", "");
}

static void test_randomized(int first, int seeds) {
    static request reqs[64];
    int failed_seeds = 0;
    for (int seed = first; seed < first + seeds; seed++) {
        rng_state = (uint64_t)seed * 0x9E3779B97F4A7C15ull;
        scenario sc = {0};
        sc.kv_blocks = rnd_in(2, 14);
        sc.max_running = rnd_in(1, 8);
        sc.max_batch_tokens = rnd_in(sc.max_running, MAX_STEP);
        sc.prefix_cache = rnd() % 4 != 0;
        sc.n_requests = rnd_in(1, 64);
        sc.cancels = rnd() % 2 ? 20 : 0;
        sc.late = rnd_in(0, sc.n_requests / 2);
        make_requests(reqs, &sc, 60, 90);
        char label[64];
        snprintf(label, sizeof label, "seed %d (%d blocks, %d running, %d requests)", seed, sc.kv_blocks,
                 sc.max_running, sc.n_requests);
        if (run_scenario(label, &sc, reqs) != 0 && ++failed_seeds >= 3) break; /* enough to debug */
    }
}

/* test_scheduler [SEEDS [FIRST_SEED]]: a failing seed runs alone with SEEDS 1. */
int main(int argc, char **argv) {
    const int seeds = argc > 1 ? atoi(argv[1]) : 150;
    const int first = argc > 2 ? atoi(argv[2]) : 1;
    rng_state = 42;
    if (argc <= 2) test_tight_pool_all_finish();
    if (argc <= 2) test_embedding_preempted_mid_prefill();
    test_randomized(first, seeds);
    return check_summary();
}
