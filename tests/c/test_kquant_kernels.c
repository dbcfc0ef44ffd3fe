/* test_kquant_kernels.c — kc_mmx_* and kc_mm_* for Q5_0/Q5_1/IQ4_NL/MXFP4/Q2_K..Q6_K/IQ4_XS and kc_embed_row against dtype.c's dequantization. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "kc_kquant.h"
#include "kc_matmul.h"
#include "kc_quant.h"

/* Tolerance relative to sum_k |w_k x_k| of the output: the kernels compute
 * the weights exactly (bit-equal to dtype_dequantize_row) and accumulate in
 * f32, so only summation order differs from the double reference; plus a
 * few ulps of |bias| + |previous Y| + |result| for the final adds. */
#define TOL 1e-5
/* int8 activations: the integer dots are exact, the scales d_w * d_x and the
 * min terms c * s_x (s_x rounded once in kc_q8) are f32 products */
#define TOL_Q8 2e-5

#include "check.h"
#include "matmul_ref.h"
#include "xorshift.h"

static const ingot_dtype TYPES[] = {INGOT_Q5_0, INGOT_Q5_1, INGOT_IQ4_NL, INGOT_MXFP4, INGOT_Q2_K, INGOT_Q3_K,
                                    INGOT_Q4_K, INGOT_Q5_K, INGOT_Q6_K, INGOT_IQ4_XS};
#define N_TYPES (int)(sizeof TYPES / sizeof TYPES[0])

/* Byte offsets of the f16 scales of a block (-1: none). */
static void scale_offsets(ingot_dtype t, int *a, int *b) {
    *a = 0, *b = -1;
    if (t == INGOT_Q5_1 || t == INGOT_Q4_K || t == INGOT_Q5_K) *b = 2;
    if (t == INGOT_Q2_K) *a = 80, *b = 82;
    if (t == INGOT_Q3_K) *a = 108;
    if (t == INGOT_Q6_K) *a = 208;
}

/* Random bytes for every code and sub-scale, f16 scales of moderate size
 * (random sign, exponent 2^-12 .. 2^-5) so sums stay far from overflow. */
static uint8_t *rnd_weights(ingot_dtype t, int rows, int IN, size_t *row_bytes) {
    dtype_row_bytes(t, IN, row_bytes);
    const size_t n = *row_bytes * (size_t)rows, bb = dtype_block_bytes(t);
    uint8_t *W = malloc(n);
    for (size_t i = 0; i < n; i++) W[i] = (uint8_t)rnd();
    if (t == INGOT_MXFP4) { /* E8M0 scales 2^-13 .. 2^-4 (e 115 .. 124), as moderate as the f16 ones */
        for (size_t blk = 0; blk < n / bb; blk++) W[blk * bb] = (uint8_t)(115 + rnd() % 10);
        return W;
    }
    int a, b;
    scale_offsets(t, &a, &b);
    for (size_t blk = 0; blk < n / bb; blk++) {
        for (int k = 0; k < 2; k++) {
            const int off = k ? b : a;
            if (off < 0) continue;
            const uint16_t h = (uint16_t)((rnd() & 1) << 15 | (uint16_t)(3 + rnd() % 8) << 10 | (rnd() & 0x3ff));
            W[blk * bb + (size_t)off] = (uint8_t)h;
            W[blk * bb + (size_t)off + 1] = (uint8_t)(h >> 8);
        }
    }
    return W;
}

static void call_mmx(ingot_dtype t, const void *W, const float *X, int ldx, float *Y, int ldy, int T, int IN, int r0,
                     int r1, const float *bias, int acc) {
    switch (t) {
    case INGOT_Q5_0: kc_mmx_q5_0(W, X, ldx, Y, ldy, T, IN, r0, r1, bias, acc); break;
    case INGOT_Q5_1: kc_mmx_q5_1(W, X, ldx, Y, ldy, T, IN, r0, r1, bias, acc); break;
    case INGOT_IQ4_NL: kc_mmx_iq4_nl(W, X, ldx, Y, ldy, T, IN, r0, r1, bias, acc); break;
    case INGOT_MXFP4: kc_mmx_mxfp4(W, X, ldx, Y, ldy, T, IN, r0, r1, bias, acc); break;
    case INGOT_Q2_K: kc_mmx_q2_k(W, X, ldx, Y, ldy, T, IN, r0, r1, bias, acc); break;
    case INGOT_Q3_K: kc_mmx_q3_k(W, X, ldx, Y, ldy, T, IN, r0, r1, bias, acc); break;
    case INGOT_Q4_K: kc_mmx_q4_k(W, X, ldx, Y, ldy, T, IN, r0, r1, bias, acc); break;
    case INGOT_Q5_K: kc_mmx_q5_k(W, X, ldx, Y, ldy, T, IN, r0, r1, bias, acc); break;
    case INGOT_Q6_K: kc_mmx_q6_k(W, X, ldx, Y, ldy, T, IN, r0, r1, bias, acc); break;
    default: kc_mmx_iq4_xs(W, X, ldx, Y, ldy, T, IN, r0, r1, bias, acc); break;
    }
}

/* The int8-activation kernels (X as kc_q8 blocks). */
static void call_mm(ingot_dtype t, const void *W, const kc_q8 *X, int ldx, float *Y, int ldy, int T, int IN, int r0,
                    int r1, const float *bias, int acc) {
    switch (t) {
    case INGOT_Q5_0: kc_mm_q5_0(W, X, ldx, Y, ldy, T, IN, r0, r1, bias, acc); break;
    case INGOT_Q5_1: kc_mm_q5_1(W, X, ldx, Y, ldy, T, IN, r0, r1, bias, acc); break;
    case INGOT_IQ4_NL: kc_mm_iq4_nl(W, X, ldx, Y, ldy, T, IN, r0, r1, bias, acc); break;
    case INGOT_MXFP4: kc_mm_mxfp4(W, X, ldx, Y, ldy, T, IN, r0, r1, bias, acc); break;
    case INGOT_Q2_K: kc_mm_q2_k(W, X, ldx, Y, ldy, T, IN, r0, r1, bias, acc); break;
    case INGOT_Q3_K: kc_mm_q3_k(W, X, ldx, Y, ldy, T, IN, r0, r1, bias, acc); break;
    case INGOT_Q4_K: kc_mm_q4_k(W, X, ldx, Y, ldy, T, IN, r0, r1, bias, acc); break;
    case INGOT_Q5_K: kc_mm_q5_k(W, X, ldx, Y, ldy, T, IN, r0, r1, bias, acc); break;
    case INGOT_Q6_K: kc_mm_q6_k(W, X, ldx, Y, ldy, T, IN, r0, r1, bias, acc); break;
    default: kc_mm_iq4_xs(W, X, ldx, Y, ldy, T, IN, r0, r1, bias, acc); break;
    }
}

/* One case: Y rows [r0, r1) of OUT for T tokens against the double
 * reference on dtype_dequantize_row's weights; rows outside the range and
 * the padding of Y and X are poisoned/checked. q8: through kc_mm_* on the
 * kc_q8 quantization of X (the reference then uses d * qs as X). */
static void mm_case(ingot_dtype t, int q8, int IN, int T, int OUT, int r0, int r1, int use_bias, int acc) {
    const int ldx = IN + 5, ldy = OUT + 3;
    size_t rb;
    uint8_t *W = rnd_weights(t, OUT, IN, &rb);
    float *bias = malloc(sizeof(float) * OUT);
    float *X = malloc(sizeof(float) * (size_t)T * ldx);
    float *Y = malloc(sizeof(float) * (size_t)T * ldy), *Y0 = malloc(sizeof(float) * (size_t)T * ldy);
    for (int r = 0; r < OUT; r++) bias[r] = rndf();
    for (int tt = 0; tt < T; tt++)
        for (int k = 0; k < ldx; k++) X[(size_t)tt * ldx + k] = k < IN ? rndf() * (k % 7 == 0 ? 4.0f : 1.0f) : NAN;
    for (size_t i = 0; i < (size_t)T * ldy; i++) Y[i] = Y0[i] = rndf() * 3.0f;
    const int ldq = IN / 32 + 1; /* a poisoned padding block per row */
    kc_q8 *XQ = malloc(sizeof(kc_q8) * (size_t)T * ldq);
    for (int tt = 0; q8 && tt < T; tt++) {
        kc_q8 *row = XQ + (size_t)tt * ldq;
        kc_quantize_q8(X + (size_t)tt * ldx, row, IN);
        row[IN / 32].d = row[IN / 32].s = NAN;
        memset(row[IN / 32].qs, 0x7f, 32);
        for (int k = 0; k < IN; k++) X[(size_t)tt * ldx + k] = row[k / 32].d * (float)row[k / 32].qs[k % 32];
    }
    if (q8) call_mm(t, W, XQ, ldq, Y, ldy, T, IN, r0, r1, use_bias ? bias : NULL, acc);
    else call_mmx(t, W, X, ldx, Y, ldy, T, IN, r0, r1, use_bias ? bias : NULL, acc);
    double worst;
    const int bad = matmul_ref_check(t, W, rb, X, ldx, Y, Y0, ldy, T, IN, OUT, r0, r1, use_bias ? bias : NULL, acc,
                                     q8 ? TOL_Q8 : TOL, &worst);
    check(bad == 0, "kc_mm%s_%s IN=%d T=%d rows [%d,%d) of %d bias=%d acc=%d: %d bad (worst rel err %.2g)",
          q8 ? "" : "x", dtype_name(t), IN, T, r0, r1, OUT, use_bias, acc, bad, worst);
    free(W), free(bias), free(X), free(XQ), free(Y), free(Y0);
}

/* Token counts: the direct path (T < 3), the packed path with full and
 * partial microkernel tiles and more than one 128-token chunk. Rows: partial
 * tiles of either path. IN: one block, several, and (32-blocks) a partial
 * K chunk of the packed path. */
static void test_matmul(void) {
    const int ts[] = {1, 2, 3, 17, 133};
    for (int ti = 0; ti < N_TYPES; ti++) {
        const ingot_dtype t = TYPES[ti];
        const int k = dtype_block_elems(t) == 256;
        const int ins32[] = {32, 576, 1056}, ins256[] = {256, 768, 1536};
        for (int ii = 0; ii < 3; ii++)
            for (int tj = 0; tj < 5; tj++) {
                const int IN = k ? ins256[ii] : ins32[ii], T = ts[tj];
                for (int q8 = 0; q8 < 2; q8++) {
                    mm_case(t, q8, IN, T, 37, 0, 37, 0, 0);
                    mm_case(t, q8, IN, T, 37, 5, 30, 1, 1);
                    mm_case(t, q8, IN, T, 13, 3, 4, 1, 0);
                    mm_case(t, q8, IN, T, 72, 8, 72, 1, 1);
                }
            }
    }
}

/* kc_embed_row of every type equals dtype_dequantize_row of that row. */
static void test_embed(void) {
    for (int ti = 0; ti < N_TYPES; ti++) {
        const ingot_dtype t = TYPES[ti];
        const int IN = 512, rows = 3;
        size_t rb;
        uint8_t *W = rnd_weights(t, rows, IN, &rb);
        float out[512], ref[512];
        int bad = 0;
        for (int r = 0; r < rows; r++) {
            kc_embed_row(t, W, r, IN, out);
            dtype_dequantize_row(t, W + (size_t)r * rb, ref, IN);
            bad += memcmp(out, ref, sizeof out) != 0;
        }
        check(bad == 0, "kc_embed_row %s: %d rows differ", dtype_name(t), bad);
        free(W);
    }
}

int main(void) {
    rng_state = 0x2545f4914f6cdd1dull; /* this file's own sequence */
    test_embed();
    test_matmul();
    return check_summary();
}
