/* gemv_float.c — decode GEMV of a float (f16 / bf16 / f32) matrix streamed from DRAM: the row-major
 * kernel (kernels/cpu/kc_matmul.h kc_mm_*), the 16-row interleaved one (kc_x16f.h kc_mm16_*), and a
 * plain read of the same bytes (the ceiling), alternated, one thread, GB/s of weights.
 *
 * Not a test and not built by make. Build and run (from the repo root):
 *   make lib && cc -std=c11 -D_GNU_SOURCE -O2 -march=native -pthread -Iruntime/core -Iruntime/load -Ikernels/cpu \
 *      bench/gemv_float.c build/_obj/libingot.a -o /tmp/gemv_float -lm && /tmp/gemv_float
 * Optional arguments: type (f16, bf16 or f32; default f16), columns (a multiple of 32; default 1536),
 * MB of weights (default 256: past any last-level cache here, so each call reads DRAM), tokens
 * (default 1, a decode step; 16 is a batched serving step, which the FMAs bound, not DRAM). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hugealloc.h"
#include "kc_x16f.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The ceiling: every byte of W loaded once, summed so that the loads stay. */
static float plain_read(const void *W, size_t bytes) {
    const float *p = W;
    float s[16] = {0};
    for (size_t i = 0; i < bytes / 4; i += 16)
        for (int j = 0; j < 16; j++) s[j] += p[i + j];
    float t = 0;
    for (int j = 0; j < 16; j++) t += s[j];
    return t;
}

int main(int argc, char **argv) {
    const char *type = argc > 1 ? argv[1] : "f16";
    const int IN = argc > 2 ? atoi(argv[2]) : 1536, MB = argc > 3 ? atoi(argv[3]) : 256, T = argc > 4 ? atoi(argv[4]) : 1;
    const int wt = !strcmp(type, "f32") ? KC_WF32 : !strcmp(type, "bf16") ? KC_WBF16 : KC_WF16;
    if (IN < 32 || IN % 32 || IN > 65536 || MB < 1 || MB > 4096 || T < 1 || T > 64 ||
        (strcmp(type, "f16") && strcmp(type, "bf16") && strcmp(type, "f32")))
        return fprintf(stderr, "usage: gemv_float [f16|bf16|f32] [columns, a multiple of 32] [MB] [tokens, 1-64]\n"), 2;
    const size_t es = kc_x16f_elem(wt);
    const int OUT = (int)((size_t)MB * 1000000 / es / (size_t)IN / 16 * 16);
    const size_t bytes = (size_t)OUT * IN * es;
    void *W = ha_alloc(bytes), *W16 = ha_alloc(bytes);
    float *x = malloc(sizeof(float) * IN * T), *y = malloc(sizeof(float) * OUT * T);
    if (!W || !W16 || !x || !y) return fprintf(stderr, "out of memory\n"), 1;
    for (size_t i = 0; i < (size_t)OUT * IN; i++) {
        const float v = (float)(i * 2654435761u % 1000) / 1000.0f - 0.5f;
        if (wt == KC_WF32) ((float *)W)[i] = v;
        else if (wt == KC_WF16) ((uint16_t *)W)[i] = kc_f32_to_fp16(v);
        else ((uint16_t *)W)[i] = (uint16_t)(kc_f32_to_fp16(v) & 0xff00); /* any bits: a speed test */
    }
    kc_x16f_repack(wt, W, W16, OUT, IN);
    for (int i = 0; i < IN * T; i++) x[i] = (float)(i % 13) / 13.0f;
    printf("GEMV %s %d x %d (%.0f MB), %d token(s), one thread, best of 5 per round, GB/s of weights (GFLOP/s)\n", type,
           OUT, IN, bytes / 1e6, T);
    float sink = 0;
    for (int round = 0; round < 3; round++) {
        double best[3] = {1e30, 1e30, 1e30};
        for (int it = 0; it < 5; it++) {
            double t0 = now_s();
            if (wt == KC_WF32) kc_mm_f32(W, x, IN, y, OUT, T, IN, 0, OUT, NULL, 0);
            else if (wt == KC_WF16) kc_mm_f16(W, x, IN, y, OUT, T, IN, 0, OUT, NULL, 0);
            else kc_mm_bf16(W, x, IN, y, OUT, T, IN, 0, OUT, NULL, 0);
            double t1 = now_s();
            if (wt == KC_WF32) kc_mm16_f32(W16, x, IN, y, OUT, T, IN, 0, OUT, NULL, 0);
            else if (wt == KC_WF16) kc_mm16_f16(W16, x, IN, y, OUT, T, IN, 0, OUT, NULL, 0);
            else kc_mm16_bf16(W16, x, IN, y, OUT, T, IN, 0, OUT, NULL, 0);
            double t2 = now_s();
            sink += plain_read(W, bytes);
            double t3 = now_s();
            if (t1 - t0 < best[0]) best[0] = t1 - t0;
            if (t2 - t1 < best[1]) best[1] = t2 - t1;
            if (t3 - t2 < best[2]) best[2] = t3 - t2;
        }
        const double flop = 2.0 * OUT * IN * T;
        printf("  row-major %5.1f (%5.1f)   interleaved %5.1f (%5.1f)   plain read %5.1f   (interleaved / row-major %.2fx)\n",
               bytes / best[0] / 1e9, flop / best[0] / 1e9, bytes / best[1] / 1e9, flop / best[1] / 1e9,
               bytes / best[2] / 1e9, best[0] / best[1]);
    }
    printf("(%g %g)\n", (double)sink, (double)y[0]);
    ha_free(W, bytes), ha_free(W16, bytes), free(x), free(y);
    return 0;
}
