/* membw.c — the machine's DRAM read bandwidth, for the benchmarks' roofline.
 *
 * Not a test. bench/bench_smollm2.py compiles and runs it:
 *   cc -O2 -march=native -pthread bench/membw.c -o membw && ./membw THREADS [MiB]
 * Each of THREADS threads sums its share of a buffer (default 1024 MiB, far
 * beyond any last-level cache) with wide vector loads; the buffer is written
 * once first so every page is resident, and the best of 5 passes of each
 * loop is printed as "GB/s <value>" (10^9 bytes per second). A sum of loads
 * is what decode does with its weights, so this is the ceiling decode is
 * measured against. The loop runs plain and with software prefetches 1 and
 * 2 KB ahead, and the best of all counts: on a 2-core Xeon the prefetching
 * loops read 13% faster than the plain one (17.7 against 15.6 GB/s on one
 * thread), and the kernels prefetch too (kernels/cpu/kc_x16.h), so the
 * plain loop alone would understate the ceiling. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

typedef struct {
    const float *p;
    size_t n; /* floats */
    size_t ahead; /* prefetch distance in bytes; 0: none */
    float sum;
} share;

static void *read_share(void *arg) {
    share *s = arg;
    size_t i = 0;
#if defined(__AVX512F__)
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (; i + 64 <= s->n; i += 64) {
        if (s->ahead) /* 4 lines per step: the 256 bytes this step reads, s->ahead further on */
            for (int l = 0; l < 4; l++) __builtin_prefetch((const char *)(s->p + i) + s->ahead + 64 * l, 0, 3);
        a0 = _mm512_add_ps(a0, _mm512_load_ps(s->p + i));
        a1 = _mm512_add_ps(a1, _mm512_load_ps(s->p + i + 16));
        a2 = _mm512_add_ps(a2, _mm512_load_ps(s->p + i + 32));
        a3 = _mm512_add_ps(a3, _mm512_load_ps(s->p + i + 48));
    }
    s->sum = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
#elif defined(__AVX2__)
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (; i + 32 <= s->n; i += 32) {
        if (s->ahead)
            for (int l = 0; l < 2; l++) __builtin_prefetch((const char *)(s->p + i) + s->ahead + 64 * l, 0, 3);
        a0 = _mm256_add_ps(a0, _mm256_load_ps(s->p + i));
        a1 = _mm256_add_ps(a1, _mm256_load_ps(s->p + i + 8));
        a2 = _mm256_add_ps(a2, _mm256_load_ps(s->p + i + 16));
        a3 = _mm256_add_ps(a3, _mm256_load_ps(s->p + i + 24));
    }
    float t[8];
    _mm256_storeu_ps(t, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (int k = 0; k < 8; k++) s->sum += t[k];
#endif
    for (; i < s->n; i++) s->sum += s->p[i];
    return NULL;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    const int threads = argc > 1 ? atoi(argv[1]) : 1;
    const size_t mib = argc > 2 ? (size_t)atol(argv[2]) : 1024;
    if (threads < 1 || threads > 256 || mib < 64) {
        fprintf(stderr, "usage: membw THREADS [MiB >= 64]\n");
        return 2;
    }
    const size_t bytes = mib << 20, n = bytes / sizeof(float);
    float *buf = aligned_alloc(64, bytes);
    if (!buf) {
        fprintf(stderr, "membw: out of memory for %zu MiB\n", mib);
        return 1;
    }
    memset(buf, 0, bytes);
    pthread_t tid[256];
    share sh[256];
    double best = 0, sink = 0;
    for (int pass = 0; pass < 15; pass++) {
        const size_t ahead = (size_t)(pass % 3) * 1024; /* plain, 1 KB, 2 KB: interleaved */
        const double t0 = now_s();
        for (int t = 0; t < threads; t++) {
            const size_t a = n / 64 * (size_t)t / (size_t)threads * 64, b = n / 64 * (size_t)(t + 1) / (size_t)threads * 64;
            sh[t] = (share){buf + a, (t == threads - 1 ? n : b) - a, ahead, 0.0f};
            pthread_create(&tid[t], NULL, read_share, &sh[t]);
        }
        for (int t = 0; t < threads; t++) {
            pthread_join(tid[t], NULL);
            sink += sh[t].sum;
        }
        const double gbs = (double)bytes / (now_s() - t0) / 1e9;
        if (gbs > best) best = gbs;
    }
    printf("GB/s %.2f\n", best + sink * 0.0);
    free(buf);
    return 0;
}
