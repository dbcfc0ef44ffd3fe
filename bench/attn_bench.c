/* attn_bench.c — micro-benchmark of decode attention (kernels/cpu/kc_attend.h): one token over
 * a model's cache (by default SmolLM2-135M's: 30 layers x 3 KV heads of 64, groups of 3 query
 * heads; f16 rows, blocks of 16), as a generated model runs it: every (KV head, chunk of 128 positions) a piece of work for
 * the pool, then the merge of each KV head's chunks in order.
 *
 * Not a test and not built by make. Build and run (from the repo root):
 *   make lib && cc -std=c11 -D_GNU_SOURCE -O2 -march=native -pthread -Iruntime/core -Ikernels/cpu \
 *      bench/attn_bench.c build/_obj/libingot.a -o /tmp/attn_bench -lm && /tmp/attn_bench
 * with -DKC_KV_Q8=1 or -DKC_KV_Q4=1 for a q8_0 or q4 cache instead of f16.
 * Optional arguments: positions (default 4000), KV heads, query heads per KV head, layers
 * (default 3 3 30, SmolLM2-135M; 4 8 22 is TinyLlama-1.1B's shape, bench/make_synthetic_llama.py).
 *
 * The cache is 30 layers deep, as in the model, so that at 4000 positions (92 MB) each token's
 * reads come from DRAM; GB/s is bytes of K and V read per second. The 1-layer line re-reads one
 * layer (3 MB, mostly in L2): the kernel's speed when memory is not the limit. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#if !defined(KC_KV_Q8) && !defined(KC_KV_Q4)
#define KC_KV_F16 1
#endif
#include "kc_ops.h"
#include "hugealloc.h"
#include "threadpool.h"

enum { HD = 64, BLOCK = 16, MAX_GROUP = 16 };
static int KVH = 3, GROUP = 3, LAYERS = 30;

typedef struct {
    const kc_kv_t *kv;
    const int32_t *bt;
    int layers, layer, n_blocks, pos, chunks;
    const float *q;
    float *parts, *out, *scratch;
} job;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void part_fn(void *ctx, int64_t i0, int64_t i1, int tid) {
    const job *j = ctx;
    for (int64_t i = i0; i < i1; i++) {
        const int h = (int)(i / j->chunks), c = (int)(i % j->chunks);
        kc_attend_chunk(j->kv, j->layers, j->layer, j->n_blocks, KVH, BLOCK, HD, HD, 0, j->bt, h, GROUP, 0, j->pos, c,
                        j->q + h * GROUP * HD, 0.125f, 0.0f, j->scratch + (size_t)tid * KC_ATTN_SCRATCH(GROUP, HD, HD),
                        j->parts + (size_t)i * KC_ATTN_PART(GROUP, HD));
    }
}

static void merge_fn(void *ctx, int64_t h0, int64_t h1, int tid) {
    const job *j = ctx;
    float *ml = j->scratch + (size_t)tid * KC_ATTN_SCRATCH(GROUP, HD, HD);
    for (int64_t h = h0; h < h1; h++) {
        float *o = j->out + h * GROUP * HD;
        for (int c = 0; c < j->chunks; c++)
            kc_attend_merge(GROUP, HD, c, j->parts + ((size_t)h * j->chunks + c) * KC_ATTN_PART(GROUP, HD), o, ml);
        kc_attend_finish(GROUP, HD, 0, NULL, o, ml);
    }
}

/* Best of 10 tokens: ms per token. */
static double run(tp_pool *pool, job *j) {
    double best = 1e30;
    for (int rep = 0; rep < 10; rep++) {
        const double t0 = now_s();
        for (int l = 0; l < j->layers; l++) {
            j->layer = l;
            tp_parallel_for(pool, (int64_t)KVH * j->chunks, 1, part_fn, j);
            tp_parallel_for(pool, KVH, 1, merge_fn, j);
        }
        const double t = now_s() - t0;
        if (t < best) best = t;
    }
    return best * 1e3;
}

int main(int argc, char **argv) {
    const int L = argc > 1 ? atoi(argv[1]) : 4000;
    if (argc > 2) KVH = atoi(argv[2]);
    if (argc > 3) GROUP = atoi(argv[3]);
    if (argc > 4) LAYERS = atoi(argv[4]);
    if (L < 1 || L > 1 << 20) return fprintf(stderr, "positions: 1 to %d\n", 1 << 20), 2;
    if (KVH < 1 || KVH > 64 || GROUP < 1 || GROUP > MAX_GROUP || LAYERS < 2 || LAYERS > 128)
        return fprintf(stderr, "KV heads 1-64, group 1-%d, layers 2-128\n", MAX_GROUP), 2;
    const int n_blocks = (L + BLOCK - 1) / BLOCK;
    const size_t rows = (size_t)LAYERS * n_blocks * KVH * BLOCK * 2;
    /* on huge pages, as the engine allocates its pool (runtime/load/model_load.h) */
    const size_t row_elems = KC_KV_ROW(HD), kv_bytes = sizeof(kc_kv_t) * rows * row_elems;
    kc_kv_t *kv = ha_alloc(kv_bytes);
    int32_t *bt = malloc(sizeof(int32_t) * n_blocks);
    float *q = malloc(sizeof(float) * KVH * GROUP * HD), *out = malloc(sizeof(float) * KVH * GROUP * HD);
    float *parts = malloc(sizeof(float) * KC_ATTN_PART(GROUP, HD) * KVH * kc_attn_chunks(0, L - 1));
    float *scratch = malloc(sizeof(float) * KC_ATTN_SCRATCH(GROUP, HD, HD) * 8);
    if (!kv || !bt || !q || !out || !parts || !scratch) return fprintf(stderr, "out of memory\n"), 1;
    for (size_t r = 0; r < rows; r++) {
        float x[HD];
        for (int d = 0; d < HD; d++) x[d] = (float)((r * HD + d) * 2654435761u % 1000) / 1000.0f - 0.5f;
        kc__kv_put(kv + r * row_elems, x, HD);
    }
    for (int i = 0; i < n_blocks; i++) bt[i] = i;
    for (int i = 0; i < KVH * GROUP * HD; i++) q[i] = (float)(i % 17) / 17.0f - 0.5f;
    printf("decode attention at %d positions, %d KV heads of %d, groups of %d, %s cache (%.0f MB over %d layers)\n", L,
           KVH, HD, GROUP, KC_KV_Q4 ? "q4" : KC_KV_Q8 ? "q8_0" : "f16", (double)kv_bytes / 1e6, LAYERS);
    for (int threads = 1; threads <= 2; threads++) {
        tp_pool *pool = tp_create(threads);
        for (int layers = LAYERS; layers >= 1; layers -= LAYERS - 1) {
            job j = {kv, bt, layers, 0, n_blocks, L - 1, kc_attn_chunks(0, L - 1), q, parts, out, scratch};
            const double ms = run(pool, &j);
            const double bytes = (double)layers * KVH * L * row_elems * sizeof(kc_kv_t) * 2;
            printf("  %d thread(s), %2d layer(s): %7.3f ms per token, %5.1f GB/s of K and V, %5.2f ns per position"
                   " and KV head\n", threads, layers, ms, bytes / ms / 1e6, ms * 1e6 / ((double)layers * KVH * L));
        }
        tp_free(pool);
    }
    printf("(out[0] = %g)\n", out[0]);
    ha_free(kv, kv_bytes), free(bt), free(q), free(out), free(parts), free(scratch);
    return 0;
}
