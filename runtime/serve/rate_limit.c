/* rate_limit.c — token buckets per key in an open-addressing table; see rate_limit.h. */
#include "rate_limit.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define RL_KEY_MAX 128     /* longer keys are compared by their first RL_KEY_MAX bytes and length hash */
#define RL_SWEEP_AT 4096   /* live keys above which full buckets are evicted before growing */

typedef struct {
    char key[RL_KEY_MAX + 1]; /* "" : empty slot */
    uint64_t hash;
    double requests, tokens;  /* what the buckets hold at `at` */
    double at;
} rl_entry;

struct rl_limiter {
    double rpm, tpm;
    rl_entry *slots;
    size_t cap, used;        /* cap: a power of two */
};

static uint64_t hash_key(const char *k) {
    uint64_t h = 1469598103934665603ULL; /* FNV-1a over the whole key */
    for (const unsigned char *p = (const unsigned char *)k; *p; p++) h = (h ^ *p) * 1099511628211ULL;
    return h ? h : 1;
}

rl_limiter *rl_create(double rpm, double tpm) {
    rl_limiter *l = calloc(1, sizeof *l);
    if (!l) return NULL;
    l->rpm = rpm;
    l->tpm = tpm;
    l->cap = 64;
    l->slots = calloc(l->cap, sizeof *l->slots);
    if (!l->slots) {
        free(l);
        return NULL;
    }
    return l;
}

void rl_free(rl_limiter *l) {
    if (!l) return;
    free(l->slots);
    free(l);
}

/* Brings an entry's buckets up to time now. */
static void refill(const rl_limiter *l, rl_entry *e, double now) {
    const double dt = now > e->at ? now - e->at : 0;
    e->requests = fmin(l->rpm, e->requests + dt * l->rpm / 60.0);
    e->tokens = fmin(l->tpm, e->tokens + dt * l->tpm / 60.0);
    e->at = now;
}

static int is_full(const rl_limiter *l, const rl_entry *e) { return e->requests >= l->rpm && e->tokens >= l->tpm; }

static rl_entry *probe(rl_entry *slots, size_t cap, const char *key, uint64_t h) {
    for (size_t i = h & (cap - 1);; i = (i + 1) & (cap - 1))
        if (!slots[i].key[0] || (slots[i].hash == h && !strncmp(slots[i].key, key, RL_KEY_MAX))) return &slots[i];
}

/* Rebuilds the table at capacity cap, keeping entries that still hold something (all when keep_full). */
static int rebuild(rl_limiter *l, size_t cap, double now, int keep_full) {
    rl_entry *n = calloc(cap, sizeof *n);
    if (!n) return -1;
    size_t used = 0;
    for (size_t i = 0; i < l->cap; i++) {
        rl_entry *e = &l->slots[i];
        if (!e->key[0]) continue;
        refill(l, e, now);
        if (!keep_full && is_full(l, e)) continue;
        *probe(n, cap, e->key, e->hash) = *e;
        used++;
    }
    free(l->slots);
    l->slots = n;
    l->cap = cap;
    l->used = used;
    return 0;
}

/* The key's entry (a new one starts full); NULL on OOM. */
static rl_entry *lookup(rl_limiter *l, const char *key, double now) {
    const uint64_t h = hash_key(key);
    rl_entry *e = probe(l->slots, l->cap, key, h);
    if (e->key[0]) return e;
    if (2 * (l->used + 1) > l->cap) { /* at most half full */
        if (l->used >= RL_SWEEP_AT) rebuild(l, l->cap, now, 0);
        if (2 * (l->used + 1) > l->cap && rebuild(l, 2 * l->cap, now, 1) != 0) return NULL;
        e = probe(l->slots, l->cap, key, h);
    }
    strncpy(e->key, key, RL_KEY_MAX);
    e->key[RL_KEY_MAX] = 0;
    if (!e->key[0]) e->key[0] = '-'; /* an empty key still needs a non-empty slot marker */
    e->hash = h;
    e->requests = l->rpm;
    e->tokens = l->tpm;
    e->at = now;
    l->used++;
    return e;
}

rl_verdict rl_admit(rl_limiter *l, const char *key, double tokens, double now, double *retry_after) {
    *retry_after = 0;
    if (!l || (l->rpm <= 0 && l->tpm <= 0)) return RL_OK;
    if (l->tpm > 0 && tokens > l->tpm) {
        *retry_after = 60;
        return RL_TOO_LARGE;
    }
    rl_entry *e = lookup(l, key, now);
    if (!e) return RL_OK; /* out of memory: fail open rather than refuse everyone */
    refill(l, e, now);
    if (l->rpm > 0 && e->requests < 1) {
        *retry_after = (1 - e->requests) * 60.0 / l->rpm;
        return RL_REQUESTS;
    }
    if (l->tpm > 0 && e->tokens < tokens) {
        *retry_after = (tokens - e->tokens) * 60.0 / l->tpm;
        return RL_TOKENS;
    }
    if (l->rpm > 0) e->requests -= 1;
    if (l->tpm > 0) e->tokens -= tokens;
    return RL_OK;
}

void rl_settle(rl_limiter *l, const char *key, double reserved, double used, int refund_request, double now) {
    if (!l || (l->rpm <= 0 && l->tpm <= 0)) return;
    rl_entry *e = lookup(l, key, now);
    if (!e) return;
    refill(l, e, now);
    if (l->tpm > 0 && reserved > used) e->tokens = fmin(l->tpm, e->tokens + (reserved - used));
    if (l->rpm > 0 && refund_request) e->requests = fmin(l->rpm, e->requests + 1);
}
