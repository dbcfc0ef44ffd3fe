/* threadpool.c — persistent worker pool with low-latency dispatch for tp_parallel_for. */
#include "threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TP_PAUSE() _mm_pause()
#else
#define TP_PAUSE() ((void)0)
#endif

/* Dispatch protocol.
 *
 * The caller publishes a job (fn, ctx, n, grain, number of chunks) in plain
 * fields, then bumps `gen` with a release store. Workers watch `gen`: first
 * they spin on it for a short while (a decode step issues ~200 jobs per token
 * with little serial work in between, so a spinning worker picks the next job
 * up within a few hundred nanoseconds), then they fall asleep on a condition
 * variable. `sleepers` counts workers that are (about to be) asleep; the
 * caller only takes the mutex and broadcasts when it is non-zero. Both sides
 * use sequentially consistent operations on `gen` and `sleepers`, so either
 * the worker sees the new generation before sleeping or the caller sees the
 * sleeper and wakes it (the worker re-checks `gen` under the mutex).
 *
 * Chunk i (i >= 1) belongs to worker i, but it is handed out through a
 * claim word slot[i]: the caller opens it for generation g by storing 2g,
 * and whoever first turns 2g into 2g+1 with a CAS runs it. The caller runs
 * chunk 0 and then claims every chunk still open itself, so a worker that
 * is descheduled or asleep (2 cores shared with other processes) costs the
 * caller only the chunk's own work, never a scheduler time slice. A worker
 * that wakes up late finds its slot claimed or already opened for a later
 * generation, its CAS fails and it goes back to waiting; a successful CAS
 * (acquire) guarantees the job fields it reads next are those of the
 * generation it claimed, because the caller rewrites them only after every
 * claimed chunk has reported to `done`.
 *
 * Chunking is static: [0, n) is cut into u = ceil(n / grain) units of grain
 * items, and chunk i of c = min(threads, u) gets units [i*u/c, (i+1)*u/c).
 * Every chunk boundary is thus a multiple of grain, every chunk holds at
 * least grain items except a last one that ends at n. fn receives the chunk
 * index as thread_id: unique within a call and < tp_size, so it can index
 * per-thread scratch, even when the caller ran a worker's chunk. */

#define TP_SPIN_ITERS 20000 /* pause iterations before sleeping (~0.1-1 ms, CPU dependent) */
#define TP_WAIT_SPINS 4096  /* caller spins before it starts yielding */

typedef struct {
    tp_pool *pool;
    int id;
} tp_worker_arg;

struct tp_pool {
    int n_threads;
    pthread_t *threads;
    tp_worker_arg *args;

    /* job, written by the caller before the release store to gen */
    tp_fn fn;
    void *ctx;
    int64_t n, grain, units;
    int chunks;

    _Alignas(64) atomic_uint gen;
    _Alignas(64) atomic_int done;      /* chunks >= 1 completed in this generation */
    atomic_ullong *slot;               /* per thread: 2g open for generation g, 2g+1 claimed */
    _Alignas(64) atomic_int sleepers;
    atomic_int stop;

    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static void tp_run_chunk(tp_pool *p, int i) {
    int64_t u0 = p->units * i / p->chunks, u1 = p->units * (i + 1) / p->chunks;
    int64_t b = u0 * p->grain, e = u1 * p->grain;
    if (e > p->n) e = p->n;
    if (b < e) p->fn(p->ctx, b, e, i);
}

/* Claims chunk i of generation g; returns 1 if the caller of this got it. */
static int tp_claim(tp_pool *p, int i, unsigned long long g) {
    unsigned long long want = 2 * g;
    return atomic_compare_exchange_strong_explicit(&p->slot[i], &want, 2 * g + 1, memory_order_acq_rel,
                                                   memory_order_relaxed);
}

static void *tp_worker(void *arg) {
    tp_worker_arg *wa = arg;
    tp_pool *p = wa->pool;
    int id = wa->id;
    unsigned seen = 0; /* gen is 0 until the first job, which may come before this line */
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen) {
            if (++spins < TP_SPIN_ITERS) {
                TP_PAUSE();
                continue;
            }
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while ((g = atomic_load(&p->gen)) == seen) pthread_cond_wait(&p->cv, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
            break;
        }
        seen = g;
        if (atomic_load_explicit(&p->stop, memory_order_acquire)) return NULL;
        if (tp_claim(p, id, g)) {
            tp_run_chunk(p, id);
            atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
        }
    }
}

tp_pool *tp_create(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    tp_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n_threads = n_threads;
    atomic_init(&p->gen, 0);
    atomic_init(&p->done, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->stop, 0);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (n_threads > 1) {
        p->threads = calloc((size_t)n_threads, sizeof *p->threads);
        p->args = calloc((size_t)n_threads, sizeof *p->args);
        p->slot = calloc((size_t)n_threads, sizeof *p->slot);
        if (!p->threads || !p->args || !p->slot) goto fail;
        for (int i = 0; i < n_threads; i++) atomic_init(&p->slot[i], 1); /* closed */
        for (int i = 1; i < n_threads; i++) {
            p->args[i].pool = p;
            p->args[i].id = i;
            if (pthread_create(&p->threads[i], NULL, tp_worker, &p->args[i]) != 0) {
                p->n_threads = i; /* tp_free joins the ones that started */
                tp_free(p);
                return NULL;
            }
        }
    }
    return p;
fail:
    free(p->threads);
    free(p->args);
    free(p->slot);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
    return NULL;
}

/* Publishes a new generation and wakes sleeping workers if there are any. */
static void tp_publish(tp_pool *p) {
    atomic_fetch_add(&p->gen, 1);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
}

void tp_free(tp_pool *p) {
    if (!p) return;
    if (p->n_threads > 1) {
        atomic_store(&p->stop, 1);
        tp_publish(p);
        for (int i = 1; i < p->n_threads; i++) pthread_join(p->threads[i], NULL);
    }
    free(p->threads);
    free(p->args);
    free(p->slot);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

int tp_size(const tp_pool *p) { return p->n_threads; }

void tp_parallel_for(tp_pool *p, int64_t n, int64_t grain, tp_fn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    int64_t units = (n + grain - 1) / grain;
    int chunks = units < p->n_threads ? (int)units : p->n_threads;
    if (chunks <= 1) { /* nothing to share: no wake-ups at all */
        fn(ctx, 0, n, 0);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->grain = grain;
    p->units = units;
    p->chunks = chunks;
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    unsigned g = atomic_load_explicit(&p->gen, memory_order_relaxed) + 1;
    for (int i = 1; i < chunks; i++) atomic_store_explicit(&p->slot[i], 2ull * g, memory_order_release);
    tp_publish(p); /* gen becomes g */
    tp_run_chunk(p, 0);
    int mine = 0; /* chunks the caller took over */
    for (int i = 1; i < chunks; i++)
        if (tp_claim(p, i, g)) {
            tp_run_chunk(p, i);
            mine++;
        }
    int want = chunks - 1 - mine, spins = 0;
    while (atomic_load_explicit(&p->done, memory_order_acquire) < want) {
        if (++spins < TP_WAIT_SPINS) TP_PAUSE();
        else sched_yield();
    }
}
