/* test_x16.c — the 16-row interleaved layout of every GGUF block type (kc_x16.h, kc_x16k.h) and of float weights (kc_x16f.h): the 15-bit and int8 (a8) activation quantizers, repacking, row reads and the matmuls against double-precision references on the row-major rows. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "kc_x16s.h"

#include "check.h"
#include "xorshift.h"

#define NTYPES 12
static const int WT[NTYPES] = {KC_WQ8_0, KC_WQ4_0, KC_WQ4_1, KC_WQ5_0,   KC_WQ5_1,  KC_WQ4_K,
                               KC_WQ5_K, KC_WQ6_K, KC_WQ3_K, KC_WQ2_K, KC_WIQ4_NL, KC_WIQ4_XS};
static const ingot_dtype DT[NTYPES] = {INGOT_Q8_0, INGOT_Q4_0, INGOT_Q4_1, INGOT_Q5_0,   INGOT_Q5_1,  INGOT_Q4_K,
                                       INGOT_Q5_K, INGOT_Q6_K, INGOT_Q3_K, INGOT_Q2_K, INGOT_IQ4_NL, INGOT_IQ4_XS};
static const char *NAME[NTYPES] = {"q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k",
                                   "q5_k", "q6_k", "q3_k", "q2_k", "iq4_nl", "iq4_xs"};
typedef void (*mmp_fn)(const void *, const kc_q16 *, int, float *, int, int, int, int, int, const float *, int);
static const mmp_fn FN[NTYPES] = {kc_mmp_q8_0, kc_mmp_q4_0, kc_mmp_q4_1, kc_mmp_q5_0, kc_mmp_q5_1,   kc_mmp_q4_k,
                                  kc_mmp_q5_k, kc_mmp_q6_k, kc_mmp_q3_k, kc_mmp_q2_k, kc_mmp_iq4_nl, kc_mmp_iq4_xs};
static const mmp_fn FN8[NTYPES] = {kc_mmp8_q8_0, kc_mmp8_q4_0, kc_mmp8_q4_1, kc_mmp8_q5_0, kc_mmp8_q5_1,   kc_mmp8_q4_k,
                                   kc_mmp8_q5_k, kc_mmp8_q6_k, kc_mmp8_q3_k, kc_mmp8_q2_k, kc_mmp8_iq4_nl, kc_mmp8_iq4_xs};
/* a type's tile width: a 32-block or a 256-element super-block */
static int tile_cols(int ty) { return kc_x16k_cols(WT[ty]); }

static uint16_t rnd_fp16(int e0, int e1) {
    return (uint16_t)(((rnd() & 1) << 15) | (uint16_t)((rndi(e0, e1) + 15) << 10) | (uint16_t)(rnd() & 1023));
}

/* A row-major [R][IN] block matrix: random codes, bit fields and (6-bit or
 * int8) group scales, f16 scales in a range that keeps the weights O(1). */
static void *rnd_blocks(int ty, int R, int IN) {
    size_t rb = 0;
    dtype_row_bytes(DT[ty], IN, &rb);
    uint8_t *w = malloc(rb * (size_t)R);
    for (size_t i = 0; i < rb * (size_t)R; i++) w[i] = (uint8_t)rnd();
    const size_t bb = rb / (size_t)(IN / tile_cols(ty));
    for (size_t b = 0; b < rb * (size_t)R / bb; b++) {
        uint8_t *p = w + b * bb;
        uint16_t d = rnd_fp16(-7, -4), m = rnd_fp16(-7, -4);
        if (DT[ty] == INGOT_Q6_K) memcpy(p + offsetof(block_q6_K, d), &d, 2);
        else if (DT[ty] == INGOT_Q3_K) memcpy(p + offsetof(block_q3_K, d), &d, 2);
        else if (DT[ty] == INGOT_Q2_K) memcpy(p + offsetof(block_q2_K, d), &d, 2), memcpy(p + offsetof(block_q2_K, dmin), &m, 2);
        else if (DT[ty] == INGOT_IQ4_XS) memcpy(p + offsetof(block_iq4_xs, d), &d, 2);
        else memcpy(p, &d, 2);
        /* the second f16 (min / dmin) of Q4_1, Q5_1, Q4_K, Q5_K */
        if (DT[ty] == INGOT_Q4_1 || DT[ty] == INGOT_Q5_1 || DT[ty] == INGOT_Q4_K || DT[ty] == INGOT_Q5_K) memcpy(p + 2, &m, 2);
    }
    return w;
}

/* Repacking keeps every value: each row read back from the tiles is bit
 * for bit kc_embed_row of the row-major row. */
static void test_repack_round_trip(void) {
    for (int ty = 0; ty < NTYPES; ty++) {
        const int R = 48, IN = tile_cols(ty) == 32 ? 96 : 512;
        void *w = rnd_blocks(ty, R, IN);
        size_t rb = 0;
        dtype_row_bytes(DT[ty], IN, &rb);
        void *x = malloc(rb * R + 64 * R);
        kc_x16k_repack(WT[ty], w, x, R, IN);
        int bad = 0;
        float a[512], b[512];
        for (int r = 0; r < R; r++) {
            kc_embed_row(DT[ty], w, r, IN, a);
            kc_x16k_dequantize_row(WT[ty], x, IN, r, b);
            bad += memcmp(a, b, sizeof(float) * (size_t)IN) != 0;
        }
        check(bad == 0, "%s: %d rows differ after repacking", NAME[ty], bad);
        check(kc_x16k_tile_bytes(WT[ty]) * (size_t)(IN / kc_x16k_cols(WT[ty])) <= (rb + 4 * (size_t)(IN / 256 + 1)) * 16,
              "%s: a tile keeps the row-major bytes (+4 per 256 weights)", NAME[ty]);
        free(w), free(x);
    }
}

/* One output against its double-precision want (within tol) and the unquantized product's
 * (within the activations' rounding bound plus tol). */
static void judge(const char *name, int IN, int T, int r, int t, float got, double want, double exact, double tol,
                  double rbound, int *bad, int *bad_round) {
    const double err = fabs(got - want);
    if (!(err <= tol)) {
        if (*bad < 3)
            printf("  %s IN=%d T=%d r=%d t=%d: got %.9g want %.9g (err %.3g tol %.3g)\n", name, IN, T, r, t, got, want, err, tol);
        ++*bad;
    }
    *bad_round += !(fabs(got - exact) <= rbound + tol);
}
/* The columns past OUT of each of T rows of Y (ldy apart) that differ from Y0's: a kernel must not write them. */
static int padding_changed(const float *Y, const float *Y0, int T, int OUT, int ldy) {
    int n = 0;
    for (int t = 0; t < T; t++)
        for (int r = OUT; r < ldy; r++) n += memcmp(&Y[(size_t)t * ldy + r], &Y0[(size_t)t * ldy + r], sizeof(float)) != 0;
    return n;
}

/* Matmul over rows [r0, r1), T tokens. The reference uses the activations
 * the kernel sees, d * (128h + l); the bound is f32 rounding, 1e-5 of the
 * sum of |products| the kernel forms (|d q x| and |c x| apart, for the
 * types whose offsets come back through the activation sums); a second
 * bound checks the activation rounding, at most d/2 per value (a8: 64 d,
 * half an int8 step). Each token's result must not depend on T. a8: the
 * kc_mmp8_ kernels against kc_quantize_q16a8's activations. */
static void mm_case(int ty, int IN, int OUT, int T, int r0, int r1, int use_bias, int acc, int a8) {
    const mmp_fn fn = a8 ? FN8[ty] : FN[ty];
    const int ldx = IN / 32 + 1, ldy = OUT + 5;
    void *w = rnd_blocks(ty, OUT, IN);
    size_t rb = 0;
    dtype_row_bytes(DT[ty], IN, &rb);
    void *x16 = malloc(rb * OUT + 64 * (size_t)OUT);
    kc_x16k_repack(WT[ty], w, x16, OUT, IN);
    float *X = malloc(sizeof(float) * (size_t)T * IN), *Y = malloc(sizeof(float) * (size_t)T * ldy);
    float *Y0 = malloc(sizeof(float) * (size_t)T * ldy), *bias = malloc(sizeof(float) * OUT), *Y1 = malloc(sizeof(float) * ldy);
    for (int i = 0; i < T * IN; i++) X[i] = rndf() * ((i % 5) == 0 ? 6.0f : 1.0f);
    for (int i = 0; i < T * ldy; i++) Y[i] = Y0[i] = rndf();
    for (int r = 0; r < OUT; r++) bias[r] = rndf();
    kc_q16 *xq = malloc(sizeof(kc_q16) * (size_t)T * ldx);
    for (int t = 0; t < T; t++) {
        (a8 ? kc_quantize_q16a8 : kc_quantize_q16)(X + (size_t)t * IN, xq + (size_t)t * ldx, IN);
        xq[(size_t)t * ldx + IN / 32].d = NAN; /* padding: must never be read */
        xq[(size_t)t * ldx + IN / 32].s = NAN;
    }
    fn(x16, xq, ldx, Y, ldy, T, IN, r0, r1, use_bias ? bias : NULL, acc);
    float *wrow = malloc(sizeof(float) * IN);
    int bad = 0, bad_round = 0, bad_alone = 0;
    for (int t = 0; t < T; t++) {
        memcpy(Y1, Y0 + (size_t)t * ldy, sizeof(float) * ldy);
        fn(x16, xq + (size_t)t * ldx, ldx, Y1, ldy, 1, IN, r0, r1, use_bias ? bias : NULL, acc);
        bad_alone += memcmp(Y1, Y + (size_t)t * ldy, sizeof(float) * ldy) != 0;
    }
    const size_t gb = (size_t)(IN / kc_x16k_cols(WT[ty])) * kc_x16k_tile_bytes(WT[ty]);
    for (int r = 0; r < OUT; r++) {
        dtype_dequantize_row(DT[ty], (const uint8_t *)w + rb * r, wrow, IN);
        for (int t = 0; t < T; t++) {
            const size_t yi = (size_t)t * ldy + r;
            if (r < r0 || r >= r1) {
                bad += memcmp(&Y[yi], &Y0[yi], sizeof(float)) != 0;
                continue;
            }
            double dot = 0, exact = 0, mag = 0, rbound = 0;
            for (int b = 0; b < IN / 32; b++) {
                int q[32];
                float dA, dB, c, cB;
                kc__x16k_lane((const uint8_t *)x16 + (size_t)(r / 16) * gb, WT[ty], b, r % 16, q, &dA, &dB, &c, &cB);
                const kc_q16 *xb = &xq[(size_t)t * ldx + b];
                for (int kk = 0; kk < 32; kk++) {
                    const int k = 32 * b + kk;
                    const double xs = (double)xb->d * (128 * xb->h[kk] + xb->l[kk]);
                    dot += wrow[k] * xs;
                    exact += wrow[k] * (double)X[(size_t)t * IN + k];
                    const double qv = WT[ty] == KC_WIQ4_NL || WT[ty] == KC_WIQ4_XS ? dtype_iq4_values[q[kk]] : q[kk];
                    mag += (fabs((kk < 16 ? dA : dB) * qv) + fabs(kk < 16 ? c : cB) + (WT[ty] == KC_WIQ4_NL || WT[ty] == KC_WIQ4_XS || WT[ty] == KC_WQ8_0 ? 128.0 : 32.0) * fabs(kk < 16 ? dA : dB)) * fabs(xs);
                    rbound += fabs(wrow[k]) * xb->d * (a8 ? 64.0 : 0.5);
                }
            }
            const double extra = (acc ? Y0[yi] : 0.0) + (use_bias ? bias[r] : 0.0);
            judge(NAME[ty], IN, T, r, t, Y[yi], dot + extra, exact + extra, 1e-5 * mag + 4 * 1.2e-7 * (fabs(extra) + fabs(dot + extra)) + 1e-30,
                  rbound, &bad, &bad_round);
        }
    }
    bad += padding_changed(Y, Y0, T, OUT, ldy);
    check(bad == 0 && bad_round == 0 && bad_alone == 0,
          "kc_mmp%s_%s IN=%d OUT=%d T=%d rows [%d,%d) bias=%d acc=%d: %d wrong, %d beyond the rounding bound, %d tokens "
          "differ from the token alone",
          a8 ? "8" : "", NAME[ty], IN, OUT, T, r0, r1, use_bias, acc, bad, bad_round, bad_alone);
    free(w), free(x16), free(X), free(Y), free(Y0), free(Y1), free(bias), free(xq), free(wrow);
}

static void test_matmul(void) {
    for (int a8 = 0; a8 < 2; a8++)
        for (int ty = 0; ty < NTYPES; ty++) {
            const int k = tile_cols(ty);
            const int Ts[] = {1, 2, 3, 7, 17};
            for (int ti = 0; ti < 5; ti++) {
                mm_case(ty, 3 * k, 48, Ts[ti], 0, 48, 0, 0, a8);
                mm_case(ty, 2 * k, 64, Ts[ti], 16, 64, 1, 1, a8);
                mm_case(ty, k, 32, Ts[ti], 16, 32, 1, 0, a8);
            }
            mm_case(ty, k == 32 ? 1536 : 2048, 48, 1, 0, 32, 0, 1, a8);
            mm_case(ty, k, 160, 130, 0, 160, 1, 1, a8);
        }
}

/* kc_quantize_q16: digits in range, q = 128h + l within half a step of x/d,
 * the largest |x| of a block exactly +-16256, s = d * sum(q); a zero block
 * stays zero. Its half sums (Q6_K's -32 per 16 weights) are the digits' own
 * sums, on every path. */
static void test_quantize_q16(void) {
    float x[96];
    kc_q16 q[3];
    int bad = 0, bad_halves = 0;
    for (int it = 0; it < 200; it++) {
        for (int k = 0; k < 96; k++) x[k] = rndf() * (k < 32 ? 1e-3f : k < 64 ? 1.0f : 3e4f);
        if (it == 0) memset(x, 0, sizeof(float) * 32);
        kc_quantize_q16(x, q, 96);
        for (int b = 0; b < 3; b++) {
            double amax = 0;
            long sum = 0;
            int top = 0;
            for (int k = 0; k < 32; k++) amax = fabs(x[32 * b + k]) > amax ? fabs(x[32 * b + k]) : amax;
            for (int k = 0; k < 32; k++) {
                const int h = q[b].h[k], l = q[b].l[k], v = 128 * h + l;
                bad += h < -127 || h > 127 || l < -64 || l > 63;
                sum += v;
                top |= abs(v) == KC_X16_QMAX;
                if (amax > 0) bad += fabs(x[32 * b + k] * (KC_X16_QMAX / amax) - v) > 0.5 + 1e-3;
                else bad += v != 0;
            }
            bad += amax > 0 && !top;
            bad += fabs(q[b].s - (double)q[b].d * (double)sum) > 1e-6 * fabs(q[b].d * (double)sum) + 1e-30;
            bad += fabs(q[b].d - amax / KC_X16_QMAX) > 1e-6 * amax / KC_X16_QMAX;
            for (int half = 0; half < 2; half++) {
                int s = 0;
                for (int k = 16 * half; k < 16 * half + 16; k++) s += 128 * q[b].h[k] + q[b].l[k];
                bad_halves += s != q[b].s16[half];
            }
        }
    }
    check(bad == 0, "kc_quantize_q16: %d bad values", bad);
    check(bad_halves == 0, "kc_quantize_q16: %d wrong half sums", bad_halves);
}

/* kc_quantize_q16a8 is kc_quantize_q8 in kc_q16 blocks: the same codes as
 * its high digits, every low digit 0, 128 d its scale bit for bit, s its s
 * (to f32 rounding), and half sums of 128 h. */
static void test_quantize_q16a8(void) {
    float x[96];
    kc_q16 q[3];
    kc_q8 r[3];
    int bad = 0;
    for (int it = 0; it < 200; it++) {
        for (int k = 0; k < 96; k++) x[k] = rndf() * (k < 32 ? 1e-3f : k < 64 ? 1.0f : 3e4f);
        if (it == 0) memset(x, 0, sizeof(float) * 32);
        kc_quantize_q16a8(x, q, 96);
        kc_quantize_q8(x, r, 96);
        for (int b = 0; b < 3; b++) {
            int half[2] = {0, 0};
            for (int k = 0; k < 32; k++) {
                bad += q[b].h[k] != r[b].qs[k] || q[b].l[k] != 0;
                half[k / 16] += 128 * q[b].h[k];
            }
            bad += half[0] != q[b].s16[0] || half[1] != q[b].s16[1];
            bad += 128.0f * q[b].d != r[b].d;
            bad += fabs(q[b].s - r[b].s) > 1e-6 * fabs(r[b].s) + 1e-30;
        }
    }
    check(bad == 0, "kc_quantize_q16a8: %d values differ from kc_quantize_q8's", bad);
}

/* kc_mms_ (kc_x16s.h): Q4_K, Q5_K and Q6_K against kc_q16s activations, one scale per 256
 * (a8: kc_mms8_ against kc_quantize_q16s_a8's int8 ones). Against double-precision sums of the
 * row-major weights and the activations' digits (only float rounding apart), each token bit for
 * bit the token alone (T >= 16 runs the AMX path where the CPU has it, a token alone the vector
 * path: the same bits by construction), and within the rounding bound of x (half a step per
 * value: d / 2, a8's 128 d / 2) of the unquantized product. */
typedef void (*mms_fn)(const void *, const kc_q16s *, int, float *, int, int, int, int, int, const float *, int);
static void mms_case(int ty, int IN, int OUT, int T, int r0, int r1, int use_bias, int acc, int a8) {
    const mms_fn fn = a8 ? (WT[ty] == KC_WQ4_K ? kc_mms8_q4_k : WT[ty] == KC_WQ5_K ? kc_mms8_q5_k : kc_mms8_q6_k)
                         : (WT[ty] == KC_WQ4_K ? kc_mms_q4_k : WT[ty] == KC_WQ5_K ? kc_mms_q5_k : kc_mms_q6_k);
    const int ldx = IN / 256 + 1, ldy = OUT + 5;
    void *w = rnd_blocks(ty, OUT, IN);
    size_t rb = 0;
    dtype_row_bytes(DT[ty], IN, &rb);
    void *x16 = malloc(rb * OUT + 64 * (size_t)OUT);
    kc_x16k_repack(WT[ty], w, x16, OUT, IN);
    float *X = malloc(sizeof(float) * (size_t)T * IN), *Y = malloc(sizeof(float) * (size_t)T * ldy);
    float *Y0 = malloc(sizeof(float) * (size_t)T * ldy), *bias = malloc(sizeof(float) * OUT), *Y1 = malloc(sizeof(float) * ldy);
    for (int i = 0; i < T * IN; i++) X[i] = rndf() * ((i % 5) == 0 ? 6.0f : 1.0f) * (i % 700 == 3 ? 50.0f : 1.0f);
    for (int i = 0; i < T * ldy; i++) Y[i] = Y0[i] = rndf();
    for (int r = 0; r < OUT; r++) bias[r] = rndf();
    kc_q16s *xq = malloc(sizeof(kc_q16s) * (size_t)T * ldx);
    for (int t = 0; t < T; t++) {
        (a8 ? kc_quantize_q16s_a8 : kc_quantize_q16s)(X + (size_t)t * IN, xq + (size_t)t * ldx, IN);
        xq[(size_t)t * ldx + IN / 256].d = NAN; /* padding: must never be read */
        for (int g = 0; g < 8; g++) xq[(size_t)t * ldx + IN / 256].sq[g] = NAN;
    }
    fn(x16, xq, ldx, Y, ldy, T, IN, r0, r1, use_bias ? bias : NULL, acc);
    float *wrow = malloc(sizeof(float) * IN);
    int bad = 0, bad_round = 0, bad_alone = 0;
    for (int t = 0; t < T; t++) {
        memcpy(Y1, Y0 + (size_t)t * ldy, sizeof(float) * ldy);
        fn(x16, xq + (size_t)t * ldx, ldx, Y1, ldy, 1, IN, r0, r1, use_bias ? bias : NULL, acc);
        bad_alone += memcmp(Y1, Y + (size_t)t * ldy, sizeof(float) * ldy) != 0;
    }
    const size_t gb = (size_t)(IN / 256) * kc_x16k_tile_bytes(WT[ty]);
    for (int r = 0; r < OUT; r++) {
        dtype_dequantize_row(DT[ty], (const uint8_t *)w + rb * r, wrow, IN);
        for (int t = 0; t < T; t++) {
            const size_t yi = (size_t)t * ldy + r;
            if (r < r0 || r >= r1) {
                bad += memcmp(&Y[yi], &Y0[yi], sizeof(float)) != 0;
                continue;
            }
            double dot = 0, exact = 0, mag = 0, rbound = 0;
            for (int b = 0; b < IN / 32; b++) {
                /* the magnitudes of the weight's terms (d sc q, dmin m, Q6_K's 32 d sc): what float
                 * rounding scales with, whatever cancels between them */
                int q[32];
                float dA, dB, c, cB;
                kc__x16k_lane((const uint8_t *)x16 + (size_t)(r / 16) * gb, WT[ty], b, r % 16, q, &dA, &dB, &c, &cB);
                for (int kk = 0; kk < 32; kk++) {
                    const int k = 32 * b + kk;
                    const kc_q16s *xb = &xq[(size_t)t * ldx + k / 256];
                    const double xs = (double)xb->d * (128 * xb->h[k % 256] + xb->l[k % 256]);
                    dot += wrow[k] * xs;
                    exact += wrow[k] * (double)X[(size_t)t * IN + k];
                    mag += (fabs((kk < 16 ? dA : dB) * q[kk]) + fabs(kk < 16 ? c : cB) + 32.0 * fabs(kk < 16 ? dA : dB)) * fabs(xs);
                    rbound += fabs(wrow[k]) * xb->d * (a8 ? 64.0 : 0.5);
                }
            }
            const double extra = (acc ? Y0[yi] : 0.0) + (use_bias ? bias[r] : 0.0);
            judge(NAME[ty], IN, T, r, t, Y[yi], dot + extra, exact + extra, 1e-5 * mag + 4 * 1.2e-7 * (fabs(extra) + fabs(dot + extra)) + 1e-30,
                  rbound, &bad, &bad_round);
        }
    }
    bad += padding_changed(Y, Y0, T, OUT, ldy);
    check(bad == 0 && bad_round == 0 && bad_alone == 0,
          "kc_mms%s_%s (AMX %s) IN=%d OUT=%d T=%d rows [%d,%d) bias=%d acc=%d: %d wrong, %d beyond the rounding bound, "
          "%d tokens differ from the token alone",
          a8 ? "8" : "", NAME[ty], kc_amx_ready() ? "on" : "off", IN, OUT, T, r0, r1, use_bias, acc, bad, bad_round, bad_alone);
    free(w), free(x16), free(X), free(Y), free(Y0), free(Y1), free(bias), free(xq), free(wrow);
}

static void test_matmul_q16s(void) {
    for (int ty = 0; ty < NTYPES; ty++) {
        if (!kc_x16s_type(WT[ty])) continue;
        const int Ts[] = {1, 7, 16, 17, 40};
        for (int a8 = 0; a8 < 2; a8++) {
            for (int ti = 0; ti < 5; ti++) {
                mms_case(ty, 512, 48, Ts[ti], 0, 48, 0, 0, a8);
                mms_case(ty, 768, 64, Ts[ti], 16, 64, 1, 1, a8);
                mms_case(ty, 256, 32, Ts[ti], 16, 32, 1, 0, a8);
            }
            mms_case(ty, 2048, 48, 1, 0, 32, 0, 1, a8);
            mms_case(ty, 1024, 96, 130, 0, 96, 1, 1, a8);
        }
    }
}

/* Three super-blocks of test activations for the per-256 quantizers: tiny, unit and large
 * magnitudes with outliers; the first all zero on the first iteration. */
static void q16s_input(float x[768], int it) {
    for (int k = 0; k < 768; k++) x[k] = rndf() * (k < 256 ? 1e-3f : k < 512 ? 1.0f : 3e4f) * (k % 97 == 5 ? 40.0f : 1.0f);
    if (it == 0) memset(x, 0, sizeof(float) * 256);
}

/* kc_quantize_q16s_a8: llama.cpp's Q8_K codes (round(x * 127 / amax), the largest |x| of a
 * super-block exactly +-127) as high digits, low digits 0, scale amax / (127 * 128), and the
 * sums of the codes. */
static void test_quantize_q16s_a8(void) {
    float x[768];
    kc_q16s q[3];
    int bad = 0;
    for (int it = 0; it < 50; it++) {
        q16s_input(x, it);
        kc_quantize_q16s_a8(x, q, 768);
        for (int s = 0; s < 3; s++) {
            float amax = 0;
            int top = 0;
            for (int k = 0; k < 256; k++) amax = fabsf(x[256 * s + k]) > amax ? fabsf(x[256 * s + k]) : amax;
            const float iscale = amax > 0 ? 127.0f / amax : 0.0f; /* Q8_K's, up to its sign */
            bad += q[s].d != amax / 127.0f / 128.0f;
            for (int b = 0; b < 16; b++) {
                long sh = 0;
                for (int k = 16 * b; k < 16 * b + 16; k++) {
                    const int h = q[s].h[k];
                    bad += h != (int)nearbyintf(iscale * x[256 * s + k]) || q[s].l[k] != 0 || h < -127 || h > 127;
                    sh += h;
                    top |= abs(h) == 127;
                }
                bad += q[s].sh[b] != sh || q[s].sl[b] != 0;
                if (b % 2) bad += q[s].sq[b / 2] != (float)(128 * (sh + q[s].sh[b - 1]));
            }
            bad += amax > 0 && !top;
        }
    }
    check(bad == 0, "kc_quantize_q16s_a8: codes, scale and sums (%d wrong)", bad);
}

/* kc_quantize_q16s: kc_quantize_q16's digits with one scale per 256 (the largest |x| of a
 * super-block exactly +-16256), and its sums (sq per 32, sh and sl per 16) the digits' own. */
static void test_quantize_q16s(void) {
    float x[768];
    kc_q16s q[3];
    int bad = 0;
    for (int it = 0; it < 50; it++) {
        q16s_input(x, it);
        kc_quantize_q16s(x, q, 768);
        for (int s = 0; s < 3; s++) {
            double amax = 0;
            int top = 0;
            for (int k = 0; k < 256; k++) amax = fabs(x[256 * s + k]) > amax ? fabs(x[256 * s + k]) : amax;
            bad += fabsf(q[s].d - (float)(amax / KC_X16_QMAX)) > 1e-6f * q[s].d;
            for (int b = 0; b < 16; b++) {
                long sum = 0, sh = 0, sl = 0;
                for (int k = 16 * b; k < 16 * b + 16; k++) {
                    const int h = q[s].h[k], l = q[s].l[k], v = 128 * h + l;
                    bad += h < -127 || h > 127 || l < -64 || l > 63;
                    sum += v, sh += h, sl += l;
                    top |= abs(v) == KC_X16_QMAX;
                    if (amax > 0) bad += fabs(x[256 * s + k] * (KC_X16_QMAX / amax) - v) > 0.5 + 1e-3;
                    else bad += v != 0;
                }
                bad += q[s].sh[b] != sh || q[s].sl[b] != sl;
                if (b % 2) {
                    long prev = 0;
                    for (int k = 16 * (b - 1); k < 16 * b; k++) prev += 128 * q[s].h[k] + q[s].l[k];
                    bad += q[s].sq[b / 2] != (float)(sum + prev);
                }
            }
            bad += amax > 0 && !top;
        }
    }
    check(bad == 0, "kc_quantize_q16s: digits, scale and sums (%d wrong)", bad);
}

/* ---- float weights (kc_x16f.h) ---- */
#define NFLOAT 3
static const int FWT[NFLOAT] = {KC_WF32, KC_WF16, KC_WBF16};
static const ingot_dtype FDT[NFLOAT] = {INGOT_F32, INGOT_F16, INGOT_BF16};
static const char *FNAME[NFLOAT] = {"f32", "f16", "bf16"};
typedef void (*mm16_fn)(const void *, const float *, int, float *, int, int, int, int, int, const float *, int);
static const mm16_fn FFN[NFLOAT] = {kc_mm16_f32, kc_mm16_f16, kc_mm16_bf16};

/* A row-major [R][IN] float matrix of type ft, values in (-1, 1) (bf16: the
 * top half of an f32's bits, as a checkpoint stores it). */
static void *rnd_floats(int ft, int R, int IN) {
    const size_t n = (size_t)R * IN;
    void *w = malloc(n * kc_x16f_elem(FWT[ft]));
    for (size_t i = 0; i < n; i++) {
        const float v = rndf();
        if (FWT[ft] == KC_WF32) ((float *)w)[i] = v;
        else if (FWT[ft] == KC_WF16) ((uint16_t *)w)[i] = kc_f32_to_fp16(v);
        else {
            uint32_t b;
            memcpy(&b, &v, 4);
            ((uint16_t *)w)[i] = (uint16_t)(b >> 16);
        }
    }
    return w;
}

/* Repacking keeps every value and every byte count: each row read back is
 * bit for bit kc_embed_row of the row-major row. */
static void test_float_repack(void) {
    for (int ft = 0; ft < NFLOAT; ft++) {
        const int R = 48, IN = 96;
        void *w = rnd_floats(ft, R, IN);
        size_t rb = 0;
        dtype_row_bytes(FDT[ft], IN, &rb);
        void *x = malloc(rb * R);
        kc_x16k_repack(FWT[ft], w, x, R, IN);
        int bad = 0;
        float a[96], b[96];
        for (int r = 0; r < R; r++) {
            kc_embed_row(FDT[ft], w, r, IN, a);
            kc_x16k_dequantize_row(FWT[ft], x, IN, r, b);
            bad += memcmp(a, b, sizeof a) != 0;
        }
        check(bad == 0, "%s: %d rows differ after interleaving", FNAME[ft], bad);
        check(kc_x16k_tile_bytes(FWT[ft]) * (size_t)(IN / kc_x16k_cols(FWT[ft])) == rb * 16,
              "%s: a group of 16 rows keeps exactly their bytes", FNAME[ft]);
        free(w), free(x);
    }
}

/* kc_mm16_ over rows [r0, r1), T tokens, against the double-precision
 * product of the stored weights and the activations. Bound: each output is
 * a chain of IN f32 fused multiply-adds, then the bias and the accumulated
 * value, so its rounding error is within (IN + 2) units of 2^-24 of the sum
 * of the magnitudes it adds up (the standard bound for recursive
 * summation). Each token's result must be bit for bit the token
 * computed alone; rows outside [r0, r1) and Y's padding are never written. */
static void mm16_case(int ft, int IN, int OUT, int T, int r0, int r1, int use_bias, int acc) {
    const int ldx = IN + 3, ldy = OUT + 5;
    void *w = rnd_floats(ft, OUT, IN);
    size_t rb = 0;
    dtype_row_bytes(FDT[ft], IN, &rb);
    void *x16 = malloc(rb * OUT);
    kc_x16k_repack(FWT[ft], w, x16, OUT, IN);
    float *X = malloc(sizeof(float) * (size_t)T * ldx), *Y = malloc(sizeof(float) * (size_t)T * ldy);
    float *Y0 = malloc(sizeof(float) * (size_t)T * ldy), *bias = malloc(sizeof(float) * OUT), *Y1 = malloc(sizeof(float) * ldy);
    for (int i = 0; i < T * ldx; i++) X[i] = (i % ldx) >= IN ? NAN : rndf() * ((i % 5) == 0 ? 6.0f : 1.0f);
    for (int i = 0; i < T * ldy; i++) Y[i] = Y0[i] = rndf();
    for (int r = 0; r < OUT; r++) bias[r] = rndf();
    FFN[ft](x16, X, ldx, Y, ldy, T, IN, r0, r1, use_bias ? bias : NULL, acc);
    int bad = 0, bad_alone = 0;
    for (int t = 0; t < T; t++) {
        memcpy(Y1, Y0 + (size_t)t * ldy, sizeof(float) * ldy);
        FFN[ft](x16, X + (size_t)t * ldx, ldx, Y1, ldy, 1, IN, r0, r1, use_bias ? bias : NULL, acc);
        bad_alone += memcmp(Y1, Y + (size_t)t * ldy, sizeof(float) * ldy) != 0;
    }
    float *wrow = malloc(sizeof(float) * IN);
    for (int r = 0; r < OUT; r++) {
        kc_embed_row(FDT[ft], w, r, IN, wrow);
        for (int t = 0; t < T; t++) {
            const size_t yi = (size_t)t * ldy + r;
            if (r < r0 || r >= r1) {
                bad += memcmp(&Y[yi], &Y0[yi], sizeof(float)) != 0;
                continue;
            }
            double dot = 0, mag = 0;
            for (int k = 0; k < IN; k++) {
                const double p = (double)wrow[k] * X[(size_t)t * ldx + k];
                dot += p, mag += fabs(p);
            }
            const double extra = (acc ? Y0[yi] : 0.0) + (use_bias ? bias[r] : 0.0);
            const double tol = (IN + 2) * 0x1p-24 * (mag + fabs(extra) + fabs(dot + extra)) + 1e-30;
            int dummy = 0;
            judge(FNAME[ft], IN, T, r, t, Y[yi], dot + extra, dot + extra, tol, 0.0, &bad, &dummy);
        }
    }
    bad += padding_changed(Y, Y0, T, OUT, ldy);
    check(bad == 0 && bad_alone == 0,
          "kc_mm16_%s IN=%d OUT=%d T=%d rows [%d,%d) bias=%d acc=%d: %d wrong, %d tokens differ from the token alone",
          FNAME[ft], IN, OUT, T, r0, r1, use_bias, acc, bad, bad_alone);
    free(w), free(x16), free(X), free(Y), free(Y0), free(Y1), free(bias), free(wrow);
}

static void test_matmul_float(void) {
    for (int ft = 0; ft < NFLOAT; ft++) {
        const int Ts[] = {1, 2, 3, 7, 17};
        for (int ti = 0; ti < 5; ti++) {
            mm16_case(ft, 96, 48, Ts[ti], 0, 48, 0, 0);
            mm16_case(ft, 64, 64, Ts[ti], 16, 64, 1, 1);
            mm16_case(ft, 32, 32, Ts[ti], 16, 32, 1, 0);
        }
        mm16_case(ft, 1536, 48, 1, 0, 32, 0, 1);
        mm16_case(ft, 32, 160, 130, 0, 160, 1, 1);
        mm16_case(ft, 64, 176, 13, 16, 176, 0, 1); /* 10 groups: tiles of 4 groups, then one of 2 */
        mm16_case(ft, 32, 112, 5, 0, 112, 1, 0);   /* 7 groups: 4, then 3 */
        mm16_case(ft, 32, 80, 3, 0, 80, 0, 0);     /* 5 groups: 4, then 1 */
        mm16_case(ft, 32, 80, 2, 0, 80, 0, 1);     /* 2 tokens: a group at a time */
    }
}

int main(void) {
    /* tests/test_kernels.py reads this line: AMX must be on where the CPU has it */
    printf("kc_x16s: AMX tiles %s\n", kc_amx_ready() ? "on" : "off");
    test_quantize_q16s();
    test_quantize_q16s_a8();
    test_matmul_q16s();
    test_quantize_q16();
    test_quantize_q16a8();
    test_repack_round_trip();
    test_matmul();
    test_float_repack();
    test_matmul_float();
    return check_summary();
}
