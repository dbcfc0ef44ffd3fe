/* vnni_peak.c — the integer dot-product ceiling of one core, against which the x16 kernels'
 * GFLOP/s (bench/kernels_bench.c) are read.
 *
 * Not a test and not built by make (x86-64 with AVX-512 VNNI only). Build and run:
 *   cc -std=c11 -O2 -march=native bench/vnni_peak.c -o /tmp/vnni_peak && /tmp/vnni_peak
 *
 * It measures the clock (a chain of dependent adds: one a cycle), then how many of each
 * instruction one core retires a cycle from 12 independent chains, alone and mixed with the
 * other operations the kernels spend per 16 vpdpbusd: two vpmulld (kc_x16s.h's integer
 * sub-scales), fused multiply-adds (the float folds), integer adds and conversions. A mix that
 * takes longer than its vpdpbusd alone shares their execution ports.
 *
 * The ceilings printed: the default activations (15 bits, two vpdpbusd chains per product) and
 * int8 activations (`--act-quant q8`, one chain), in GFLOP/s (2 per product) at the measured
 * clock. The instructions are written in assembly so that the compiler cannot keep or drop
 * anything between them. */
#define _GNU_SOURCE /* clock_gettime under -std=c11 */
#include <stdio.h>
#include <time.h>

#if !defined(__x86_64__) || !defined(__AVX512VNNI__)
int main(void) {
    puts("vnni_peak: needs x86-64 with AVX-512 VNNI (-march=native on such a CPU)");
    return 0;
}
#else
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define CHAINS12(OP) OP(0) OP(1) OP(2) OP(3) OP(4) OP(5) OP(6) OP(7) OP(8) OP(9) OP(10) OP(11)
#define SIX(OP) OP(12) OP(13) OP(14) OP(15) OP(16) OP(17)
#define CLOBBER                                                                                                     \
    "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", \
        "xmm14", "xmm15", "xmm16", "xmm17"
#define DPZ(k) "vpdpbusd %%zmm30, %%zmm31, %%zmm" #k "\n\t"
#define DPY(k) "vpdpbusd %%ymm30, %%ymm31, %%ymm" #k "\n\t"
#define MULLD(k) "vpmulld %%zmm30, %%zmm" #k ", %%zmm" #k "\n\t"
#define FMA(k) "vfmadd231ps %%zmm30, %%zmm31, %%zmm" #k "\n\t"
#define ADD(k) "vpaddd %%zmm30, %%zmm" #k ", %%zmm" #k "\n\t"
#define CVT(k) "vcvtdq2ps %%zmm30, %%zmm" #k "\n\t"

#define N 100000000L
/* cycles per loop iteration of the assembly block BODY */
#define CYCLES(ghz, BODY)                                                   \
    ({                                                                      \
        const double t0_ = now_s();                                         \
        for (long i_ = 0; i_ < N; i_++) __asm__ volatile(BODY ::: CLOBBER); \
        (now_s() - t0_) * (ghz) * 1e9 / N;                                  \
    })

int main(void) {
    long x = 0;
    double t0 = now_s();
    for (long i = 0; i < 4 * N; i++) __asm__ volatile("add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0" : "+r"(x));
    const double ghz = 4.0 * 4 * N / (now_s() - t0) / 1e9;
    printf("clock: %.2f GHz (dependent adds)\n", ghz);

    const double dpz = CYCLES(ghz, CHAINS12(DPZ)) / 12, dpy = CYCLES(ghz, CHAINS12(DPY)) / 12;
    printf("vpdpbusd zmm: %.2f a cycle; ymm: %.2f a cycle\n", 1 / dpz, 1 / dpy);
    printf("12 vpdpbusd zmm alone: %.1f cycles; with 6 vpmulld: %.1f; 6 vfmadd231ps: %.1f; 6 vpaddd: %.1f; "
           "6 vcvtdq2ps: %.1f\n",
           12 * dpz, CYCLES(ghz, CHAINS12(DPZ) SIX(MULLD)), CYCLES(ghz, CHAINS12(DPZ) SIX(FMA)),
           CYCLES(ghz, CHAINS12(DPZ) SIX(ADD)), CYCLES(ghz, CHAINS12(DPZ) SIX(CVT)));
    const double products = (dpz < 0.5 * dpy ? 32.0 / dpy : 64.0 / dpz); /* 8-bit products a cycle */
    printf("ceiling at %.2f GHz: %.0f GFLOP/s with 15-bit activations (2 chains), %.0f with int8 (1 chain)\n", ghz,
           2 * products / 2 * ghz, 2 * products * ghz);
    return 0;
}
#endif
