/* kernels_bench.c — micro-benchmark of the CPU matmul kernels (GB/s of weights, GFLOP/s) and of tp_parallel_for overhead.
 *
 * Not a test and not built by make. Build and run (from the repo root):
 *   make lib && cc -std=c11 -D_GNU_SOURCE -O2 -march=native -pthread -Iruntime/core -Iruntime/load -Ikernels/cpu \
 *      bench/kernels_bench.c build/_obj/libingot.a -o /tmp/kernels_bench -lm && /tmp/kernels_bench
 * Optional arguments: seconds per measurement (default 0.3), a type-name filter.
 *
 * Shapes are SmolLM2-135M's: hidden 576, MLP 1536, vocabulary 49152. IN is a
 * literal in every kernel call (as in generated model code), through one
 * wrapper per (dtype, IN). Rows are split across the pool like the generated
 * code does: tp_parallel_for over [0, OUT) with a grain of 16 rows.
 * Weights are re-read on every call, so whatever fits in the last-level
 * cache is measured at cache bandwidth, not DRAM bandwidth. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kc_matmul.h"
#include "kc_quant.h"
#include "kc_x16.h"
#include "kc_x16k.h"
#include "kc_x16s.h"
#include "threadpool.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef void (*mm_fn)(const void *W, const void *X, float *Y, int ldy, int T, int r0, int r1);

/* One wrapper per (dtype, IN) so that IN is a compile-time constant. */
#define FLOAT_WRAP(NAME, KERNEL, WT, IN)                                                               \
    static void NAME##_##IN(const void *W, const void *X, float *Y, int ldy, int T, int r0, int r1) { \
        KERNEL((const WT *)W, (const float *)X, IN, Y, ldy, T, IN, r0, r1, NULL, 0);                 \
    }
#define QUANT_WRAP(NAME, KERNEL, WT, IN)                                                                \
    static void NAME##_##IN(const void *W, const void *X, float *Y, int ldy, int T, int r0, int r1) {  \
        KERNEL((const WT *)W, (const kc_q8 *)X, (IN) / 32, Y, ldy, T, IN, r0, r1, NULL, 0);            \
    }
#define Q16_WRAP(NAME, KERNEL, IN)                                                                       \
    static void NAME##_##IN(const void *W, const void *X, float *Y, int ldy, int T, int r0, int r1) {  \
        KERNEL(W, (const kc_q16 *)X, (IN) / 32, Y, ldy, T, IN, r0, r1, NULL, 0);                       \
    }
#define S16_WRAP(NAME, KERNEL, IN)                                                                       \
    static void NAME##_##IN(const void *W, const void *X, float *Y, int ldy, int T, int r0, int r1) {  \
        KERNEL(W, (const kc_q16s *)X, (IN) / 256, Y, ldy, T, IN, r0, r1, NULL, 0);                     \
    }
#define WRAPS(IN)                                   \
    FLOAT_WRAP(mmx_q8_0, kc_mmx_q8_0, block_q8_0, IN) \
    FLOAT_WRAP(mmx_q4_0, kc_mmx_q4_0, block_q4_0, IN) \
    FLOAT_WRAP(mmx_q4_1, kc_mmx_q4_1, block_q4_1, IN) \
    FLOAT_WRAP(mm_f32, kc_mm_f32, float, IN)        \
    FLOAT_WRAP(mm_f16, kc_mm_f16, uint16_t, IN)     \
    FLOAT_WRAP(mm_bf16, kc_mm_bf16, uint16_t, IN)   \
    QUANT_WRAP(mm_q8_0, kc_mm_q8_0, block_q8_0, IN) \
    QUANT_WRAP(mm_q4_0, kc_mm_q4_0, block_q4_0, IN) \
    QUANT_WRAP(mm_q4_1, kc_mm_q4_1, block_q4_1, IN) \
    Q16_WRAP(mmp_q8_0, kc_mmp_q8_0, IN)              \
    Q16_WRAP(mmp_q4_0, kc_mmp_q4_0, IN)              \
    Q16_WRAP(mmp_q4_1, kc_mmp_q4_1, IN)              \
    FLOAT_WRAP(mmx_q5_0, kc_mmx_q5_0, block_q5_0, IN) \
    Q16_WRAP(mmp_q5_0, kc_mmp_q5_0, IN)              \
    FLOAT_WRAP(mmx_iq4_nl, kc_mmx_iq4_nl, block_iq4_nl, IN) \
    Q16_WRAP(mmp_iq4_nl, kc_mmp_iq4_nl, IN)
#define KWRAPS(IN) /* the K-quants: IN a multiple of 256 */ \
    FLOAT_WRAP(mmx_q4_k, kc_mmx_q4_k, block_q4_K, IN)     \
    Q16_WRAP(mmp_q4_k, kc_mmp_q4_k, IN)                  \
    FLOAT_WRAP(mmx_q6_k, kc_mmx_q6_k, block_q6_K, IN)     \
    Q16_WRAP(mmp_q6_k, kc_mmp_q6_k, IN)                  \
    FLOAT_WRAP(mmx_q3_k, kc_mmx_q3_k, block_q3_K, IN)     \
    Q16_WRAP(mmp_q3_k, kc_mmp_q3_k, IN)                  \
    FLOAT_WRAP(mmx_q2_k, kc_mmx_q2_k, block_q2_K, IN)     \
    Q16_WRAP(mmp_q2_k, kc_mmp_q2_k, IN)                  \
    FLOAT_WRAP(mmx_iq4_xs, kc_mmx_iq4_xs, block_iq4_xs, IN) \
    Q16_WRAP(mmp_iq4_xs, kc_mmp_iq4_xs, IN)                \
    S16_WRAP(mms_q4_k, kc_mms_q4_k, IN)                    \
    S16_WRAP(mms_q6_k, kc_mms_q6_k, IN)                    \
    Q16_WRAP(mmp8_q4_k, kc_mmp8_q4_k, IN)                  \
    Q16_WRAP(mmp8_q6_k, kc_mmp8_q6_k, IN)                  \
    S16_WRAP(mms8_q4_k, kc_mms8_q4_k, IN)                  \
    S16_WRAP(mms8_q6_k, kc_mms8_q6_k, IN)
WRAPS(576)
WRAPS(1536)
KWRAPS(1536)

/* Types 6-8 are the quantized weights through kc_mmx_* (f32 activations,
 * exact dequantization); 9-11 the same weights in the 16-row interleaved
 * layout through kc_mmp_* (kc_x16.h: 15-bit kc_q16 activations); their
 * storage is that of types 3-5. 12-25 pair kc_kquant.h's row-major f32
 * kernels (x5_0, x4_k, x6_k, x3_k, x2_k, xi4nl, xi4xs) with kc_x16k.h's
 * interleaved ones (p5_0, p4_k, p6_k, p3_k, p2_k, pi4nl, pi4xs); the K-quants need IN a multiple of 256 (1536 here; 576 is not,
 * which is why SmolLM2's Q4_K_M file keeps q5_0 for those rows). 26-27 are p4_k and p6_k's weights
 * through kc_x16s.h's kc_mms_* (kc_q16s activations, one scale per 256; AMX for 16+ tokens
 * where the CPU has it, INGOT_AMX=0 to measure the vector path). 28-29 (a4_k, a6_k) are p4_k and
 * p6_k's weights through kc_mmp8_* against kc_quantize_q16a8's int8 activations (--act-quant q8:
 * one integer chain per weight); 30-31 (k4_k, k6_k) the same weights through kc_mms8_* against
 * kc_quantize_q16s_a8's (int8, one scale per 256: llama.cpp's Q8_K rounding, one chain). */
#define NTYPES 32
static const char *names[NTYPES] = {"f32",  "f16",  "bf16", "q8_0", "q4_0", "q4_1", "x8_0", "x4_0", "x4_1",
                                    "p8_0", "p4_0", "p4_1", "x5_0", "p5_0", "x4_k", "p4_k", "x6_k", "p6_k", "x3_k", "p3_k", "x2_k", "p2_k", "xi4nl", "pi4nl", "xi4xs", "pi4xs", "s4_k", "s6_k", "a4_k", "a6_k", "k4_k", "k6_k"};
static const double bytes_per_elem[NTYPES] = {4,         2,         2,         34.0 / 32,   18.0 / 32,  20.0 / 32,
                                              34.0 / 32, 18.0 / 32, 20.0 / 32, 34.0 / 32,   18.0 / 32,  20.0 / 32,
                                              22.0 / 32, 22.0 / 32, 144.0 / 256, 148.0 / 256, 210.0 / 256, 210.0 / 256,
                                              110.0 / 256, 114.0 / 256, 84.0 / 256, 84.0 / 256,
                                              18.0 / 32,   18.0 / 32,   136.0 / 256, 138.0 / 256,
                                              148.0 / 256, 210.0 / 256, 148.0 / 256, 210.0 / 256,
                                              148.0 / 256, 210.0 / 256};
/* the kc_kquant.h type of types 12-17 (their row-major blocks) */
static const int ktype[NTYPES] = {[12] = KC_WQ5_0, [13] = KC_WQ5_0, [14] = KC_WQ4_K, [15] = KC_WQ4_K, [16] = KC_WQ6_K, [17] = KC_WQ6_K,
                                  [18] = KC_WQ3_K, [19] = KC_WQ3_K, [20] = KC_WQ2_K, [21] = KC_WQ2_K,
                                  [22] = KC_WIQ4_NL, [23] = KC_WIQ4_NL, [24] = KC_WIQ4_XS, [25] = KC_WIQ4_XS,
                                  [26] = KC_WQ4_K, [27] = KC_WQ6_K, [28] = KC_WQ4_K, [29] = KC_WQ6_K,
                                  [30] = KC_WQ4_K, [31] = KC_WQ6_K};
static mm_fn fns576[NTYPES] = {mm_f32_576,   mm_f16_576,   mm_bf16_576,  mm_q8_0_576,  mm_q4_0_576,  mm_q4_1_576,
                               mmx_q8_0_576, mmx_q4_0_576, mmx_q4_1_576, mmp_q8_0_576, mmp_q4_0_576, mmp_q4_1_576,
                               mmx_q5_0_576, mmp_q5_0_576, NULL,         NULL,         NULL,         NULL,
                               NULL,         NULL,         NULL,         NULL,
                               mmx_iq4_nl_576, mmp_iq4_nl_576, NULL,     NULL, NULL, NULL, NULL, NULL, NULL, NULL};
static mm_fn fns1536[NTYPES] = {mm_f32_1536,   mm_f16_1536,   mm_bf16_1536,  mm_q8_0_1536,  mm_q4_0_1536,  mm_q4_1_1536,
                                mmx_q8_0_1536, mmx_q4_0_1536, mmx_q4_1_1536, mmp_q8_0_1536, mmp_q4_0_1536, mmp_q4_1_1536,
                                mmx_q5_0_1536, mmp_q5_0_1536, mmx_q4_k_1536, mmp_q4_k_1536, mmx_q6_k_1536, mmp_q6_k_1536,
                                mmx_q3_k_1536, mmp_q3_k_1536, mmx_q2_k_1536, mmp_q2_k_1536,
                                mmx_iq4_nl_1536, mmp_iq4_nl_1536, mmx_iq4_xs_1536, mmp_iq4_xs_1536,
                                mms_q4_k_1536, mms_q6_k_1536, mmp8_q4_k_1536, mmp8_q6_k_1536,
                                mms8_q4_k_1536, mms8_q6_k_1536};

typedef struct {
    mm_fn fn;
    const void *W, *X;
    float *Y;
    int ldy, T;
} job;

static void job_fn(void *ctx, int64_t b, int64_t e, int tid) {
    (void)tid;
    job *j = ctx;
    j->fn(j->W, j->X, j->Y, j->ldy, j->T, (int)b, (int)e);
}

static void noop_fn(void *ctx, int64_t b, int64_t e, int tid) {
    (void)ctx, (void)b, (void)e, (void)tid;
}

/* Fills a buffer with small random values valid for any dtype: float types
 * get finite numbers, block scales get finite fp16 values. */
static void fill(void *buf, size_t bytes, int dt) {
    uint8_t *p = buf;
    uint32_t s = 12345;
    for (size_t i = 0; i < bytes; i++) {
        s = s * 1664525u + 1013904223u;
        p[i] = (uint8_t)(s >> 24);
    }
    size_t n;
    switch (dt) {
    case 0:
        n = bytes / 4;
        for (size_t i = 0; i < n; i++) ((float *)buf)[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
        break;
    case 1:
        for (size_t i = 0; i < bytes / 2; i++) ((uint16_t *)buf)[i] = (uint16_t)(0x3000 | (((uint16_t *)buf)[i] & 0x83ff));
        break;
    case 2:
        for (size_t i = 0; i < bytes / 2; i++) ((uint16_t *)buf)[i] = (uint16_t)(0x3c00 | (((uint16_t *)buf)[i] & 0x807f));
        break;
    case 3:
        for (size_t i = 0; i < bytes / sizeof(block_q8_0); i++) ((block_q8_0 *)buf)[i].d = 0x2000;
        break;
    case 4:
        for (size_t i = 0; i < bytes / sizeof(block_q4_0); i++) ((block_q4_0 *)buf)[i].d = 0x2000;
        break;
    case 5:
        for (size_t i = 0; i < bytes / sizeof(block_q4_1); i++) ((block_q4_1 *)buf)[i].d = ((block_q4_1 *)buf)[i].m = 0x2000;
        break;
    default: { /* a kc_kquant.h type: its f16 scales (d, and dmin or m) */
        const size_t bb = kc__kbytes(dt);
        const size_t at = dt == KC_WQ6_K   ? offsetof(block_q6_K, d)
                          : dt == KC_WQ3_K ? offsetof(block_q3_K, d)
                          : dt == KC_WQ2_K ? offsetof(block_q2_K, d)
                          : dt == KC_WIQ4_XS ? offsetof(block_iq4_xs, d)
                                           : 0;
        const uint16_t h = 0x2000;
        for (size_t i = 0; i < bytes / bb; i++) {
            memcpy(p + i * bb + at, &h, 2);
            if (dt == KC_WQ5_1 || dt == KC_WQ4_K || dt == KC_WQ5_K || dt == KC_WQ2_K) memcpy(p + i * bb + at + 2, &h, 2);
        }
        break;
    }
    }
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 0.3;
    const struct { int IN, OUT, T; const char *what; } shapes[] = {
        {576, 1536, 1, "decode  576->1536 "},  {1536, 576, 1, "decode 1536->576  "},
        {1536, 576, 8, "batch8 1536->576   "},
        {576, 1536, 16, "batch16 576->1536 "}, {1536, 576, 16, "batch16 1536->576 "},
        {576, 49152, 1, "decode  576->49152"}, {576, 1536, 128, "prefill 576->1536 "},
        {1536, 576, 128, "prefill 1536->576 "}, {576, 49152, 128, "prefill 576->49152"},
        {576, 1536, 512, "prefill 576->1536 "}, {1536, 576, 512, "prefill 1536->576 "},
    };
    /* Optional second argument: only the types whose name contains it
     * (e.g. "x4" for the kc_mmx Q4 kernels). */
    const char *only = argc > 2 ? argv[2] : NULL;
    tp_pool *pools[3] = {NULL, tp_create(1), tp_create(2)};

    for (int nt = 1; nt <= 2; nt++) {
        const int calls = 200000;
        double t0 = now_s();
        for (int i = 0; i < calls; i++) tp_parallel_for(pools[nt], 1536, 16, noop_fn, NULL);
        printf("tp_parallel_for overhead, %d thread(s): %.2f us/call\n", nt, (now_s() - t0) / calls * 1e6);
    }
    {
        float *x = malloc(sizeof(float) * 1536 * 128);
        kc_q8 *q = malloc(sizeof(kc_q8) * 48 * 128);
        fill(x, sizeof(float) * 1536 * 128, 0);
        int reps = 0;
        double t0 = now_s(), dt;
        do {
            kc_quantize_q8(x, q, 1536 * 128);
            reps++;
        } while ((dt = now_s() - t0) < secs);
        printf("kc_quantize_q8: %.2f GB/s of f32 input (%.1f ns per 576-row)\n", 1536.0 * 128 * 4 * reps / dt / 1e9,
               dt / reps / (1536.0 * 128 / 576) * 1e9);
        free(x), free(q);
    }

    printf("\n%-20s %-5s %8s %8s %8s %8s %10s\n", "shape (IN->OUT)", "type", "GB/s@1", "GF/s@1", "GB/s@2", "GF/s@2",
           "us/call@2");
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int IN = shapes[si].IN, OUT = shapes[si].OUT, T = shapes[si].T;
        float *xf = malloc(sizeof(float) * (size_t)T * IN);
        fill(xf, sizeof(float) * (size_t)T * IN, 0);
        kc_q8 *xq = malloc(sizeof(kc_q8) * (size_t)T * (IN / 32));
        kc_quantize_q8(xf, xq, T * IN);
        kc_q16 *x16 = malloc(sizeof(kc_q16) * (size_t)T * (IN / 32));
        kc_quantize_q16(xf, x16, T * IN);
        kc_q16 *x16a8 = malloc(sizeof(kc_q16) * (size_t)T * (IN / 32));
        kc_quantize_q16a8(xf, x16a8, T * IN);
        kc_q16s *x16s = IN % 256 ? NULL : malloc(sizeof(kc_q16s) * (size_t)T * (IN / 256));
        if (x16s) kc_quantize_q16s(xf, x16s, T * IN);
        kc_q16s *x16s8 = IN % 256 ? NULL : malloc(sizeof(kc_q16s) * (size_t)T * (IN / 256));
        if (x16s8) kc_quantize_q16s_a8(xf, x16s8, T * IN);
        float *Y = malloc(sizeof(float) * (size_t)T * OUT);
        for (int dt = 0; dt < NTYPES; dt++) {
            if (only && !strstr(names[dt], only)) continue;
            mm_fn fn = IN == 576 ? fns576[dt] : fns1536[dt];
            if (!fn) continue; /* a K-quant: IN is not a multiple of 256 */
            const int interleaved = (dt >= 9 && dt < 12) || (dt >= 12 && dt % 2 == 1) || dt >= 26;
            size_t wbytes = (size_t)((double)OUT * IN * bytes_per_elem[dt]);
            void *W = malloc(wbytes);
            if (dt >= 12) { /* row-major blocks first (a tile may be larger: Q4_K's unpacked scales) */
                const size_t rowmajor = (size_t)OUT * (size_t)(IN / kc_x16k_cols(ktype[dt])) * kc__kbytes(ktype[dt]);
                free(W);
                W = malloc(rowmajor);
                fill(W, rowmajor, ktype[dt]);
            } else {
                fill(W, wbytes, dt < 6 ? dt : dt < 9 ? dt - 3 : dt - 6);
            }
            if (interleaved) { /* the same blocks, interleaved */
                void *P = malloc(wbytes);
                kc_x16k_repack(dt >= 12 ? ktype[dt] : dt - 6, W, P, OUT, IN);
                free(W);
                W = P;
            }
            job j = {fn, W,
                     dt >= 30 ? (const void *)x16s8 : dt >= 28 ? (const void *)x16a8 : dt >= 26 ? (const void *)x16s : interleaved ? (const void *)x16 : dt < 3 || dt >= 6 ? (const void *)xf : (const void *)xq,
                     Y, OUT, T};
            printf("%-20s %-5s", shapes[si].what, names[dt]);
            double per_call = 0;
            for (int nt = 1; nt <= 2; nt++) {
                tp_parallel_for(pools[nt], OUT, 16, job_fn, &j); /* warm-up */
                int reps = 0;
                double t0 = now_s(), el;
                do {
                    tp_parallel_for(pools[nt], OUT, 16, job_fn, &j);
                    reps++;
                } while ((el = now_s() - t0) < secs);
                per_call = el / reps;
                printf(" %8.1f %8.1f", wbytes / per_call / 1e9, 2.0 * T * IN * OUT / per_call / 1e9);
            }
            printf(" %10.1f\n", per_call * 1e6);
            fflush(stdout);
            free(W);
        }
        free(xf), free(xq), free(x16), free(x16a8), free(x16s), free(x16s8), free(Y);
    }
    tp_free(pools[1]);
    tp_free(pools[2]);
    return 0;
}
