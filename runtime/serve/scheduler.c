/* scheduler.c — continuous batching over the paged KV cache, one forward per step.
 *
 * Sequence life: submitted → waiting → (admitted) running → finished.
 * A running sequence holds tokens[0..n_tokens) (prompt, then every sampled
 * token) of which the first n_computed are in the KV cache; it always has
 * at least one pending token (the last sampled one, or the rest of the
 * prompt). A step feeds one token of every sequence with exactly one pending
 * (decode) and then prefill chunks of the others, within the token budget;
 * a sequence whose pending tokens all went in gets a logits row and samples.
 * Preemption frees all of a sequence's blocks and requeues it at the front:
 * it recomputes tokens[0..n_tokens) (prefix-cache hits included) and its
 * sampler simply continues, so its output does not change.
 *
 * Progress: a waiting sequence holds no KV block (a prefix match that cannot
 * be admitted at once is released again), and unreferenced cached blocks are
 * evictable, so when nothing runs the whole pool is available to the head of
 * the queue, which sched_submit checked fits in it. Admission is FIFO so a
 * large request is not starved by small ones behind it.
 *
 * The drafts of speculative decoding come from scheduler_draft.c; the state
 * both files share (sched_seq, struct sched) is in scheduler_state.h.
 */
#include "scheduler.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "scheduler_state.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int sched_spec_parse(const char *name, sched_spec_mode *out) {
    if (!strcmp(name, "off")) *out = SCHED_SPEC_OFF;
    else if (!strcmp(name, "ngram")) *out = SCHED_SPEC_NGRAM;
    else if (!strcmp(name, "draft")) *out = SCHED_SPEC_DRAFT;
    else return -1;
    return 0;
}

const char *sched_spec_name(sched_spec_mode mode) {
    return mode == SCHED_SPEC_NGRAM ? "ngram" : mode == SCHED_SPEC_DRAFT ? "draft" : "off";
}

/* ---- events ------------------------------------------------------------ */

static int push_event(sched *s, const sched_event *ev) {
    pthread_mutex_lock(&s->mu);
    if (s->n_events == s->cap_events) {
        size_t cap = s->cap_events ? s->cap_events * 2 : 256;
        sched_event *e = realloc(s->events, cap * sizeof *e);
        if (!e) { /* out of memory: drop; the consumer sees the DONE of a later retry */
            pthread_mutex_unlock(&s->mu);
            return -1;
        }
        s->events = e;
        s->cap_events = cap;
    }
    s->events[s->n_events++] = *ev;
    pthread_mutex_unlock(&s->mu);
    return 0;
}

size_t sched_poll(sched *s, sched_event *out, size_t cap) {
    pthread_mutex_lock(&s->mu);
    size_t n = s->n_events < cap ? s->n_events : cap;
    if (n > 0) {
        memcpy(out, s->events, n * sizeof *out);
        memmove(s->events, s->events + n, (s->n_events - n) * sizeof *out);
        s->n_events -= n;
    }
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* ---- sequences --------------------------------------------------------- */

static void seq_free(sched_seq *q) {
    if (!q) return;
    free(q->tokens);
    free(q->blocks);
    free(q->pool_sum);
    free(q->drafts);
    free(q->draft_dist);
    samp_free(&q->sampler);
    samp_free(&q->draft_sampler);
    if (q->constraint) q->constraint->free(q->constraint);
    free(q);
}

/* The start of a sequence's chain of block hashes: its adapter's, so that a block the base model
 * (or another adapter) computed is never taken for one it would compute differently. */
static uint64_t hash_seed(const sched_seq *q) { return q->adapter ? 0x9E3779B97F4A7C15ull * (uint64_t)q->adapter : 0; }

static void release_blocks(sched *s, sched_seq *q) {
    for (int i = 0; i < q->n_blocks; i++)
        if (q->blocks[i] >= 0) kv_unref(s->blocks, q->blocks[i]); /* -1: released out of the window */
    q->n_blocks = 0;
    q->n_computed = 0;
    /* a recomputed embedding pools its rows again from the first */
    if (q->pool_sum) memset(q->pool_sum, 0, sizeof(double) * (size_t)s->api->desc->dim);
    q->n_published = 0;
    q->last_hash = hash_seed(q);
    q->matched = 0;
    q->draft_computed = 0;
}

static void finish(sched *s, sched_seq *q, sched_finish why, const char *error, float *embedding) {
    pthread_mutex_lock(&s->mu);
    s->n_live--;
    pthread_mutex_unlock(&s->mu);
    sched_event ev;
    memset(&ev, 0, sizeof ev);
    ev.id = q->id;
    ev.kind = SCHED_EV_DONE;
    ev.finish = why;
    ev.prompt_tokens = q->n_prompt;
    ev.completion_tokens = q->generated;
    ev.cached_tokens = q->cached_tokens;
    ev.embedding = embedding;
    if (error) snprintf(ev.error, sizeof ev.error, "%s", error);
    if (push_event(s, &ev) != 0) free(embedding);
    release_blocks(s, q);
    seq_free(q);
}

static void waiting_push_back(sched *s, sched_seq *q) {
    q->next = NULL;
    if (s->waiting_tail) s->waiting_tail->next = q;
    else s->waiting_head = q;
    s->waiting_tail = q;
    s->n_waiting++;
}

static void waiting_push_front(sched *s, sched_seq *q) {
    q->next = s->waiting_head;
    s->waiting_head = q;
    if (!s->waiting_tail) s->waiting_tail = q;
    s->n_waiting++;
}

static sched_seq *waiting_pop(sched *s) {
    sched_seq *q = s->waiting_head;
    if (!q) return NULL;
    s->waiting_head = q->next;
    if (!s->waiting_head) s->waiting_tail = NULL;
    s->n_waiting--;
    q->next = NULL;
    return q;
}

static void running_remove(sched *s, int i) {
    s->free_slots[s->n_free_slots++] = s->running[i]->state_slot;
    s->running[i]->state_slot = -1;
    s->running[i] = s->running[--s->n_running];
}

/* ---- submission -------------------------------------------------------- */

/* The checks that can refuse a request; sched_submit frees its constraint after a refusal. */
static int submit(sched *s, const sched_request *r, uint64_t *id, char *err, size_t errlen);

int sched_submit(sched *s, const sched_request *r, uint64_t *id, char *err, size_t errlen) {
    const int rc = submit(s, r, id, err, errlen);
    if (rc != 0 && r->constraint) r->constraint->free(r->constraint);
    return rc;
}

static int submit(sched *s, const sched_request *r, uint64_t *id, char *err, size_t errlen) {
    if (r->n_prompt == 0) {
        snprintf(err, errlen, "the prompt is empty");
        return -1;
    }
    const int embed = r->task != SCHED_GENERATE;
    if (!embed && r->max_tokens < 1) {
        snprintf(err, errlen, "max_tokens must be at least 1");
        return -1;
    }
    if (embed && r->n_prompt > (size_t)s->max_ctx) {
        snprintf(err, errlen, "context_length_exceeded: the input has %zu tokens; this model's context is %d",
                 r->n_prompt, s->max_ctx);
        return -1;
    }
    if (!embed && r->n_prompt >= (size_t)s->max_ctx) {
        snprintf(err, errlen, "context_length_exceeded: the prompt has %zu tokens; this model's context is %d",
                 r->n_prompt, s->max_ctx);
        return -1;
    }
    if (r->adapter < 0 || r->adapter > s->api->lora_count(s->model)) {
        snprintf(err, errlen, "adapter %d is not one of the model's %d", r->adapter, s->api->lora_count(s->model));
        return -1;
    }
    for (size_t i = 0; i < r->n_prompt; i++) {
        if (r->prompt[i] < 0 || r->prompt[i] >= s->vocab) {
            snprintf(err, errlen, "token id %d is out of the vocabulary (%d)", r->prompt[i], s->vocab);
            return -1;
        }
    }
    long capacity = (long)r->n_prompt + (embed ? 0 : r->max_tokens);
    if (capacity > s->max_ctx) capacity = s->max_ctx;
    /* the most blocks it holds at once: all of them, or with a sliding
     * window, its prompt (admitted whole) and then a window plus a step */
    int need = blocks_for(s, (int)capacity);
    if (s->api->desc->kv_window > 0) {
        int windowed = blocks_for(s, s->api->desc->kv_window + s->cfg.max_batch_tokens) + 1;
        if (windowed < blocks_for(s, (int)r->n_prompt)) windowed = blocks_for(s, (int)r->n_prompt);
        if (windowed < need) need = windowed;
    }
    if (need > kv_total(s->blocks)) {
        snprintf(err, errlen, "the request needs %d KV blocks; the pool has %d", need, kv_total(s->blocks));
        return -1;
    }
    sched_seq *q = calloc(1, sizeof *q);
    if (!q) goto oom;
    q->capacity = (int)capacity;
    q->tokens = malloc(sizeof(int32_t) * (size_t)capacity);
    q->blocks = malloc(sizeof(int32_t) * (size_t)blocks_for(s, (int)capacity));
    if (!q->tokens || !q->blocks || samp_init(&q->sampler, s->vocab, &r->sampling) != 0) goto oom;
    memcpy(q->tokens, r->prompt, sizeof(int32_t) * r->n_prompt);
    q->n_prompt = q->n_tokens = (int)r->n_prompt;
    q->max_tokens = r->max_tokens;
    q->top_logprobs = r->top_logprobs > SCHED_MAX_TOP_LOGPROBS ? SCHED_MAX_TOP_LOGPROBS : r->top_logprobs;
    q->ignore_eos = r->ignore_eos;
    q->task = r->task;
    q->adapter = r->adapter;
    q->last_hash = hash_seed(q);
    if (embed && !(q->pool_sum = calloc((size_t)s->dim, sizeof(double)))) goto oom;
    /* a grammar would have to advance through drafts and back on a rejection */
    q->spec = s->cfg.spec != SCHED_SPEC_OFF && r->task == SCHED_GENERATE && !r->constraint;
    q->spec_k = s->cfg.spec_k;
    if (q->spec && s->cfg.spec == SCHED_SPEC_DRAFT) {
        /* the draft's own generator: the request's seed, another stream */
        samp_params dp = r->sampling;
        dp.seed ^= 0x9e3779b97f4a7c15ULL;
        q->drafts = malloc(sizeof(int32_t) * (size_t)s->cfg.spec_k);
        if (!q->drafts || samp_init(&q->draft_sampler, s->vocab, &dp) != 0) goto oom;
        if (r->sampling.temperature > 0.0f &&
            !(q->draft_dist = malloc(sizeof(float) * (size_t)s->cfg.spec_k * (size_t)s->vocab)))
            goto oom;
    }

    pthread_mutex_lock(&s->mu);
    /* What counts is what is live, not a snapshot of the queue: requests that
     * arrived in one burst are all "incoming" before the scheduler admits
     * the first of them, and max_running of them will run at once. */
    if (s->n_live >= s->cfg.max_running + s->cfg.max_waiting) {
        pthread_mutex_unlock(&s->mu);
        seq_free(q);
        snprintf(err, errlen, "the waiting queue is full (%d running, %d waiting)", s->cfg.max_running,
                 s->cfg.max_waiting);
        return -1;
    }
    s->n_live++;
    q->constraint = r->constraint;
    q->id = ++s->next_id;
    if (s->incoming_tail) s->incoming_tail->next = q;
    else s->incoming_head = q;
    s->incoming_tail = q;
    s->n_incoming++;
    *id = q->id; /* before unlocking: the scheduler thread may finish and free q at once */
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
    return 0;
oom:
    seq_free(q);
    snprintf(err, errlen, "out of memory");
    return -1;
}

void sched_cancel(sched *s, uint64_t id) {
    pthread_mutex_lock(&s->mu);
    if (s->n_cancels == s->cap_cancels) {
        int cap = s->cap_cancels ? s->cap_cancels * 2 : 64;
        uint64_t *c = realloc(s->cancels, sizeof *c * (size_t)cap);
        if (!c) {
            pthread_mutex_unlock(&s->mu);
            return;
        }
        s->cancels = c;
        s->cap_cancels = cap;
    }
    s->cancels[s->n_cancels++] = id;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
}

void sched_get_stats(sched *s, sched_stats *out) {
    pthread_mutex_lock(&s->mu);
    *out = s->stats;
    pthread_mutex_unlock(&s->mu);
}

/* ---- one step ---------------------------------------------------------- */

/* Takes submissions and cancellations from the other threads. */
static void intake(sched *s) {
    pthread_mutex_lock(&s->mu);
    sched_seq *in = s->incoming_head;
    s->incoming_head = s->incoming_tail = NULL;
    s->n_incoming = 0;
    int n_cancels = s->n_cancels;
    uint64_t cancels[256];
    if (n_cancels > 256) n_cancels = 256;
    if (n_cancels > 0) {
        memcpy(cancels, s->cancels, sizeof(uint64_t) * (size_t)n_cancels);
        memmove(s->cancels, s->cancels + n_cancels, sizeof(uint64_t) * (size_t)(s->n_cancels - n_cancels));
        s->n_cancels -= n_cancels;
    }
    pthread_mutex_unlock(&s->mu);

    while (in) {
        sched_seq *next = in->next;
        waiting_push_back(s, in);
        in = next;
    }
    for (int c = 0; c < n_cancels; c++) {
        for (int i = 0; i < s->n_running; i++)
            if (s->running[i]->id == cancels[c]) s->running[i]->cancelled = 1;
        for (sched_seq *q = s->waiting_head; q; q = q->next)
            if (q->id == cancels[c]) q->cancelled = 1;
    }
    for (int i = s->n_running - 1; i >= 0; i--) {
        if (s->running[i]->cancelled) {
            sched_seq *q = s->running[i];
            running_remove(s, i);
            finish(s, q, SCHED_FINISH_CANCELLED, NULL, NULL);
        }
    }
    sched_seq *keep_head = NULL, *keep_tail = NULL;
    int kept = 0;
    while (s->waiting_head) {
        sched_seq *q = waiting_pop(s);
        if (q->cancelled) {
            finish(s, q, SCHED_FINISH_CANCELLED, NULL, NULL);
            continue;
        }
        if (keep_tail) keep_tail->next = q;
        else keep_head = q;
        keep_tail = q;
        kept++;
    }
    s->waiting_head = keep_head;
    s->waiting_tail = keep_tail;
    s->n_waiting = kept;
}

/* Reuses cached blocks for the sequence's leading full blocks. The last
 * token is never matched: its logits are needed to sample. */
static void match_prefix(sched *s, sched_seq *q) {
    if (q->matched || !s->cfg.prefix_cache || q->task == SCHED_EMBED_MEAN) return;
    q->matched = 1;
    const int full = (q->n_tokens - 1) / s->block;
    uint64_t h = hash_seed(q);
    for (int i = 0; i < full; i++) {
        const int32_t *toks = q->tokens + (size_t)i * s->block;
        const uint64_t hi = kv_hash_block(h, toks, s->block);
        const int b = kv_lookup(s->blocks, hi, toks);
        if (b < 0) break;
        q->blocks[q->n_blocks++] = b;
        q->n_computed += s->block;
        q->n_published = q->n_blocks;
        q->last_hash = h = hi;
    }
    if (q->admissions == 0) q->cached_tokens = q->n_computed;
    pthread_mutex_lock(&s->mu);
    s->stats.prefix_hit_tokens += (uint64_t)q->n_computed;
    s->stats.prefix_lookup_tokens += (uint64_t)(q->n_tokens - 1);
    pthread_mutex_unlock(&s->mu);
}

/* Blocks a sequence gets at admission: all its tokens' blocks, so its
 * prefill never waits for memory; with a sliding window at most a window
 * plus a step (blocks behind the window are released as prefill advances,
 * and step() allocates the rest chunk by chunk), or a long preempted
 * sequence could need more than the whole pool to come back. */
static int admission_blocks(const sched *s, const sched_seq *q) {
    int n = blocks_for(s, q->n_tokens);
    if (s->api->desc->kv_window > 0) {
        const int windowed = blocks_for(s, s->api->desc->kv_window + s->cfg.max_batch_tokens) + 1;
        if (windowed < n) n = windowed;
    }
    return n;
}

/* Gives q blocks for positions up to n_computed + k (a prefill chunk of k
 * tokens) while the pool has them; returns the chunk length they cover. */
static int cover_chunk(sched *s, sched_seq *q, int k) {
    while (q->n_blocks * s->block < q->n_computed + k) {
        const int b = kv_alloc(s->blocks);
        if (b < 0) break;
        q->blocks[q->n_blocks++] = b;
    }
    const int covered = q->n_blocks * s->block - q->n_computed;
    return covered < k ? covered : k;
}

/* Admits waiting sequences (FIFO) while the pool holds their admission
 * blocks and the running set has room. */
static void admit(sched *s) {
    while (s->waiting_head && s->n_running < s->cfg.max_running) {
        sched_seq *q = s->waiting_head;
        match_prefix(s, q);
        int need = admission_blocks(s, q) - q->n_blocks;
        if (need < 0) need = 0;
        if (need > kv_available(s->blocks)) {
            /* Drop the prefix match: a waiting sequence that pinned blocks
             * could keep the pool from ever holding what it needs once
             * nothing runs. Its blocks stay cached and are matched again at
             * the next attempt unless evicted meanwhile. */
            release_blocks(s, q);
            break;
        }
        for (int i = 0; i < need; i++) q->blocks[q->n_blocks++] = kv_alloc(s->blocks);
        waiting_pop(s);
        q->admit_order = ++s->admit_counter;
        q->admissions++;
        q->state_slot = s->free_slots[--s->n_free_slots]; /* one free per place in the running set */
        s->running[s->n_running++] = q;
    }
}

/* Frees the most recently admitted running sequence and requeues it. */
static void preempt_newest(sched *s) {
    int victim = 0;
    for (int i = 1; i < s->n_running; i++)
        if (s->running[i]->admit_order > s->running[victim]->admit_order) victim = i;
    sched_seq *q = s->running[victim];
    running_remove(s, victim);
    release_blocks(s, q);
    waiting_push_front(s, q);
    pthread_mutex_lock(&s->mu);
    s->stats.preemptions++;
    pthread_mutex_unlock(&s->mu);
}

/* Sliding-window models: blocks that no future query can see (every
 * position < n_computed - window + 1) go back to the pool, so a sequence's
 * memory is bounded by the window, not its length. */
static void release_out_of_window(sched *s, sched_seq *q) {
    const int window = s->api->desc->kv_window;
    if (window <= 0) return;
    const int first_visible = q->n_computed - window + 1;
    for (int i = 0; i < q->n_blocks && (i + 1) * s->block <= first_visible; i++) {
        if (q->blocks[i] < 0) continue;
        kv_unref(s->blocks, q->blocks[i]);
        q->blocks[i] = -1;
    }
}

/* Publishes the sequence's newly full, computed blocks to the prefix cache. */
static void publish_blocks(sched *s, sched_seq *q) {
    if (!s->cfg.prefix_cache) return;
    const int full = q->n_computed / s->block;
    while (q->n_published < full) {
        const int i = q->n_published;
        const int32_t *toks = q->tokens + (size_t)i * s->block;
        const uint64_t h = kv_hash_block(q->last_hash, toks, s->block);
        kv_publish(s->blocks, q->blocks[i], h, toks);
        q->last_hash = h;
        q->n_published++;
    }
}

static void emit_token(sched *s, sched_seq *q, const float *logits, int token) {
    sched_event ev;
    memset(&ev, 0, sizeof ev);
    ev.id = q->id;
    ev.kind = SCHED_EV_TOKEN;
    ev.token = token;
    if (q->top_logprobs >= 0) {
        /* log-softmax of the raw logits (before penalties and temperature) */
        double maxv = logits[0], sum = 0.0;
        for (int i = 1; i < s->vocab; i++) maxv = logits[i] > maxv ? logits[i] : maxv;
        for (int i = 0; i < s->vocab; i++) sum += exp((double)logits[i] - maxv);
        const double lse = maxv + log(sum);
        ev.logprob = (float)(logits[token] - lse);
        ev.n_top = q->top_logprobs;
        for (int k = 0; k < ev.n_top; k++) ev.top_ids[k] = -1;
        for (int i = 0; i < s->vocab; i++) { /* insertion into a tiny sorted list */
            int k = ev.n_top;
            while (k > 0 && (ev.top_ids[k - 1] < 0 || logits[i] > logits[ev.top_ids[k - 1]])) k--;
            if (k >= ev.n_top) continue;
            memmove(&ev.top_ids[k + 1], &ev.top_ids[k], sizeof(int32_t) * (size_t)(ev.n_top - k - 1));
            ev.top_ids[k] = i;
        }
        for (int k = 0; k < ev.n_top; k++) ev.top_logprobs[k] = (float)(logits[ev.top_ids[k]] - lse);
    }
    push_event(s, &ev);
}

static int is_stop(const sched *s, int tok) {
    for (int i = 0; i < s->n_stop_ids; i++)
        if (s->stop_ids[i] == tok) return 1;
    return 0;
}

/* Takes an embedding sequence's hidden rows of this step (the next ones from
 * *hrow on: every row of its chunk for mean pooling, the last for last-token
 * pooling once its prompt is complete); when the prompt is complete, ends
 * it with its pooled, L2-normalised vector. */
static void pool_rows(sched *s, sched_seq *q, int chunk, int *hrow) {
    const int D = s->dim;
    const int rows = q->task == SCHED_EMBED_MEAN ? chunk : (q->n_computed == q->n_tokens);
    for (int r = 0; r < rows; r++) {
        const float *h = s->hidden + (size_t)(*hrow)++ * D;
        if (q->task == SCHED_EMBED_MEAN)
            for (int i = 0; i < D; i++) q->pool_sum[i] += h[i];
        else
            for (int i = 0; i < D; i++) q->pool_sum[i] = h[i];
    }
    if (q->n_computed != q->n_tokens) return;
    double norm = 0.0;
    for (int i = 0; i < D; i++) norm += q->pool_sum[i] * q->pool_sum[i];
    norm = sqrt(norm);
    /* a zero vector stays zero rather than becoming NaN */
    const double scale = norm > 0.0 ? 1.0 / norm : 0.0;
    float *v = malloc(sizeof(float) * (size_t)D);
    int i_run = 0;
    while (s->running[i_run] != q) i_run++;
    running_remove(s, i_run);
    if (!v) {
        finish(s, q, SCHED_FINISH_ERROR, "out of memory", NULL);
        return;
    }
    for (int i = 0; i < D; i++) v[i] = (float)(q->pool_sum[i] * scale);
    finish(s, q, SCHED_FINISH_LENGTH, NULL, v);
}

/* After a verification that rejected drafts: blocks past the one the next
 * decode writes held only rejected positions, so they go back to the pool
 * (they were never published). */
static void release_beyond(sched *s, sched_seq *q) {
    const int keep = blocks_for(s, q->n_tokens);
    while (q->n_blocks > keep) kv_unref(s->blocks, q->blocks[--q->n_blocks]);
}

/* Samples from a generating sequence's logits rows (lg: k + 1 rows; the
 * first follows its last token, row t + 1 follows draft[t]) and emits the
 * tokens: with no drafts the one token plain decoding samples; else the
 * drafts verification accepts, left to right, then the token verification
 * drew where it stopped (the replacement of a rejected draft, or after all k
 * the next token). Each row is processed as plain decoding processes it at
 * that position (its history is the tokens before it). Accepted drafts'
 * positions join the KV cache (n_computed). Constrained sequences never
 * draft (k is 0). Returns 1 when the sequence ended (it is freed), else 0. */
static int sample_rows(sched *s, sched_seq *q, const float *lg_rows, const int32_t *draft, int k,
                       double *mask_seconds) {
    int i_run = 0;
    while (s->running[i_run] != q) i_run++;
    if (q->generated >= q->max_tokens || q->n_tokens >= q->capacity) {
        /* recomputed after a preemption that came right after its last token */
        running_remove(s, i_run);
        finish(s, q, SCHED_FINISH_LENGTH, NULL, NULL);
        return 1;
    }
    int accepted_drafts = 0, ended = 0;
    for (int t = 0; t <= k && !ended; t++) {
        float *lg = (float *)lg_rows + (size_t)t * s->vocab;
        if (q->top_logprobs >= 0) memcpy(s->raw_logits, lg, sizeof(float) * (size_t)s->vocab);
        if (q->constraint) {
            const double tm = now_s();
            char error[160];
            const int rc = q->constraint->mask(q->constraint, lg, s->vocab, error, sizeof error);
            *mask_seconds += now_s() - tm;
            if (rc != 0) {
                running_remove(s, i_run);
                finish(s, q, SCHED_FINISH_ERROR, error, NULL);
                ended = 1;
                break;
            }
        }
        int tok, accepted = 0;
        if (t < k)
            tok = samp_verify(&q->sampler, lg, q->tokens, (size_t)q->n_tokens, draft[t],
                              q->draft_dist ? q->draft_dist + (size_t)t * s->vocab : NULL, &accepted);
        else tok = samp_sample(&q->sampler, lg, q->tokens, (size_t)q->n_tokens);
        if (is_stop(s, tok) && (!q->ignore_eos || q->constraint)) {
            running_remove(s, i_run);
            finish(s, q, SCHED_FINISH_EOS, NULL, NULL);
            ended = 1;
            break;
        }
        emit_token(s, q, s->raw_logits, tok);
        q->tokens[q->n_tokens++] = tok;
        q->generated++;
        if (q->constraint && q->constraint->accept(q->constraint, tok)) {
            running_remove(s, i_run);
            finish(s, q, SCHED_FINISH_EOS, NULL, NULL);
            ended = 1;
        } else if (q->generated >= q->max_tokens || q->n_tokens >= q->capacity) {
            running_remove(s, i_run);
            finish(s, q, SCHED_FINISH_LENGTH, NULL, NULL);
            ended = 1;
        }
        pthread_mutex_lock(&s->mu);
        s->stats.generated_tokens++;
        pthread_mutex_unlock(&s->mu);
        if (!accepted) break;
        /* the draft was fed at this position: its KV entry is now the sequence's own */
        accepted_drafts++;
        if (!ended) q->n_computed++;
    }
    if (k > 0 && !ended) {
        if (accepted_drafts == k) q->spec_k = q->spec_k < s->cfg.spec_k ? q->spec_k + 1 : s->cfg.spec_k;
        else q->spec_k = accepted_drafts + 1;
    }
    if (k > 0) {
        pthread_mutex_lock(&s->mu);
        s->stats.spec_proposed_tokens += (uint64_t)k;
        s->stats.spec_accepted_tokens += (uint64_t)accepted_drafts;
        pthread_mutex_unlock(&s->mu);
    }
    return ended;
}

/* ---- one step, phase by phase ------------------------------------------ */

/* One step's batch as step() builds it: slots (b_seqs, b_first, b_count,
 * b_drafts: one per sequence fed) over its tokens, then the rows whose
 * logits are sampled and whose hidden states are pooled; after the forward,
 * what the sampling spent on grammar masks. */
typedef struct {
    int n_tokens, n_slots, n_logits, n_hidden;
    double mask_seconds;
    int n_masked;
} step_batch;

/* Reports (once, when it begins) a scheduler that has requests waiting and
 * none running: none can be admitted, which only a bug causes. */
static void note_stall(sched *s) {
    const int stalled = s->n_running == 0 && s->waiting_head != NULL;
    pthread_mutex_lock(&s->mu);
    if (stalled && !s->stats.stalled)
        fprintf(stderr, "scheduler: stalled: %d requests wait, none can be admitted (%d of %d KV blocks "
                        "available)\n", s->n_waiting, kv_available(s->blocks), kv_total(s->blocks));
    s->stats.stalled = stalled;
    pthread_mutex_unlock(&s->mu);
}

/* Decode tokens go first (one per sequence), each may need a fresh block;
 * when none is left, preempt the newest sequence and retry. */
static void reserve_decode_blocks(sched *s) {
    /* Preemption reorders the running set (the last sequence moves into the
     * victim's slot), so after each one the pass starts over; sequences that
     * already got their block keep it, and every preemption shrinks the set,
     * so this ends. */
restart:
    for (int i = 0; i < s->n_running; i++) {
        sched_seq *q = s->running[i];
        if (q->n_tokens - q->n_computed != 1) continue;
        if (blocks_for(s, q->n_computed + 1) > q->n_blocks) {
            const int b = kv_alloc(s->blocks);
            if (b < 0) {
                preempt_newest(s);
                goto restart;
            }
            q->blocks[q->n_blocks++] = b;
        }
    }
}

/* A slot for each decoding sequence: its last token, then its drafts. */
static void place_decodes(sched *s, step_batch *sb) {
    const int budget = s->cfg.max_batch_tokens;
    int spec_left = s->spec_rows;
    for (int i = 0; i < s->n_running && sb->n_tokens < budget; i++) {
        sched_seq *q = s->running[i];
        if (q->n_tokens - q->n_computed != 1) continue;
        if (blocks_for(s, q->n_computed + 1) > q->n_blocks) abort(); /* invariant: every decode has its block */
        const int n = sb->n_tokens, slot = sb->n_slots;
        s->b_seqs[slot] = q;
        s->b_first[slot] = n;
        s->b_tokens[n] = q->tokens[q->n_computed];
        const int k = q->spec ? sched_draft_tokens(s, q, budget - n - 1, spec_left, s->b_tokens + n + 1) : 0;
        spec_left -= k;
        s->b_count[slot] = 1 + k;
        s->b_drafts[slot] = k;
        sb->n_slots++;
        sb->n_tokens += 1 + k;
    }
}

/* Prefill chunks, in running order, within what is left of the budget. */
static void place_prefill_chunks(sched *s, step_batch *sb) {
    const int budget = s->cfg.max_batch_tokens;
    for (int i = 0; i < s->n_running && sb->n_tokens < budget; i++) {
        sched_seq *q = s->running[i];
        const int pending = q->n_tokens - q->n_computed;
        if (pending <= 1) continue;
        const int k = cover_chunk(s, q, pending < budget - sb->n_tokens ? pending : budget - sb->n_tokens);
        if (k <= 0) continue; /* a windowed sequence waiting for blocks others release */
        s->b_seqs[sb->n_slots] = q;
        s->b_first[sb->n_slots] = sb->n_tokens;
        s->b_count[sb->n_slots] = k;
        s->b_drafts[sb->n_slots] = 0;
        sb->n_slots++;
        sb->n_tokens += k;
    }
}

/* The forward's view of the slots: every token's id, position and slot,
 * each slot's block table and length, and the rows the step reads back. */
static ingot_batch lay_out_batch(sched *s, step_batch *sb) {
    for (int j = 0; j < sb->n_slots; j++) {
        sched_seq *q = s->b_seqs[j];
        for (int t = 0; t < s->b_count[j]; t++) {
            const int idx = s->b_first[j] + t;
            if (t <= s->b_count[j] - 1 - s->b_drafts[j]) s->b_tokens[idx] = q->tokens[q->n_computed + t];
            s->b_pos[idx] = q->n_computed + t;
            s->b_seq[idx] = j;
        }
        s->b_tables[j] = q->blocks;
        s->b_seq_len[j] = q->n_computed + s->b_count[j];
        s->b_state_slots[j] = q->state_slot;
        s->b_adapters[j] = q->adapter;
        const int completes = q->n_computed + s->b_count[j] - s->b_drafts[j] == q->n_tokens;
        if (q->task == SCHED_EMBED_MEAN) /* every row of the chunk is pooled */
            for (int t = 0; t < s->b_count[j]; t++) s->b_hidden_rows[sb->n_hidden++] = s->b_first[j] + t;
        else if (q->task == SCHED_EMBED_LAST && completes)
            s->b_hidden_rows[sb->n_hidden++] = s->b_first[j] + s->b_count[j] - 1;
        else if (q->task == SCHED_GENERATE && completes) /* the last token's row, then each draft's */
            for (int t = s->b_count[j] - 1 - s->b_drafts[j]; t < s->b_count[j]; t++)
                s->b_rows[sb->n_logits++] = s->b_first[j] + t;
    }
    return (ingot_batch){.n_tokens = sb->n_tokens, .tokens = s->b_tokens, .pos = s->b_pos, .seq = s->b_seq,
                         .n_seqs = sb->n_slots, .block_tables = s->b_tables, .seq_len = s->b_seq_len,
                         .state_slots = s->b_state_slots, .adapters = s->b_adapters,
                         .n_logits = sb->n_logits, .logit_rows = s->b_rows, .logits = s->logits,
                         .n_hidden = sb->n_hidden, .hidden_rows = s->b_hidden_rows,
                         .hidden = sb->n_hidden ? s->hidden : NULL};
}

/* After the forward: each slot's tokens join its KV cache; an embedding
 * pools its rows, a generating sequence whose pending tokens all went in
 * samples (and verifies its drafts). error: the forward failed (NULL: it
 * ran). */
static void take_results(sched *s, step_batch *sb, const char *error) {
    int row = 0, hrow = 0;
    for (int j = 0; j < sb->n_slots; j++) {
        sched_seq *q = s->b_seqs[j];
        if (error) { /* a broken batch is a bug in this file: end its sequences, keep serving */
            for (int i = 0; i < s->n_running; i++)
                if (s->running[i] == q) {
                    running_remove(s, i);
                    break;
                }
            finish(s, q, SCHED_FINISH_ERROR, error, NULL);
            continue;
        }
        const int k = s->b_drafts[j];
        q->n_computed += s->b_count[j] - k; /* drafts count once accepted */
        if (q->task != SCHED_GENERATE) {
            publish_blocks(s, q);
            release_out_of_window(s, q);
            pool_rows(s, q, s->b_count[j], &hrow);
            continue;
        }
        if (q->n_computed != q->n_tokens) {
            publish_blocks(s, q);
            release_out_of_window(s, q);
            continue;
        }
        const float *lg = s->logits + (size_t)row * s->vocab;
        row += 1 + k;
        if (q->constraint) sb->n_masked++;
        if (sample_rows(s, q, lg, s->b_tokens + s->b_first[j] + s->b_count[j] - k, k, &sb->mask_seconds)) continue;
        publish_blocks(s, q); /* after the verification: a block is published only with all its tokens accepted */
        release_out_of_window(s, q);
        release_beyond(s, q);
        /* the draft's KV past the accepted tokens holds rejected drafts */
        if (q->draft_computed > q->n_computed) q->draft_computed = q->n_computed;
    }
}

static void record_step(sched *s, const step_batch *sb, double step_seconds, double forward_seconds) {
    pthread_mutex_lock(&s->mu);
    s->stats.steps++;
    s->stats.last_batch_tokens = sb->n_tokens;
    s->stats.last_batch_seqs = sb->n_slots;
    s->stats.last_step_seconds = step_seconds;
    s->stats.last_forward_seconds = forward_seconds;
    s->stats.forward_seconds += forward_seconds;
    if (sb->n_masked > 0) {
        s->stats.last_mask_seconds = sb->mask_seconds;
        s->stats.mask_seconds += sb->mask_seconds;
        s->stats.masked_tokens += (uint64_t)sb->n_masked;
    }
    pthread_mutex_unlock(&s->mu);
}

/* One step: take what other threads sent, admit, feed one forward with
 * every decode token (and its drafts) and then prefill chunks, and sample.
 * 0 when there was nothing to run. */
static int step(sched *s) {
    const double t0 = now_s();
    intake(s);
    admit(s);
    note_stall(s);
    if (s->n_running == 0) return 0;
    reserve_decode_blocks(s);
    if (s->cfg.spec == SCHED_SPEC_DRAFT) sched_draft_round(s);
    step_batch sb = {0};
    place_decodes(s, &sb);
    place_prefill_chunks(s, &sb);
    if (sb.n_tokens == 0) return 0;
    ingot_batch b = lay_out_batch(s, &sb);
    char err[256];
    const double tf = now_s();
    const int rc = s->api->forward(s->model, &s->kv, &b, s->pool, err, sizeof err);
    const double tf1 = now_s();
    take_results(s, &sb, rc != 0 ? err : NULL);
    record_step(s, &sb, now_s() - t0, tf1 - tf);
    return 1;
}

/* ---- thread and lifecycle ---------------------------------------------- */

static void publish_queue_stats(sched *s) {
    pthread_mutex_lock(&s->mu);
    /* gauges follow what is live: a request cancelled since the last step
     * (client gone) no longer counts */
    s->stats.running = s->n_running < s->n_live ? s->n_running : s->n_live;
    s->stats.waiting = s->n_live - s->stats.running;
    s->stats.kv_blocks_used = kv_in_use(s->blocks);
    s->stats.kv_blocks_cached = kv_cached(s->blocks);
    pthread_mutex_unlock(&s->mu);
}

static void *sched_main(void *arg) {
    sched *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        const int stop = s->stop;
        pthread_mutex_unlock(&s->mu);
        if (stop) break;
        const int worked = step(s);
        publish_queue_stats(s);
        int pending;
        pthread_mutex_lock(&s->mu);
        pending = s->n_events > 0;
        pthread_mutex_unlock(&s->mu);
        if (pending && s->cfg.notify) s->cfg.notify(s->cfg.notify_user);
        if (!worked) {
            pthread_mutex_lock(&s->mu);
            while (!s->stop && !s->incoming_head && s->n_cancels == 0 && s->n_running == 0)
                pthread_cond_wait(&s->wake, &s->mu);
            pthread_mutex_unlock(&s->mu);
        }
    }
    /* shutting down: end everything still here */
    intake(s);
    while (s->n_running > 0) {
        sched_seq *q = s->running[0];
        running_remove(s, 0);
        finish(s, q, SCHED_FINISH_CANCELLED, NULL, NULL);
    }
    while (s->waiting_head) finish(s, waiting_pop(s), SCHED_FINISH_CANCELLED, NULL, NULL);
    publish_queue_stats(s);
    if (s->cfg.notify) s->cfg.notify(s->cfg.notify_user);
    return NULL;
}

/* The step's limits as sched_create settles them. */
static void effective_limits(const sched_config *cfg, int model_max_tokens, int *batch_tokens, int *running) {
    int B = cfg->max_batch_tokens, R = cfg->max_running < 1 ? 64 : cfg->max_running;
    if (B < 1 || B > model_max_tokens) B = model_max_tokens;
    if (B < R) R = B;
    *batch_tokens = B;
    *running = R;
}

/* Logits rows for drafts in one step: every running sequence's spec_k, but
 * at most 16 sequences' worth (a vocabulary-wide row each: with more
 * sequences decoding at once, the rest decode plainly in that step). */
static int spec_rows_for(const sched_config *cfg, int running) {
    if (cfg->spec == SCHED_SPEC_OFF) return 0;
    return (running < 16 ? running : 16) * cfg->spec_k;
}

size_t sched_scratch_bytes(const ingot_desc *d, const sched_config *cfg, int model_max_tokens) {
    int B, R;
    effective_limits(cfg, model_max_tokens, &B, &R);
    const size_t vocab = (size_t)d->vocab, dim = (size_t)d->dim;
    const size_t rows = (size_t)(R + spec_rows_for(cfg, R));
    return sizeof(float) * (rows * vocab + vocab + (size_t)B * dim) + sizeof(int32_t) * (size_t)(5 * B + 10 * R) +
           sizeof(int32_t) * rows + d->state_bytes_per_seq * (size_t)R;
}

const char *sched_prefix_cache_refusal(const ingot_desc *d) {
    return d->state_bytes_per_seq > 0
               ? "the model's recurrent layers keep each sequence's state in a slot, not per KV block"
               : NULL;
}

/* Why cfg cannot run on s's model (speculative decoding it does not support, no KV block), or NULL. */
static const char *config_refusal(const sched *s) {
    const ingot_desc *d = s->api->desc;
    if (s->cfg.spec != SCHED_SPEC_OFF && d->state_bytes_per_seq > 0)
        return "speculative decoding needs a model whose every layer caches per position; this one has "
               "recurrent layers (a rejected draft would have advanced their state): use --spec off";
    if (s->cfg.spec == SCHED_SPEC_DRAFT) {
        if (!s->cfg.draft || !s->cfg.draft_model) return "--spec draft needs a binary built with --draft DRAFT";
        if (s->cfg.draft->desc->vocab != s->vocab) return "the draft model's vocabulary differs from the model's";
        if (d->kv_window > 0 || s->cfg.draft->desc->kv_window > 0) return "--spec draft does not support sliding-window models";
        if (s->cfg.draft->desc->state_bytes_per_seq > 0)
            return "the draft model has recurrent layers (a rejected draft would have advanced their state)";
    }
    if (s->cfg.kv_blocks < 1) return "the KV pool needs at least one block";
    return NULL;
}

/* The draft model's step arrays for R sequences and its KV pool (the same block ids as the
 * target's): 0, or -1 (kv_err filled where the pool failed; sched_destroy frees what was made). */
static int alloc_draft(sched *s, int R, char *kv_err, size_t kv_errlen) {
    s->d_max = s->cfg.draft->max_tokens(s->cfg.draft_model);
    s->d_tokens = malloc(sizeof(int32_t) * (size_t)s->d_max);
    s->d_pos = malloc(sizeof(int32_t) * (size_t)s->d_max);
    s->d_seq = malloc(sizeof(int32_t) * (size_t)s->d_max);
    s->d_rows = malloc(sizeof(int32_t) * (size_t)R);
    s->d_seq_len = malloc(sizeof(int32_t) * (size_t)R);
    s->d_tables = malloc(sizeof(*s->d_tables) * (size_t)R);
    s->d_cands = malloc(sizeof(*s->d_cands) * (size_t)R);
    s->d_want = malloc(sizeof(int) * (size_t)R);
    s->d_row = malloc(sizeof(int) * (size_t)R);
    s->d_logits = malloc(sizeof(float) * (size_t)R * s->vocab);
    if (!(s->d_tokens && s->d_pos && s->d_seq && s->d_rows && s->d_seq_len && s->d_tables && s->d_cands && s->d_want &&
          s->d_row && s->d_logits))
        return -1;
    if (s->cfg.draft->kv_alloc(s->cfg.draft_model, &s->draft_kv, s->cfg.kv_blocks, kv_err, kv_errlen) != 0) {
        s->draft_kv.data = NULL;
        return -1;
    }
    return 0;
}

sched *sched_create(const ingot_model_api *api, ingot_model *m, const sched_config *cfg, char *err, size_t errlen) {
    sched *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->api = api;
    s->model = m;
    s->cfg = *cfg;
    if (cfg->n_stop_ids > 0) {
        s->stop_ids = malloc(sizeof(int32_t) * (size_t)cfg->n_stop_ids);
        if (!s->stop_ids) {
            snprintf(err, errlen, "out of memory");
            free(s);
            return NULL;
        }
        memcpy(s->stop_ids, cfg->stop_ids, sizeof(int32_t) * (size_t)cfg->n_stop_ids);
        s->n_stop_ids = cfg->n_stop_ids;
    }
    s->cfg.stop_ids = s->stop_ids;
    s->max_ctx = api->desc->max_ctx;
    s->vocab = api->desc->vocab;
    s->dim = api->desc->dim;
    s->block = INGOT_KV_BLOCK;
    if (s->cfg.n_threads < 1) s->cfg.n_threads = 1;
    if (s->cfg.max_running < 1) s->cfg.max_running = 64;
    if (s->cfg.max_waiting < 1) s->cfg.max_waiting = 1024;
    effective_limits(&s->cfg, api->max_tokens(m), &s->cfg.max_batch_tokens, &s->cfg.max_running);
    if (s->cfg.spec_k < 1) s->cfg.spec_k = 4;
    if (s->cfg.spec_ngram_max < 1) s->cfg.spec_ngram_max = 3;
    if (s->cfg.spec_ngram_min < 1) s->cfg.spec_ngram_min = 1;
    if (s->cfg.spec_ngram_min > s->cfg.spec_ngram_max) s->cfg.spec_ngram_min = s->cfg.spec_ngram_max;
    s->spec_rows = spec_rows_for(&s->cfg, s->cfg.max_running);
    if (sched_prefix_cache_refusal(api->desc)) s->cfg.prefix_cache = 0;
    const char *why = config_refusal(s);
    if (why) {
        snprintf(err, errlen, "%s", why);
        free(s->stop_ids);
        free(s);
        return NULL;
    }
    const size_t block_bytes = api->desc->kv_bytes_per_token * INGOT_KV_BLOCK;
    char kv_err[256] = "";
    const int B = s->cfg.max_batch_tokens, R = s->cfg.max_running;
    if (api->kv_alloc(m, &s->kv, s->cfg.kv_blocks, kv_err, sizeof kv_err) != 0) s->kv.data = NULL;
    else if (api->state_alloc(m, &s->kv, R, kv_err, sizeof kv_err) != 0) {
        api->kv_release(m, &s->kv);
        s->kv.data = NULL;
    }
    s->blocks = kv_create(s->cfg.kv_blocks, INGOT_KV_BLOCK);
    s->pool = tp_create(s->cfg.n_threads);
    s->running = calloc((size_t)R, sizeof *s->running);
    s->free_slots = malloc(sizeof(int) * (size_t)R);
    for (int i = 0; s->free_slots && i < R; i++) s->free_slots[s->n_free_slots++] = R - 1 - i;
    s->b_state_slots = malloc(sizeof(int32_t) * (size_t)R);
    s->b_adapters = malloc(sizeof(int32_t) * (size_t)R);
    s->b_tokens = malloc(sizeof(int32_t) * (size_t)B);
    s->b_pos = malloc(sizeof(int32_t) * (size_t)B);
    s->b_seq = malloc(sizeof(int32_t) * (size_t)B);
    s->b_rows = malloc(sizeof(int32_t) * (size_t)(R + s->spec_rows));
    s->b_seq_len = malloc(sizeof(int32_t) * (size_t)R);
    s->b_tables = malloc(sizeof(*s->b_tables) * (size_t)R);
    s->b_seqs = malloc(sizeof(*s->b_seqs) * (size_t)R);
    s->b_first = malloc(sizeof(int) * (size_t)R);
    s->b_count = malloc(sizeof(int) * (size_t)R);
    s->b_drafts = malloc(sizeof(int) * (size_t)R);
    s->logits = malloc(sizeof(float) * (size_t)(R + s->spec_rows) * s->vocab);
    s->raw_logits = malloc(sizeof(float) * (size_t)s->vocab);
    s->b_hidden_rows = malloc(sizeof(int32_t) * (size_t)B);
    s->hidden = malloc(sizeof(float) * (size_t)B * s->dim);
    const int draft_ok = s->cfg.spec != SCHED_SPEC_DRAFT || alloc_draft(s, R, kv_err, sizeof kv_err) == 0;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->wake, NULL);
    s->stats.kv_blocks_total = s->cfg.kv_blocks;
    if (!s->kv.data || !s->blocks || !s->pool || !s->running || !s->free_slots || !s->b_state_slots || !s->b_adapters || !s->b_tokens || !s->b_pos || !s->b_seq ||
        !s->b_rows || !s->b_seq_len || !s->b_tables || !s->b_seqs || !s->b_first || !s->b_count || !s->b_drafts || !s->logits ||
        !s->raw_logits || !s->b_hidden_rows || !s->hidden || !draft_ok || pthread_create(&s->thread, NULL, sched_main, s) != 0) {
        if (kv_err[0]) snprintf(err, errlen, "%s", kv_err);
        else snprintf(err, errlen, "out of memory for a KV pool of %d blocks (%zu bytes each)", s->cfg.kv_blocks,
                      block_bytes);
        s->thread = 0;
        sched_destroy(s);
        return NULL;
    }
    return s;
}

void sched_destroy(sched *s) {
    if (!s) return;
    if (s->thread) {
        pthread_mutex_lock(&s->mu);
        s->stop = 1;
        pthread_cond_signal(&s->wake);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
    }
    while (s->incoming_head) {
        sched_seq *q = s->incoming_head;
        s->incoming_head = q->next;
        seq_free(q);
    }
    tp_free(s->pool);
    kv_destroy(s->blocks);
    if (s->kv.data) s->api->kv_release(s->model, &s->kv);
    if (s->draft_kv.data) s->cfg.draft->kv_release(s->cfg.draft_model, &s->draft_kv);
    free(s->d_tokens);
    free(s->d_pos);
    free(s->d_seq);
    free(s->d_rows);
    free(s->d_seq_len);
    free(s->d_tables);
    free(s->d_cands);
    free(s->d_want);
    free(s->d_row);
    free(s->d_logits);
    free(s->running);
    free(s->free_slots);
    free(s->b_state_slots);
    free(s->b_adapters);
    free(s->b_tokens);
    free(s->b_pos);
    free(s->b_seq);
    free(s->b_rows);
    free(s->b_seq_len);
    free(s->b_tables);
    free(s->b_seqs);
    free(s->b_first);
    free(s->b_count);
    free(s->b_drafts);
    free(s->logits);
    free(s->raw_logits);
    free(s->b_hidden_rows);
    free(s->hidden);
    free(s->cancels);
    for (size_t i = 0; i < s->n_events; i++) free(s->events[i].embedding); /* never polled */
    free(s->events);
    free(s->stop_ids);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->wake);
    free(s);
}
