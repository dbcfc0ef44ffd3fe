/* test_x16.c — the 16-row interleaved layout (kc_x16.h): repacking, row reads, the 15-bit activation quantizer and the matmul, against double-precision references on the row-major blocks. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "kc_x16.h"

#include "check.h"
#include "xorshift.h"

static const int WT[3] = {KC_WQ8_0, KC_WQ4_0, KC_WQ4_1};
static const ingot_dtype DT[3] = {INGOT_Q8_0, INGOT_Q4_0, INGOT_Q4_1};
static const char *NAME[3] = {"q8_0", "q4_0", "q4_1"};

static uint16_t rnd_fp16(int e0, int e1) {
    return (uint16_t)(((rnd() & 1) << 15) | (uint16_t)((rndi(e0, e1) + 15) << 10) | (uint16_t)(rnd() & 1023));
}

/* A row-major [R][IN] block matrix with random scales and codes (Q8_0 codes
 * over the whole int8 range, -128 included: files may hold it). */
static void *rnd_blocks(int ty, int R, int IN) {
    size_t rb = 0;
    dtype_row_bytes(DT[ty], IN, &rb);
    uint8_t *w = malloc(rb * (size_t)R);
    for (size_t i = 0; i < rb * (size_t)R; i++) w[i] = (uint8_t)rnd();
    const int nb = R * IN / 32;
    for (int b = 0; b < nb; b++) {
        if (ty == 0) ((block_q8_0 *)w)[b].d = rnd_fp16(-9, -6);
        else if (ty == 1) ((block_q4_0 *)w)[b].d = rnd_fp16(-6, -3);
        else ((block_q4_1 *)w)[b].d = rnd_fp16(-6, -3), ((block_q4_1 *)w)[b].m = rnd_fp16(-4, -1);
    }
    return w;
}

/* Repacking keeps every value: each row read back from the x16 tiles is
 * bit for bit kc_embed_row of the row-major row. */
static void test_repack_round_trip(void) {
    for (int ty = 0; ty < 3; ty++) {
        const int R = 48, IN = 96;
        void *w = rnd_blocks(ty, R, IN);
        size_t rb = 0;
        dtype_row_bytes(DT[ty], IN, &rb);
        void *x = malloc(rb * R);
        kc_x16_repack(WT[ty], w, x, R, IN);
        int bad = 0;
        float a[96], b[96];
        for (int r = 0; r < R; r++) {
            kc_embed_row(DT[ty], w, r, IN, a);
            kc_x16_dequantize_row(WT[ty], x, IN, r, b);
            bad += memcmp(a, b, sizeof a) != 0;
        }
        check(bad == 0, "%s: %d rows differ after repacking", NAME[ty], bad);
        free(w), free(x);
    }
}

/* kc_quantize_q16: digits in range, q = 128h + l within half a step of x/d,
 * the largest |x| of a block exactly +-16256, s = d * sum(q); a zero block
 * stays zero. */
static void test_quantize_q16(void) {
    float x[96];
    kc_q16 q[3];
    int bad = 0;
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
        }
    }
    check(bad == 0, "kc_quantize_q16: %d bad values", bad);
}

/* Matmul over rows [r0, r1) of an x16 matrix, T tokens. The reference uses
 * the activations the kernel sees, d * (128h + l), and the bound is f32
 * rounding, 1e-5 of sum |w x|; a second bound checks the activation rounding
 * itself against the f32 activations: at most d/2 per value, so
 * sum_k |w_k| * d_block / 2. Each token's result must not depend on T (the
 * same token alone gives the same bits). */
static void mm_case(int ty, int IN, int OUT, int T, int r0, int r1, int use_bias, int acc) {
    const int ldx = IN / 32 + 1, ldy = OUT + 5;
    void *w = rnd_blocks(ty, OUT, IN);
    size_t rb = 0;
    dtype_row_bytes(DT[ty], IN, &rb);
    void *x16 = malloc(rb * OUT);
    kc_x16_repack(WT[ty], w, x16, OUT, IN);
    float *X = malloc(sizeof(float) * (size_t)T * IN), *Y = malloc(sizeof(float) * (size_t)T * ldy);
    float *Y0 = malloc(sizeof(float) * (size_t)T * ldy), *bias = malloc(sizeof(float) * OUT), *Y1 = malloc(sizeof(float) * ldy);
    for (int i = 0; i < T * IN; i++) X[i] = rndf() * ((i % 5) == 0 ? 6.0f : 1.0f);
    for (int i = 0; i < T * ldy; i++) Y[i] = Y0[i] = rndf();
    for (int r = 0; r < OUT; r++) bias[r] = rndf();
    kc_q16 *xq = malloc(sizeof(kc_q16) * (size_t)T * ldx);
    for (int t = 0; t < T; t++) {
        kc_quantize_q16(X + (size_t)t * IN, xq + (size_t)t * ldx, IN);
        xq[(size_t)t * ldx + IN / 32].d = NAN; /* padding: must never be read */
        xq[(size_t)t * ldx + IN / 32].s = NAN;
    }
    void (*fn)(const void *, const kc_q16 *, int, float *, int, int, int, int, int, const float *, int) =
        ty == 0 ? kc_mmp_q8_0 : ty == 1 ? kc_mmp_q4_0 : kc_mmp_q4_1;
    fn(x16, xq, ldx, Y, ldy, T, IN, r0, r1, use_bias ? bias : NULL, acc);
    float *wrow = malloc(sizeof(float) * IN);
    int bad = 0, bad_round = 0, bad_alone = 0;
    for (int t = 0; t < T; t++) { /* token t alone */
        memcpy(Y1, Y0 + (size_t)t * ldy, sizeof(float) * ldy);
        fn(x16, xq + (size_t)t * ldx, ldx, Y1, ldy, 1, IN, r0, r1, use_bias ? bias : NULL, acc);
        bad_alone += memcmp(Y1, Y + (size_t)t * ldy, sizeof(float) * ldy) != 0;
    }
    for (int r = 0; r < OUT; r++) {
        dtype_dequantize_row(DT[ty], (const uint8_t *)w + rb * r, wrow, IN);
        for (int t = 0; t < T; t++) {
            const size_t yi = (size_t)t * ldy + r;
            if (r < r0 || r >= r1) {
                bad += memcmp(&Y[yi], &Y0[yi], sizeof(float)) != 0;
                continue;
            }
            double dot = 0, exact = 0, mag = 0, rbound = 0;
            for (int k = 0; k < IN; k++) {
                const kc_q16 *xb = &xq[(size_t)t * ldx + k / 32];
                const double xs = (double)xb->d * (128 * xb->h[k % 32] + xb->l[k % 32]);
                dot += wrow[k] * xs;
                exact += wrow[k] * (double)X[(size_t)t * IN + k];
                mag += fabs(wrow[k] * xs);
                rbound += fabs(wrow[k]) * xb->d * 0.5;
            }
            const double extra = (acc ? Y0[yi] : 0.0) + (use_bias ? bias[r] : 0.0);
            const double tol = 1e-5 * mag + 4 * 1.2e-7 * (fabs(extra) + fabs(dot + extra)) + 1e-30;
            const double err = fabs(Y[yi] - (dot + extra));
            if (!(err <= tol)) {
                if (bad < 3)
                    printf("  %s IN=%d T=%d r=%d t=%d: got %.9g want %.9g (err %.3g tol %.3g)\n", NAME[ty], IN, T, r, t,
                           Y[yi], dot + extra, err, tol);
                bad++;
            }
            bad_round += !(fabs(Y[yi] - (exact + extra)) <= rbound + tol);
        }
    }
    for (int t = 0; t < T; t++)
        for (int r = OUT; r < ldy; r++) bad += memcmp(&Y[(size_t)t * ldy + r], &Y0[(size_t)t * ldy + r], sizeof(float)) != 0;
    check(bad == 0 && bad_round == 0 && bad_alone == 0,
          "kc_mmp_%s IN=%d OUT=%d T=%d rows [%d,%d) bias=%d acc=%d: %d wrong, %d beyond the rounding bound, %d tokens "
          "differ from the token alone",
          NAME[ty], IN, OUT, T, r0, r1, use_bias, acc, bad, bad_round, bad_alone);
    free(w), free(x16), free(X), free(Y), free(Y0), free(Y1), free(bias), free(xq), free(wrow);
}

static void test_matmul(void) {
    for (int ty = 0; ty < 3; ty++) {
        const int Ts[] = {1, 2, 3, 4, 5, 9, 17};
        for (int ti = 0; ti < 7; ti++) {
            mm_case(ty, 96, 48, Ts[ti], 0, 48, 0, 0);
            mm_case(ty, 576, 64, Ts[ti], 16, 64, 1, 1);
            mm_case(ty, 160, 32, Ts[ti], 16, 32, 1, 0);
        }
        mm_case(ty, 1536, 48, 1, 0, 32, 0, 1);
        mm_case(ty, 64, 160, 130, 0, 160, 1, 1);
    }
}

int main(void) {
    test_repack_round_trip();
    test_quantize_q16();
    test_matmul();
    return check_summary();
}
