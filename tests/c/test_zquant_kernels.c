/* test_zquant_kernels.c — kc_mmx_q4_z/q8_z/f8_b32 (the GPTQ/AWQ/FP8 repacked types) against dtype.c's dequantization.
 *
 * Two checks per type: every 32-weight segment the kernels decode in
 * registers (kc__kseg) equals dtype_dequantize_row's exactly (so the
 * matmul uses exactly the checkpoint's weights), and the matmul (direct and
 * packed paths, partial tiles, bias, accumulate) agrees with a double
 * reference on those weights. Built with -march=native by the Makefile;
 * tests/test_quant_ckpt.py also compiles it for AVX2 and for no SIMD. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "kc_kquant.h"
#include "kc_matmul.h"

#define TOL 1e-5 /* relative to sum |w x|: summation order only */

#include "check.h"
#include "matmul_ref.h"
#include "xorshift.h"

static const ingot_dtype TYPES[] = {INGOT_Q4_Z, INGOT_Q8_Z, INGOT_F8_B32};
#define N_TYPES (int)(sizeof TYPES / sizeof TYPES[0])

/* Valid blocks: random codes; a zero point in the type's range (including
 * the edges 0 and 16 / 256 the checkpoints' conventions allow); an f16 scale
 * of random sign and exponent 2^-12 .. 2^-5 (Q4_Z/Q8_Z); an f32 scale of
 * random sign and size 2^-20 .. 2^4, and E4M3 codes that are not NaN, every
 * subnormal included (F8_B32). */
static uint8_t *rnd_weights(ingot_dtype t, int rows, int IN, size_t *row_bytes) {
    dtype_row_bytes(t, IN, row_bytes);
    const size_t n = *row_bytes * (size_t)rows, bb = dtype_block_bytes(t);
    uint8_t *W = malloc(n);
    for (size_t i = 0; i < n; i++) W[i] = (uint8_t)rnd();
    for (size_t blk = 0; blk < n / bb; blk++) {
        uint8_t *b = W + blk * bb;
        if (t == INGOT_F8_B32) {
            const float d = ldexpf(1.0f + rndf() * 0.5f, rndi(-20, 4)) * (rnd() & 1 ? -1.0f : 1.0f);
            memcpy(b, &d, 4);
            for (int l = 0; l < 32; l++)
                if ((b[4 + l] & 0x7f) == 0x7f) b[4 + l] ^= 1; /* NaN -> the largest finite value, 448 */
            continue;
        }
        const uint16_t h = (uint16_t)((rnd() & 1) << 15 | (uint16_t)(3 + rnd() % 8) << 10 | (rnd() & 0x3ff));
        const int zmax = t == INGOT_Q4_Z ? 16 : 256, r = rndi(0, 9);
        const uint16_t z = (uint16_t)(r == 0 ? 0 : r == 1 ? zmax : rndi(0, zmax));
        memcpy(b, &h, 2);
        memcpy(b + 2, &z, 2);
    }
    return W;
}

static void call_mmx(ingot_dtype t, const void *W, const float *X, int ldx, float *Y, int ldy, int T, int IN, int r0,
                     int r1, const float *bias, int acc) {
    switch (t) {
    case INGOT_Q4_Z: kc_mmx_q4_z(W, X, ldx, Y, ldy, T, IN, r0, r1, bias, acc); break;
    case INGOT_Q8_Z: kc_mmx_q8_z(W, X, ldx, Y, ldy, T, IN, r0, r1, bias, acc); break;
    default: kc_mmx_f8_b32(W, X, ldx, Y, ldy, T, IN, r0, r1, bias, acc); break;
    }
}

static int kc_type(ingot_dtype t) { return t == INGOT_Q8_Z ? KC_WQ8_Z : KC_WF8_B32; }

/* The weights the segment kernels decode (Q8_Z, F8_B32; Q4_Z takes kc_matmul.h's Q4 tiles, checked
 * by the matmuls below), segment by segment, equal the reference. */
static void test_decode(void) {
    for (int ti = 1; ti < N_TYPES; ti++) {
        const ingot_dtype t = TYPES[ti];
        const int IN = 2048, rows = 8;
        size_t rb;
        uint8_t *W = rnd_weights(t, rows, IN, &rb);
        float ref[2048];
        int bad = 0;
        for (int r = 0; r < rows; r++) {
            dtype_dequantize_row(t, W + (size_t)r * rb, ref, IN);
            for (int s = 0; s < IN / 32; s++) {
                kc_vf w[KC_KSV];
                float got[32];
                kc__kseg(W + (size_t)r * rb, kc_type(t), s, w);
                memcpy(got, w, sizeof got);
                /* equal values (a weight q = z is +0 here and d*(q-z) = -0 there for d < 0: the same in every sum) */
                int differ = 0;
                for (int l = 0; l < 32; l++) differ += !(got[l] == ref[32 * s + l]);
                if (differ && bad++ < 3)
                    for (int l = 0; l < 32; l++)
                        if (!(got[l] == ref[32 * s + l])) {
                            printf("  %s row %d segment %d element %d: %.9g, reference %.9g\n", dtype_name(t), r, s, l,
                                   got[l], ref[32 * s + l]);
                            break;
                        }
            }
        }
        check(bad == 0, "kc__kseg %s: %d segments differ from dtype_dequantize_row", dtype_name(t), bad);
        free(W);
    }
}

static void mm_case(ingot_dtype t, int IN, int T, int OUT, int r0, int r1, int use_bias, int acc) {
    const int ldx = IN + 5, ldy = OUT + 3;
    size_t rb;
    uint8_t *W = rnd_weights(t, OUT, IN, &rb);
    float *bias = malloc(sizeof(float) * OUT);
    float *X = malloc(sizeof(float) * (size_t)T * ldx);
    float *Y = malloc(sizeof(float) * (size_t)T * ldy), *Y0 = malloc(sizeof(float) * (size_t)T * ldy);
    for (int r = 0; r < OUT; r++) bias[r] = rndf();
    for (int tt = 0; tt < T; tt++)
        for (int k = 0; k < ldx; k++) X[(size_t)tt * ldx + k] = k < IN ? rndf() : NAN;
    for (size_t i = 0; i < (size_t)T * ldy; i++) Y[i] = Y0[i] = rndf() * 3.0f;
    call_mmx(t, W, X, ldx, Y, ldy, T, IN, r0, r1, use_bias ? bias : NULL, acc);
    const int bad = matmul_ref_check(t, W, rb, X, ldx, Y, Y0, ldy, T, IN, OUT, r0, r1, use_bias ? bias : NULL, acc, TOL, NULL);
    check(bad == 0, "kc_mmx_%s IN=%d T=%d rows [%d,%d) of %d bias=%d acc=%d: %d bad", dtype_name(t), IN, T, r0, r1, OUT,
          use_bias, acc, bad);
    free(W), free(bias), free(X), free(Y), free(Y0);
}

/* The token counts and shapes of test_kquant_kernels.c: direct path (T < 3),
 * packed path with full and partial tiles and two 128-token chunks. */
static void test_matmul(void) {
    const int ts[] = {1, 2, 3, 17, 133}, ins[] = {32, 576, 1056};
    for (int ti = 0; ti < N_TYPES; ti++)
        for (int ii = 0; ii < 3; ii++)
            for (int tj = 0; tj < 5; tj++) {
                mm_case(TYPES[ti], ins[ii], ts[tj], 37, 0, 37, 0, 0);
                mm_case(TYPES[ti], ins[ii], ts[tj], 37, 5, 30, 1, 1);
                mm_case(TYPES[ti], ins[ii], ts[tj], 72, 8, 72, 1, 1);
            }
}

/* kc_embed_row (the scalar reference for these types) equals dtype_dequantize_row. */
static void test_embed(void) {
    for (int ti = 0; ti < N_TYPES; ti++) {
        size_t rb;
        uint8_t *W = rnd_weights(TYPES[ti], 3, 256, &rb);
        float out[256], ref[256];
        int bad = 0;
        for (int r = 0; r < 3; r++) {
            kc_embed_row(TYPES[ti], W, r, 256, out);
            dtype_dequantize_row(TYPES[ti], W + (size_t)r * rb, ref, 256);
            bad += memcmp(out, ref, sizeof out) != 0;
        }
        check(bad == 0, "kc_embed_row %s: %d rows differ", dtype_name(TYPES[ti]), bad);
        free(W);
    }
}

/* Every E4M3 code: dtype.c's conversion against the format's definition
 * (sign, 4 exponent bits with bias 7, 3 mantissa bits, subnormals at
 * exponent 0, NaN at S.1111.111, no infinities). */
static void test_e4m3(void) {
    int bad = 0;
    for (int c = 0; c < 256; c++) {
        const int e = (c >> 3) & 15, m = c & 7;
        const double mag = e == 0 ? ldexp(m / 8.0, -6) : ldexp(1.0 + m / 8.0, e - 7);
        const double want = (c & 0x80) ? -mag : mag;
        const float got = fp8_e4m3_to_f32((uint8_t)c);
        if ((c & 0x7f) == 0x7f ? !isnan(got) : (double)got != want || !!signbit(got) != ((c & 0x80) != 0)) bad++;
    }
    check(bad == 0, "fp8_e4m3_to_f32: %d of 256 codes wrong", bad);
}

int main(void) {
    rng_state = 0x853c49e6748fea9bull; /* this file's own sequence */
    test_e4m3();
    test_decode();
    test_embed();
    test_matmul();
    return check_summary();
}
