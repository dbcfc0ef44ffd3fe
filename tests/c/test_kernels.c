/* test_kernels.c — CPU kernels (kc_*.h) and the thread pool against plain double-precision references. */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dtype.h"
#include "kc_half.h"
#include "kc_matmul.h"
#include "kc_ops.h"
#include "kc_head_linear.h"
#include "kc_conv.h"
#include "kc_quant.h"
#include "threadpool.h"

/* Tolerances, relative to sum_k |w_k * x_k| of the output concerned:
 *   float weights (f32, f16, bf16; f32 accumulation):             1e-5
 *   quantized weights (reference on the same kc_q8 activations):  1e-4
 *   quantized weights with f32 activations (kc_mmx_*, exact dequantization,
 *   reference on the dequantized weights and the f32 activations): 1e-5
 * plus a few f32 ulps of |bias| + |previous Y| + |result| for the final adds. */
#define TOL_FLOAT 1e-5
#define TOL_QUANT 1e-4

#include "check.h"
#include "xorshift.h"

/* ---- reference conversions (independent of the kernels and of dtype.c) ---- */
static double ref_fp16(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 0) v = ldexp((double)m, -24);
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = ldexp((double)(m + 1024), e - 25);
    return s ? -v : v;
}
static double ref_bf16(uint16_t h) {
    int s = h >> 15, e = (h >> 7) & 255, m = h & 127;
    double v;
    if (e == 0) v = ldexp((double)m, -133);
    else if (e == 255) v = m ? NAN : INFINITY;
    else v = ldexp((double)(m + 128), e - 134);
    return s ? -v : v;
}
/* Random normal fp16 with exponent in [e0, e1] (unbiased). */
static uint16_t rnd_fp16(int e0, int e1, int allow_neg) {
    uint16_t s = allow_neg ? (uint16_t)((rnd() & 1) << 15) : 0;
    return (uint16_t)(s | (uint16_t)((rndi(e0, e1) + 15) << 10) | (uint16_t)(rnd() & 1023));
}
static uint16_t rnd_bf16(void) {
    return (uint16_t)(((rnd() & 1) << 15) | (uint16_t)((rndi(-4, 1) + 127) << 7) | (uint16_t)(rnd() & 127));
}

static const char *tname(ingot_dtype t) {
    static const char *names[] = {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1"};
    return (unsigned)t < 6 ? names[t] : "?";
}

/* Dequantized weight element k of row r (IN per row) for each dtype. */
static double ref_w(ingot_dtype t, const void *W, int IN, int r, int k) {
    size_t i = (size_t)r * IN + k, b = i / 32;
    int e = (int)(i % 32);
    switch (t) {
    case INGOT_F32: return ((const float *)W)[i];
    case INGOT_F16: return ref_fp16(((const uint16_t *)W)[i]);
    case INGOT_BF16: return ref_bf16(((const uint16_t *)W)[i]);
    case INGOT_Q8_0: {
        const block_q8_0 *q = (const block_q8_0 *)W + b;
        return ref_fp16(q->d) * q->qs[e];
    }
    case INGOT_Q4_0: {
        const block_q4_0 *q = (const block_q4_0 *)W + b;
        int v = e < 16 ? (q->qs[e] & 15) : (q->qs[e - 16] >> 4);
        return ref_fp16(q->d) * (v - 8);
    }
    case INGOT_Q4_1: {
        const block_q4_1 *q = (const block_q4_1 *)W + b;
        int v = e < 16 ? (q->qs[e] & 15) : (q->qs[e - 16] >> 4);
        return ref_fp16(q->d) * v + ref_fp16(q->m);
    }
    default: return NAN;
    }
}

static size_t w_bytes(ingot_dtype t, int rows, int IN) {
    size_t n = (size_t)rows * IN;
    switch (t) {
    case INGOT_F32: return n * 4;
    case INGOT_F16:
    case INGOT_BF16: return n * 2;
    case INGOT_Q8_0: return n / 32 * sizeof(block_q8_0);
    case INGOT_Q4_0: return n / 32 * sizeof(block_q4_0);
    default: return n / 32 * sizeof(block_q4_1);
    }
}

static void *rnd_weights(ingot_dtype t, int rows, int IN) {
    size_t n = (size_t)rows * IN;
    void *W = malloc(w_bytes(t, rows, IN));
    switch (t) {
    case INGOT_F32:
        for (size_t i = 0; i < n; i++) ((float *)W)[i] = rndf();
        break;
    case INGOT_F16:
        for (size_t i = 0; i < n; i++) ((uint16_t *)W)[i] = rnd_fp16(-6, 0, 1);
        break;
    case INGOT_BF16:
        for (size_t i = 0; i < n; i++) ((uint16_t *)W)[i] = rnd_bf16();
        break;
    case INGOT_Q8_0:
        for (size_t b = 0; b < n / 32; b++) {
            block_q8_0 *q = (block_q8_0 *)W + b;
            q->d = rnd_fp16(-10, -5, 0);
            for (int k = 0; k < 32; k++) q->qs[k] = (int8_t)rndi(-128, 127);
        }
        break;
    case INGOT_Q4_0:
        for (size_t b = 0; b < n / 32; b++) {
            block_q4_0 *q = (block_q4_0 *)W + b;
            q->d = rnd_fp16(-8, -3, 1);
            for (int k = 0; k < 16; k++) q->qs[k] = (uint8_t)rnd();
        }
        break;
    default:
        for (size_t b = 0; b < n / 32; b++) {
            block_q4_1 *q = (block_q4_1 *)W + b;
            q->d = rnd_fp16(-8, -3, 0);
            q->m = rnd_fp16(-6, -1, 1);
            for (int k = 0; k < 16; k++) q->qs[k] = (uint8_t)rnd();
        }
        break;
    }
    return W;
}

/* ---- fp16 / bf16 conversion ---- */
static void test_half(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        double r = ref_fp16((uint16_t)h);
        float f = kc_fp16_to_f32((uint16_t)h);
        if (isnan(r) ? !isnan(f) : (double)f != r) {
            if (bad++ < 5) printf("  fp16 %04x: got %g want %g\n", h, f, r);
        }
        r = ref_bf16((uint16_t)h);
        f = kc_bf16_to_f32((uint16_t)h);
        if (isnan(r) ? !isnan(f) : (double)f != r) {
            if (bad++ < 5) printf("  bf16 %04x: got %g want %g\n", h, f, r);
        }
    }
    check(bad == 0, "fp16/bf16 -> f32 over all 65536 codes: %d mismatches", bad);
}

/* ---- activations ---- */
/* SiLU and GELU's tanh form are both x / (1 + e^-a): a = x for SiLU, a = 2u = 2 sqrt(2/pi)
 * (x + 0.044715 x^3) for GELU. kc_silu_row / kc_gelu_tanh_row against that in double precision,
 * over every length up to 40 (the vector tail) and the whole range: saturating, tiny, signed
 * zeros, infinities. Tolerances: SiLU 4 f32 ulps of the result (e^-x from kc__exp16 within about
 * 1 ulp, the add and divide rounding once each); GELU 8 ulps plus what the rounding of its
 * argument carries (2u is formed in f32 by three roundings, |2u| 2^-22.4 at most, and
 * d(log y)/d(2u) = 1 - sigmoid(2u) <= 1); both 1e-36 absolute where the result is below f32's
 * normal range (below about -88.7 e^-a overflows f32 and the result, under 3e-37, flushes to -0,
 * as with expf). -inf gives NaN: -inf times a sigmoid of 0 (as in torch). */
static void act_row_case(const char *name, void (*row)(const float *, float *, int), int gelu, float range) {
    float x[40], y[40];
    int bad = 0, cases = 0;
    for (int rep = 0; rep < 2000; rep++) {
        const int n = 1 + rep % 40;
        for (int i = 0; i < n; i++) {
            const int k = (int)(rnd() % 8);
            x[i] = k == 0 ? rndf() * range : k == 1 ? rndf() * 1e-6f : k == 2 ? (rnd() % 2 ? -0.0f : 0.0f) : rndf() * range / 10;
        }
        if (rep % 50 == 7) x[0] = INFINITY, x[n - 1] = -INFINITY;
        row(x, y, n);
        for (int i = 0; i < n; i++, cases++) {
            const double v = x[i], a = gelu ? 2.0 * 0.7978845608028654 * (v + 0.044715 * v * v * v) : v;
            const double want = isinf(v) ? (v > 0 ? INFINITY : NAN) : v / (1.0 + exp(-a));
            const double tol = fabs(want) * (gelu ? 8 * 0x1p-23 + fabs(a) * 0x1p-22 : 4 * 0x1p-23) + 1e-36;
            if (isnan(want) ? !isnan(y[i]) : isinf(want) ? y[i] != want : !(fabs((double)y[i] - want) <= tol)) {
                if (bad++ < 5) printf("  %s(%.9g): got %.9g want %.9g\n", name, x[i], y[i], want);
            }
        }
    }
    check(bad == 0, "kc_%s_row against double precision, %d values: %d outside the bound", name, cases, bad);
}

/* GELU exactly, x/2 erfc(-x / sqrt 2), against the same in double precision. Bound: 8 f32 ulps
 * of the result plus what the rounding of erfc's argument carries (z = -x / sqrt 2: the constant
 * and the product each rounded, 2^-23 relative; d(log erfc z)/dz is at most 2|z| + 2 for the z
 * that matter), 1e-37 absolute where the result leaves f32's normal range (x below about -13). */
static void test_gelu_row(void) {
    float x[40], y[40];
    int bad = 0, cases = 0;
    for (int rep = 0; rep < 2000; rep++) {
        const int n = 1 + rep % 40;
        for (int i = 0; i < n; i++) {
            const int k = (int)(rnd() % 4);
            x[i] = k == 0 ? rndf() * 30.0f : k == 1 ? rndf() * 1e-6f : rndf() * 4.0f;
        }
        kc_gelu_row(x, y, n);
        for (int i = 0; i < n; i++, cases++) {
            const double v = x[i], z = -v / sqrt(2.0), want = 0.5 * v * erfc(z);
            const double tol = fabs(want) * (8 * 0x1p-23 + (2 * fabs(z) + 2) * fabs(z) * 0x1p-23) + 1e-37;
            if (!(fabs((double)y[i] - want) <= tol)) {
                if (bad++ < 5) printf("  gelu(%.9g): got %.9g want %.9g\n", x[i], y[i], want);
            }
        }
    }
    check(bad == 0, "kc_gelu_row against double precision, %d values: %d outside the bound", cases, bad);
}

/* kc_swiglu_row against double precision: values across the clamp (limit 7, as gpt-oss) and without
 * it. Bound: 4 ulps of |result| (f32 exp, a sum, a division and a product, each within one),
 * from alpha x in f32. */
static void test_swiglu_row(void) {
    float g[40], u[40], out[40];
    int bad = 0, cases = 0;
    for (int rep = 0; rep < 2000; rep++) {
        const int n = 1 + rep % 40;
        const float alpha = rep % 2 ? 1.702f : 1.0f, limit = rep % 3 ? 7.0f : 0.0f, off = rep % 4 < 2 ? 1.0f : 0.0f;
        for (int i = 0; i < n; i++) g[i] = rndf() * 20.0f, u[i] = rndf() * 20.0f, out[i] = g[i];
        kc_swiglu_row(out, u, n, alpha, limit, off);
        for (int i = 0; i < n; i++, cases++) {
            double x = g[i], y = u[i];
            if (limit > 0) x = x < limit ? x : limit, y = y < -limit ? -limit : (y > limit ? limit : y);
            /* alpha x rounded to f32 first, as the kernel and the reference (a tensor product) do:
             * its rounding moves exp(-alpha x) by up to |alpha x| ulps */
            const double ax = (float)((double)alpha * x);
            const double want = x / (1.0 + exp(-ax)) * (y + off);
            if (!(fabs((double)out[i] - want) <= fabs(want) * 8 * 0x1p-24 + 1e-37)) {
                if (bad++ < 5) printf("  swiglu(%.9g, %.9g): got %.9g want %.9g\n", g[i], u[i], out[i], want);
            }
        }
    }
    check(bad == 0, "kc_swiglu_row against double precision, %d values: %d outside the bound", cases, bad);
}

static void test_activation_rows(void) {
    test_swiglu_row();
    act_row_case("silu", kc_silu_row, 0, 120.0f);
    act_row_case("gelu_tanh", kc_gelu_tanh_row, 1, 60.0f);
    test_gelu_row();
}

/* ---- norms ---- */
/* kc_layernorm against LayerNorm in long double (two passes), with and without a bias, for rows
 * whose mean is 0, and 1000 times their spread (where E[x^2] - E[x]^2 in float loses every digit).
 * Bound: the normalized value is rounded to f32 once, times w once, plus b once: 3 ulps of
 * |t w| + |b| (t the normalized value), and 1e-12 relative for the double sums. */
static void test_layernorm(void) {
    int bad = 0, cases = 0;
    for (int rep = 0; rep < 300; rep++) {
        const int n = 1 + (rep * 37) % 700;
        const float mean = rep % 3 == 0 ? 1000.0f : rep % 3 == 1 ? 0.0f : -3.0f;
        const float spread = rep % 3 == 0 ? 1.0f : rep % 5 == 0 ? 1e-3f : 2.0f;
        float *x = malloc(sizeof(float) * n * 4), *w = x + n, *b = w + n, *y = b + n;
        for (int i = 0; i < n; i++) x[i] = mean + rndf() * spread, w[i] = 1.0f + rndf() * 0.5f, b[i] = rndf() * 0.3f;
        const int with_bias = rep % 2;
        const float eps = rep % 4 < 2 ? 1e-5f : 1e-6f;
        kc_layernorm(x, w, with_bias ? b : NULL, y, n, eps);
        long double m = 0, v = 0;
        for (int i = 0; i < n; i++) m += x[i];
        m /= n;
        for (int i = 0; i < n; i++) v += (x[i] - m) * (x[i] - m);
        const long double r = 1.0L / sqrtl(v / n + eps);
        for (int i = 0; i < n; i++, cases++) {
            const long double t = (x[i] - m) * r, want = t * w[i] + (with_bias ? b[i] : 0);
            const double tol = (double)(fabsl(t * w[i]) + (with_bias ? fabsf(b[i]) : 0)) * (3 * 0x1p-24 + 1e-12) + 1e-30;
            if (!(fabs((double)y[i] - (double)want) <= tol)) {
                if (bad++ < 5) printf("  layernorm n=%d mean %g [%d]: got %.9g want %.9Lg\n", n, mean, i, y[i], want);
            }
        }
        free(x);
    }
    check(bad == 0, "kc_layernorm against long double, %d values: %d outside the bound", cases, bad);
}

/* ---- causal convolution with per-sequence state ---- */
/* Three sequences fed in random chunks, several in one step (each contiguous, in a random
 * order), as the scheduler lays them out: every output row equals the convolution over the
 * sequence's whole history computed directly in long double, within a few f32 ulps of the sum of
 * |terms|. A state that is not carried, carried from the wrong rows or shifted wrongly misses. */
static void test_causal_conv(void) {
    enum { SEQS = 3, LEN = 40, MAXN = 40 };
    int bad = 0, cases = 0;
    for (int rep = 0; rep < 60; rep++) {
        const int n = 1 + (rep * 13) % MAXN, width = 2 + rep % 4, with_bias = rep % 2;
        static float hist[SEQS][LEN][MAXN], w[MAXN * 5], bias[MAXN], state[SEQS][4 * MAXN];
        static float x[SEQS * 8 * MAXN], y[SEQS * 8][MAXN]; /* x: the step's input rows, n apart */
        for (int i = 0; i < n * width; i++) w[i] = rndf();
        for (int i = 0; i < n; i++) bias[i] = rndf() * 0.3f;
        for (int s = 0; s < SEQS; s++)
            for (int p = 0; p < LEN; p++)
                for (int i = 0; i < n; i++) hist[s][p][i] = rndf();
        for (int s = 0; s < SEQS; s++)
            for (int i = 0; i < 4 * MAXN; i++) state[s][i] = 1e6f; /* a fresh slot holds garbage */
        int done[SEQS] = {0};
        while (done[0] < LEN || done[1] < LEN || done[2] < LEN) {
            int order[SEQS] = {0, 1, 2}, seq[SEQS * 8], pos[SEQS * 8], T = 0;
            for (int k = SEQS - 1; k > 0; k--) {
                const int j = (int)((uint32_t)rnd() % (uint32_t)(k + 1)), t = order[k];
                order[k] = order[j], order[j] = t;
            }
            for (int k = 0; k < SEQS; k++) {
                const int s = order[k], left = LEN - done[s];
                const int c = left < 1 ? 0 : 1 + (int)((uint32_t)rnd() % (uint32_t)(left < 8 ? left : 8));
                for (int j = 0; j < c; j++, T++) {
                    seq[T] = s, pos[T] = done[s] + j;
                    memcpy(x + (size_t)T * n, hist[s][pos[T]], sizeof(float) * (size_t)n);
                }
            }
            for (int t = 0; t < T; t++) {
                int back = 0;
                while (back < width - 1 && t - back > 0 && seq[t - back - 1] == seq[t]) back++;
                kc_causal_conv_row(x, t, back, pos[t], state[seq[t]], w, with_bias ? bias : NULL, n, width,
                                   y[t]);
            }
            for (int t = 0; t < T; t++) {
                if (t + 1 < T && seq[t + 1] == seq[t]) continue;
                int count = 1;
                while (count < width - 1 && t - count >= 0 && seq[t - count] == seq[t]) count++;
                kc_causal_conv_keep(x, t, count, pos[t], state[seq[t]], n, width);
            }
            for (int t = 0; t < T; t++) {
                const int s = seq[t];
                for (int i = 0; i < n; i++, cases++) {
                    long double want = with_bias ? bias[i] : 0, mag = with_bias ? fabsf(bias[i]) : 0;
                    for (int k = 0; k < width; k++) {
                        const int p = pos[t] - (width - 1) + k;
                        if (p < 0) continue;
                        want += (long double)w[i * width + k] * hist[s][p][i];
                        mag += fabsl((long double)w[i * width + k] * hist[s][p][i]);
                    }
                    if (!(fabsl(y[t][i] - want) <= mag * (width + 2) * 0x1p-24 + 1e-30)) {
                        if (bad++ < 5) printf("  causal_conv n=%d width=%d seq %d pos %d [%d]: got %.9g want %.9Lg\n", n,
                                              width, s, pos[t], i, y[t][i], want);
                    }
                }
            }
            for (int s = 0; s < SEQS; s++)
                for (int t = 0; t < T; t++) done[s] += seq[t] == s;
        }
    }
    check(bad == 0, "kc_causal_conv_row/keep over random chunks of 3 sequences against long double, %d values: %d "
          "outside the bound", cases, bad);
}

/* ---- activation quantization ---- */
static void test_quantize(void) {
    for (int trial = 0; trial < 6; trial++) {
        int n = 32 * (1 + trial * 7);
        float *x = malloc(sizeof(float) * n);
        kc_q8 *q = malloc(sizeof(kc_q8) * (n / 32));
        float scale = trial == 3 ? 1e-3f : trial == 4 ? 300.0f : 2.0f;
        for (int i = 0; i < n; i++) x[i] = rndf() * scale;
        if (trial == 1) memset(x, 0, 32 * sizeof(float)); /* all-zero block */
        if (trial == 2) x[5] = -7.0f;                     /* a negative extreme */
        kc_quantize_q8(x, q, n);
        int bad = 0;
        for (int b = 0; b < n / 32; b++) {
            float amax = 0;
            for (int k = 0; k < 32; k++) amax = fmaxf(amax, fabsf(x[32 * b + k]));
            if (q[b].d != amax / 127.0f) bad++;
            long sum = 0;
            for (int k = 0; k < 32; k++) {
                int v = q[b].qs[k];
                sum += v;
                double err = fabs((double)x[32 * b + k] - (double)q[b].d * v);
                if (v < -127 || v > 127 || err > 0.5 * q[b].d * (1 + 1e-5) + 1e-30) bad++;
            }
            if (fabs(q[b].s - (double)q[b].d * sum) > 1e-6 * fabs((double)q[b].d * sum) + 1e-30) bad++;
        }
        check(bad == 0, "kc_quantize_q8 n=%d scale=%g: %d errors", n, scale, bad);
        free(x);
        free(q);
    }
}

/* ---- kc_embed_row ---- */
static void test_embed(void) {
    const ingot_dtype types[] = {INGOT_F32, INGOT_F16, INGOT_BF16, INGOT_Q8_0, INGOT_Q4_0, INGOT_Q4_1};
    for (int ti = 0; ti < 6; ti++) {
        ingot_dtype t = types[ti];
        int IN = 96, rows = 5, bad = 0;
        void *W = rnd_weights(t, rows, IN);
        float out[96];
        for (int r = 0; r < rows; r++) {
            kc_embed_row(t, W, r, IN, out);
            for (int k = 0; k < IN; k++)
                if ((double)out[k] != (double)(float)ref_w(t, W, IN, r, k)) bad++;
        }
        check(bad == 0, "kc_embed_row %s: %d mismatches", tname(t), bad);
        free(W);
    }
}

/* ---- matmul kernels ---- */

/* Calls the kernel for type t. X is float [T][ldx] for float types, or the
 * kc_q8 blocks [T][ldx] for quantized ones. */
static void call_mm(ingot_dtype t, const void *W, const void *X, int ldx, float *Y, int ldy, int T, int IN, int r0,
                    int r1, const float *bias, int acc) {
    switch (t) {
    case INGOT_F32: kc_mm_f32(W, X, ldx, Y, ldy, T, IN, r0, r1, bias, acc); break;
    case INGOT_F16: kc_mm_f16(W, X, ldx, Y, ldy, T, IN, r0, r1, bias, acc); break;
    case INGOT_BF16: kc_mm_bf16(W, X, ldx, Y, ldy, T, IN, r0, r1, bias, acc); break;
    case INGOT_Q8_0: kc_mm_q8_0(W, X, ldx, Y, ldy, T, IN, r0, r1, bias, acc); break;
    case INGOT_Q4_0: kc_mm_q4_0(W, X, ldx, Y, ldy, T, IN, r0, r1, bias, acc); break;
    default: kc_mm_q4_1(W, X, ldx, Y, ldy, T, IN, r0, r1, bias, acc); break;
    }
}

static int is_quant(ingot_dtype t) { return t >= INGOT_Q8_0; }

/* The f32-activation kernels for quantized weights. */
static void call_mmx(ingot_dtype t, const void *W, const float *X, int ldx, float *Y, int ldy, int T, int IN, int r0,
                     int r1, const float *bias, int acc) {
    switch (t) {
    case INGOT_Q8_0: kc_mmx_q8_0(W, X, ldx, Y, ldy, T, IN, r0, r1, bias, acc); break;
    case INGOT_Q4_0: kc_mmx_q4_0(W, X, ldx, Y, ldy, T, IN, r0, r1, bias, acc); break;
    default: kc_mmx_q4_1(W, X, ldx, Y, ldy, T, IN, r0, r1, bias, acc); break;
    }
}

/* Runs one kernel case against the double reference; returns 1 if it passes.
 * mmx: a quantized type through kc_mmx_* (f32 activations) instead of kc_mm_*. */
static int mm_case_x(ingot_dtype t, int mmx, int IN, int T, int OUT, int r0, int r1, int use_bias, int acc,
                     int verbose) {
    const int q = is_quant(t) && !mmx;
    const int ldx = q ? IN / 32 + 1 : IN + 5; /* padded rows: the padding is poisoned */
    const int ldy = OUT + 3;
    void *W = rnd_weights(t, OUT, IN);
    float *bias = malloc(sizeof(float) * OUT);
    for (int r = 0; r < OUT; r++) bias[r] = rndf();
    /* Activations: f32 with NaN padding, and their kc_q8 quantization with
     * NaN-scaled padding blocks; xd holds what the kernel actually sees. */
    float *xf = malloc(sizeof(float) * (size_t)T * (IN + 5));
    kc_q8 *xq = malloc(sizeof(kc_q8) * (size_t)T * (IN / 32 + 1));
    double *xd = malloc(sizeof(double) * (size_t)T * IN);
    for (int tt = 0; tt < T; tt++) {
        float *row = xf + (size_t)tt * (IN + 5);
        for (int k = 0; k < IN; k++) row[k] = rndf() * (k % 7 == 0 ? 4.0f : 1.0f);
        for (int k = IN; k < IN + 5; k++) row[k] = NAN;
        kc_q8 *qr = xq + (size_t)tt * (IN / 32 + 1);
        kc_quantize_q8(row, qr, IN);
        qr[IN / 32].d = NAN;
        qr[IN / 32].s = NAN;
        memset(qr[IN / 32].qs, 0x7f, 32);
        for (int k = 0; k < IN; k++)
            xd[(size_t)tt * IN + k] = q ? (double)qr[k / 32].d * qr[k / 32].qs[k % 32] : row[k];
    }
    float *Y = malloc(sizeof(float) * (size_t)T * ldy), *Y0 = malloc(sizeof(float) * (size_t)T * ldy);
    for (size_t i = 0; i < (size_t)T * ldy; i++) Y[i] = Y0[i] = rndf() * 3.0f;

    if (mmx)
        call_mmx(t, W, xf, ldx, Y, ldy, T, IN, r0, r1, use_bias ? bias : NULL, acc);
    else
        call_mm(t, W, q ? (const void *)xq : (const void *)xf, ldx, Y, ldy, T, IN, r0, r1, use_bias ? bias : NULL,
                acc);

    double *wd = malloc(sizeof(double) * IN);
    double worst = 0;
    int bad = 0;
    for (int r = 0; r < OUT; r++) {
        for (int k = 0; k < IN; k++) wd[k] = ref_w(t, W, IN, r, k);
        for (int tt = 0; tt < T; tt++) {
            size_t yi = (size_t)tt * ldy + r;
            if (r < r0 || r >= r1) { /* untouched outside [r0, r1) */
                if (memcmp(&Y[yi], &Y0[yi], sizeof(float)) != 0) bad++;
                continue;
            }
            double dot = 0, mag = 0;
            const double *x = xd + (size_t)tt * IN;
            for (int k = 0; k < IN; k++) {
                dot += wd[k] * x[k];
                mag += fabs(wd[k] * x[k]);
            }
            double extra = (acc ? Y0[yi] : 0.0) + (use_bias ? bias[r] : 0.0);
            double ref = dot + extra;
            double tol = (q ? TOL_QUANT : TOL_FLOAT) * mag + 4 * 1.2e-7 * (fabs(extra) + fabs(ref)) + 1e-30;
            double err = fabs((double)Y[yi] - ref);
            if (!(err <= tol)) {
                if (bad < 3 && verbose)
                    printf("  %s IN=%d T=%d r=%d t=%d: got %.9g want %.9g (err %.3g tol %.3g)\n", tname(t), IN, T, r,
                           tt, Y[yi], ref, err, tol);
                bad++;
            }
            if (mag > 0 && err / mag > worst) worst = err / mag;
        }
    }
    /* The padding Y columns [OUT, ldy) must be untouched too. */
    for (int tt = 0; tt < T; tt++)
        for (int r = OUT; r < ldy; r++)
            if (memcmp(&Y[(size_t)tt * ldy + r], &Y0[(size_t)tt * ldy + r], sizeof(float)) != 0) bad++;
    free(W), free(bias), free(xf), free(xq), free(xd), free(Y), free(Y0), free(wd);
    check(bad == 0, "kc_mm%s_%s IN=%d T=%d rows [%d,%d) of %d bias=%d acc=%d: %d bad (worst rel err %.2g)",
          mmx ? "x" : "", tname(t), IN, T, r0, r1, OUT, use_bias, acc, bad, worst);
    return bad == 0;
}
static int mm_case(ingot_dtype t, int IN, int T, int OUT, int r0, int r1, int use_bias, int acc, int verbose) {
    return mm_case_x(t, 0, IN, T, OUT, r0, r1, use_bias, acc, verbose);
}

static void test_matmul(void) {
    const ingot_dtype types[] = {INGOT_F32, INGOT_F16, INGOT_BF16, INGOT_Q8_0, INGOT_Q4_0, INGOT_Q4_1};
    const int ins[] = {32, 64, 576, 1536}, ts[] = {1, 3, 17, 64};
    for (int ti = 0; ti < 6; ti++)
        for (int ii = 0; ii < 4; ii++)
            for (int tj = 0; tj < 4; tj++) {
                int IN = ins[ii], T = ts[tj];
                mm_case(types[ti], IN, T, 37, 0, 37, 0, 0, 1);  /* all rows, odd count */
                mm_case(types[ti], IN, T, 37, 5, 30, 1, 1, 1);  /* sub-range, bias, accumulate */
                mm_case(types[ti], IN, T, 13, 3, 4, 1, 0, 1);   /* a single row */
                mm_case(types[ti], IN, T, 40, 8, 40, 0, 1, 1);  /* aligned tail range, accumulate */
            }
    /* kc_mmx_*: quantized weights, f32 activations, float tolerance. Token
     * counts cover the direct (T < 3) and packed paths, full and partial
     * microkernel tiles (12 / 4 / 1 tokens) and more than one token chunk
     * (128); IN 1056 = 33 blocks leaves a partial K chunk; row ranges cover
     * partial 32-row tiles (and halves beyond the last row). */
    {
        const int xins[] = {32, 64, 576, 1056, 1536}, xts[] = {1, 2, 3, 17, 64, 133};
        for (int ti = 3; ti < 6; ti++)
            for (int ii = 0; ii < 5; ii++)
                for (int tj = 0; tj < 6; tj++) {
                    int IN = xins[ii], T = xts[tj];
                    mm_case_x(types[ti], 1, IN, T, 37, 0, 37, 0, 0, 1);
                    mm_case_x(types[ti], 1, IN, T, 37, 5, 30, 1, 1, 1);
                    mm_case_x(types[ti], 1, IN, T, 13, 3, 4, 1, 0, 1);
                    mm_case_x(types[ti], 1, IN, T, 72, 8, 72, 1, 1, 1);
                    mm_case_x(types[ti], 1, IN, T, 96, 0, 96, 0, 0, 1);
                }
    }
    /* Float kernels also take IN that is not a multiple of the vector width. */
    for (int ti = 0; ti < 3; ti++) {
        mm_case(types[ti], 7, 5, 9, 0, 9, 1, 0, 1);
        mm_case(types[ti], 100, 3, 11, 2, 11, 0, 1, 1);
    }
}

/* ---- paged attention (kc_attend) ---- */

/* One case: a pool of n_blocks blocks, the sequence's positions mapped
 * through a shuffled block table; attention of token `pos` over [first, pos]
 * for the `group` heads of KV head kvh, against a double-precision softmax.
 * Tolerance per output element: 1e-5 * sum_p prob_p * |V_p[d]| (+ tiny). */
#if KC_KV_Q8
static int q8_kv_bad; /* stored q8_0 values farther from x than the rounding allows */
#endif
#if KC_KV_Q4
/* q4 blocks whose values are not each the nearest level times the block's scale, and the squared
 * error of every stored row against the row given (and its squared norm): the rotation keeps
 * both, so their ratio is the rotated blocks' own */
static int q4_kv_bad;
static double q4_err2, q4_norm2;
/* Checks one row of n values as stored (a key row rotated) against x, the row given. */
static void q4_check_row(const float *x, const kc_kv_t *row, int n, int is_key) {
    for (int b = 0; b < n / 32; b++) {
        float y[32], got[32];
        memcpy(y, x + 32 * b, sizeof y);
        if (is_key) kc_kv_q4_rotate(y);
        kc_kv_q4_get_block(row + (size_t)b * KC_KV_Q4_BYTES, got);
        const float d = kc_kv_q4_scale(row + (size_t)b * KC_KV_Q4_BYTES);
        for (int i = 0; i < 32; i++) {
            /* no code is nearer to y than the one stored (the store compares y * (1 / d), rounded,
             * with the midpoints: values within 1e-4 of a step from one count either way) */
            float best = INFINITY;
            for (int k = 0; k < 16; k++) best = fminf(best, fabsf(y[i] - d * kc_kv_q4_levels[k]));
            q4_kv_bad += !(fabsf(y[i] - got[i]) <= best + 1e-4f * d);
        }
    }
    float back[KC_KV_MAX_HEAD_DIM];
    kc__kv_row(row, n, back);
    if (is_key) kc_kv_q4_unrotate_row(back, n);
    for (int i = 0; i < n; i++) q4_err2 += ((double)back[i] - x[i]) * ((double)back[i] - x[i]), q4_norm2 += (double)x[i] * x[i];
}
#endif
/* 1: attend_case_kv gives every query head a random sink logit (gpt-oss), some above every score */
static int attend_with_sinks;

static int attend_case_kv(int head_dim, int value_dim, int shared, int group, int kv_heads, int n_layers, int layer,
                          int pos, int first, float softcap) {
    const int BS = 16, n_blocks = (pos + BS) / BS + 3;
#if KC_KV_Q8 || KC_KV_Q4
    if (head_dim % 32 || value_dim % 32) return 1; /* q8_0 and q4 rows are whole blocks of 32 (the generator checks) */
#endif
    const size_t half_rows = (size_t)n_layers * n_blocks * kv_heads * BS, half = half_rows * head_dim;
    /* the pool in the cache's element type, written row by row as the
     * model does; the reference reads the very values stored (widened back
     * exactly; q8_0: d * q), so the bound is the same for every element type.
     * kvf holds them as f32 rows of head_dim at the same row indices. */
    kc_kv_t *kv = malloc(sizeof(kc_kv_t) * 2 * half_rows * KC_KV_ROW(head_dim));
    float *kvf = malloc(sizeof(float) * 2 * half);
    for (size_t r = 0; r < 2 * half_rows; r++) {
        float x[KC_KV_MAX_HEAD_DIM], tmp[KC_KV_MAX_HEAD_DIM];
        for (int d = 0; d < head_dim; d++) x[d] = rndf();
        const int is_key = r < half_rows; /* the pool's K half, then its V half */
        kc__kv_put_row(kv + r * KC_KV_ROW(head_dim), x, head_dim, is_key);
        memcpy(kvf + r * head_dim, kc__kv_row(kv + r * KC_KV_ROW(head_dim), head_dim, tmp), sizeof(float) * head_dim);
#if KC_KV_Q4
        /* the reference attends over the stored key rows rotated back: the keys attention stands for */
        if (is_key) kc_kv_q4_unrotate_row(kvf + r * head_dim, head_dim);
        q4_check_row(x, kv + r * KC_KV_ROW(head_dim), head_dim, is_key);
#endif
#if KC_KV_Q8
        /* the stored values: round(x / d) * d with d = max|x| / 127 per 32, d itself rounded to f16
         * (relative error <= 2^-11, times |q| <= 127): within 0.5 d + 127 * 2^-11 d of x */
        for (int b = 0; b < head_dim / 32; b++) {
            float amax = 0;
            for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[32 * b + i]));
            for (int i = 0; i < 32; i++)
                q8_kv_bad += !(fabsf(kvf[r * head_dim + 32 * b + i] - x[32 * b + i]) <= amax / 127 * (0.5f + 127.0f / 2048));
        }
#endif
    }
    /* block table: a random permutation of the pool's blocks */
    int32_t *bt = malloc(sizeof(int32_t) * n_blocks);
    for (int i = 0; i < n_blocks; i++) bt[i] = i;
    for (int i = n_blocks - 1; i > 0; i--) {
        int j = rndi(0, i);
        int32_t tmp = bt[i];
        bt[i] = bt[j], bt[j] = tmp;
    }
    const int kvh = rndi(0, kv_heads - 1), n = pos - first + 1;
    /* the rows after pos in its block hold NaN (all bits set, in every element type): the scores'
     * tiles read a partial run of 16 rows whole, and nothing of those rows may reach the output */
    for (int p = pos + 1; p % BS; p++)
        for (int v = 0; v < 2; v++)
            memset(kv + ((size_t)v * half_rows + kc_kv_row_index(layer, n_blocks, kv_heads, BS, bt[p / BS], kvh, p % BS)) *
                            KC_KV_ROW(head_dim),
                   0xff, sizeof(kc_kv_t) * KC_KV_ROW(head_dim));
    float *q = malloc(sizeof(float) * group * head_dim), *out = malloc(sizeof(float) * group * value_dim);
    float *scores = malloc(sizeof(float) * KC_ATTN_SCRATCH(group, head_dim, value_dim));
    for (int i = 0; i < group * head_dim; i++) q[i] = rndf() * 2.0f;
    const float scale = 1.0f / sqrtf((float)head_dim);
    float *sinks = NULL;
    if (attend_with_sinks) {
        sinks = malloc(sizeof(float) * group);
        for (int g = 0; g < group; g++) sinks[g] = rndf() * 6.0f;
    }
    if (shared || value_dim != head_dim || sinks)
        kc_attend_kv(kv, n_layers, layer, n_blocks, kv_heads, BS, head_dim, value_dim, shared, bt, kvh, group, first,
                     pos, q, scale, softcap, sinks, scores, out);
    else
        kc_attend(kv, n_layers, layer, n_blocks, kv_heads, BS, head_dim, bt, kvh, group, first, pos, q, scale,
                  softcap, scores, out);
    /* the same chunks run apart and merged afterwards (as a model's decode
     * splits them across threads) give the very same bits */
    {
        const int nc = kc_attn_chunks(first, pos);
        float *parts = malloc(sizeof(float) * KC_ATTN_PART(group, value_dim) * nc);
        float *sc = malloc(sizeof(float) * KC_ATTN_SCRATCH(group, head_dim, value_dim)), *o2 = malloc(sizeof(float) * group * value_dim);
        float *ml = malloc(sizeof(float) * 2 * group);
        for (int c = nc - 1; c >= 0; c--) /* in reverse: the order of the chunks' runs must not matter */
            kc_attend_chunk(kv, n_layers, layer, n_blocks, kv_heads, BS, head_dim, value_dim, shared, bt, kvh, group, first,
                            pos, c, q, scale, softcap, sc, parts + KC_ATTN_PART(group, value_dim) * c);
        for (int c = 0; c < nc; c++) kc_attend_merge(group, value_dim, c, parts + KC_ATTN_PART(group, value_dim) * c, o2, ml);
        kc_attend_finish(group, value_dim, shared, sinks, o2, ml);
        check(memcmp(o2, out, sizeof(float) * group * value_dim) == 0,
              "kc_attend hd=%d vd=%d group=%d pos=%d first=%d: chunks run apart and merged give the same bits", head_dim,
              value_dim, group, pos, first);
        free(parts), free(sc), free(o2), free(ml);
    }
    double *pr = malloc(sizeof(double) * n);
    int bad = 0;
    double worst = 0;
    for (int g = 0; g < group; g++) {
        double mx = -INFINITY, sum = 0;
        for (int p = first; p <= pos; p++) {
            const float *k = kvf + kc_kv_row_index(layer, n_blocks, kv_heads, BS, bt[p / BS], kvh, p % BS) * head_dim;
            double s = 0;
            for (int d = 0; d < head_dim; d++) s += (double)q[g * head_dim + d] * k[d];
            s *= scale;
            if (softcap > 0) s = softcap * tanh(s / softcap);
            pr[p - first] = s;
            if (s > mx) mx = s;
        }
        if (sinks && sinks[g] > mx) mx = sinks[g]; /* the sink joins the softmax and weighs no value */
        for (int i = 0; i < n; i++) sum += (pr[i] = exp(pr[i] - mx));
        if (sinks) sum += exp(sinks[g] - mx);
        for (int d = 0; d < value_dim; d++) {
            double ref = 0, mag = 0;
            for (int p = first; p <= pos; p++) {
                /* shared: the values are the key rows' first value_dim columns */
                const float *v = kvf + (shared ? 0 : half) +
                                 kc_kv_row_index(layer, n_blocks, kv_heads, BS, bt[p / BS], kvh, p % BS) * head_dim;
                ref += pr[p - first] / sum * v[d];
                mag += pr[p - first] / sum * fabs(v[d]);
            }
            double err = fabs(out[g * value_dim + d] - ref);
            if (!(err <= 1e-5 * mag + 1e-30)) {
                if (bad++ < 3)
                    printf("  attend hd=%d vd=%d group=%d pos=%d first=%d g=%d d=%d: got %.9g want %.9g\n", head_dim,
                           value_dim, group, pos, first, g, d, out[g * value_dim + d], ref);
            }
            if (mag > 0 && err / mag > worst) worst = err / mag;
        }
    }
#if KC_KV_Q8
    check(q8_kv_bad == 0, "q8_0 KV store rounds within half a step: %d values beyond", q8_kv_bad);
#endif
#if KC_KV_Q4
    check(q4_kv_bad == 0, "q4 KV store takes each value's nearest level: %d values not", q4_kv_bad);
#endif
    check(bad == 0, "kc_attend (%s KV) hd=%d vd=%d%s group=%d kv_heads=%d layer %d/%d pos=%d first=%d softcap=%g%s: %d bad (worst %.2g)",
          KC_KV_Q4 ? "q4" : KC_KV_Q8 ? "q8_0" : KC_KV_F16 ? "f16" : "f32", head_dim, value_dim, shared ? " shared" : "", group, kv_heads, layer, n_layers,
          pos, first, softcap, sinks ? " sinks" : "", bad, worst);
    free(kv), free(kvf), free(bt), free(q), free(out), free(scores), free(pr), free(sinks);
    return bad == 0;
}

static int attend_case(int head_dim, int group, int kv_heads, int n_layers, int layer, int pos, int first,
                       float softcap) {
    return attend_case_kv(head_dim, head_dim, 0, group, kv_heads, n_layers, layer, pos, first, softcap);
}

/* Values shared with the keys (MLA's cached latent + RoPE key: one KV head,
 * every query head in its group), on the AVX-512 shapes (48/32, DeepSeek-V2's
 * 576/512) and the plain ones (40/24, 32/20). */
static void test_attend_shared_values(void) {
    const int shapes[][2] = {{48, 32}, {576, 512}, {40, 24}, {32, 20}}, groups[] = {1, 4, 16};
    const int poss[] = {0, 15, 16, 47, 130};
    for (int si = 0; si < 4; si++)
        for (int gi = 0; gi < 3; gi++)
            for (int pi = 0; pi < 5; pi++) {
                attend_case_kv(shapes[si][0], shapes[si][1], 1, groups[gi], 1, 2, 1, poss[pi], 0, 0.0f);
                attend_case_kv(shapes[si][0], shapes[si][1], 0, groups[gi], 2, 1, 0, poss[pi], 0, 0.0f);
            }
}

/* Attention sinks (gpt-oss): a logit per query head in the softmax's sum, on the vector shapes and
 * the plain loops, one chunk and several (the sink is folded in once, after every chunk's merge),
 * with a sliding window. */
static void test_attend_sinks(void) {
    attend_with_sinks = 1;
    const int hds[] = {64, 24}, groups[] = {1, 4}, poss[] = {0, 15, 130, 300};
    for (int hi = 0; hi < 2; hi++)
        for (int gi = 0; gi < 2; gi++)
            for (int pi = 0; pi < 4; pi++) {
                attend_case(hds[hi], groups[gi], 2, 2, 1, poss[pi], 0, 0.0f);
                if (poss[pi] > 3) attend_case(hds[hi], groups[gi], 2, 1, 0, poss[pi], poss[pi] / 2, 0.0f);
            }
    attend_with_sinks = 0;
}

/* ---- per-head linear (kc_head_linear) ---- */

static void head_linear_case(ingot_dtype t, int heads, int stride, int first, int rows, int cols, int transpose) {
    const size_t n = (size_t)heads * stride * cols;
    float *wf = malloc(sizeof(float) * n);
    uint16_t *wh = malloc(sizeof(uint16_t) * n);
    for (size_t i = 0; i < n; i++) {
        wf[i] = rndf();
        if (t == INGOT_F16) {
            wh[i] = kc_f32_to_fp16(wf[i]);
            wf[i] = kc_fp16_to_f32(wh[i]); /* the reference reads the values stored */
        }
    }
    const int in = transpose ? rows : cols, outw = transpose ? cols : rows;
    float *x = malloc(sizeof(float) * heads * in), *y = malloc(sizeof(float) * heads * outw);
    for (int i = 0; i < heads * in; i++) x[i] = rndf();
    kc_head_linear(t, t == INGOT_F16 ? (const void *)wh : (const void *)wf, heads, stride, first, rows, cols,
                   transpose, x, y);
    int bad = 0;
    for (int h = 0; h < heads; h++)
        for (int o = 0; o < outw; o++) {
            double ref = 0, mag = 0;
            for (int i = 0; i < in; i++) {
                const int r = transpose ? i : o, c = transpose ? o : i;
                const double term = (double)wf[((size_t)h * stride + first + r) * cols + c] * x[h * in + i];
                ref += term, mag += fabs(term);
            }
            if (!(fabs(y[h * outw + o] - ref) <= TOL_FLOAT * mag + 1e-30) && bad++ < 3)
                printf("  head_linear h=%d o=%d: got %.9g want %.9g\n", h, o, y[h * outw + o], ref);
        }
    check(bad == 0, "kc_head_linear %s heads=%d stride=%d rows [%d, %d) cols=%d%s: %d bad",
          t == INGOT_F16 ? "f16" : "f32", heads, stride, first, first + rows, cols, transpose ? " transposed" : "", bad);
    free(wf), free(wh), free(x), free(y);
}

static void test_head_linear(void) {
    const ingot_dtype types[] = {INGOT_F32, INGOT_F16};
    for (int ti = 0; ti < 2; ti++)
        for (int tr = 0; tr < 2; tr++) {
            head_linear_case(types[ti], 4, 40, 0, 16, 32, tr);  /* kv_b's W_UK blocks */
            head_linear_case(types[ti], 4, 40, 16, 24, 32, tr); /* and its W_UV blocks */
            head_linear_case(types[ti], 3, 28, 12, 16, 24, tr);
            head_linear_case(types[ti], 1, 7, 2, 5, 9, tr);
        }
}

static void test_attend(void) {
    const int hds[] = {64, 16, 24, 128, 80}, groups[] = {1, 3, 4, 5};
    /* chunks of KC_ATTN_CHUNK (128) positions: one partial chunk, an exact
     * chunk, one position into the next, several (a window starting mid-chunk) */
    const int poss[] = {0, 5, 15, 16, 47, 127, 128, 200, 700};
    for (int hi = 0; hi < 5; hi++)
        for (int gi = 0; gi < 4; gi++)
            for (int pi = 0; pi < 9; pi++) {
                int pos = poss[pi];
                attend_case(hds[hi], groups[gi], 3, 2, 1, pos, 0, 0.0f);
                if (pos > 3) attend_case(hds[hi], groups[gi], 2, 1, 0, pos, pos / 3 + 1, 0.0f); /* sliding window */
            }
    attend_case(64, 4, 2, 2, 0, 100, 0, 30.0f);  /* soft-capping */
    attend_case(64, 3, 3, 2, 1, 100, 37, 50.0f); /* soft-capping + window */
    attend_case(64, 4, 2, 2, 0, 300, 0, 30.0f);  /* soft-capping over three chunks */
    attend_case(80, 3, 3, 2, 1, 400, 150, 50.0f); /* + a window starting mid-chunk, plain loops */
}

/* ---- thread pool ---- */
typedef struct {
    int64_t n, grain;
    int size;
    atomic_int *hits;     /* per item */
    atomic_int chunks;
    atomic_int errors;
    atomic_int tid_seen;  /* bit mask of thread ids */
    atomic_llong sum;
} tp_ctx;

static void tp_check_fn(void *vctx, int64_t b, int64_t e, int tid) {
    tp_ctx *c = vctx;
    int64_t g = c->grain < 1 ? 1 : c->grain;
    if (b < 0 || e > c->n || b >= e || b % g != 0 || (e - b < g && e != c->n) || tid < 0 || tid >= c->size)
        atomic_fetch_add(&c->errors, 1);
    if (tid >= 0 && tid < 31 && (atomic_fetch_or(&c->tid_seen, 1 << tid) & (1 << tid)))
        atomic_fetch_add(&c->errors, 1); /* a thread id used twice in one call */
    atomic_fetch_add(&c->chunks, 1);
    long long s = 0;
    for (int64_t i = b; i < e; i++) {
        atomic_fetch_add(&c->hits[i], 1);
        s += i;
    }
    atomic_fetch_add(&c->sum, s);
}

static void sum_fn(void *vctx, int64_t b, int64_t e, int tid) {
    (void)tid;
    long long s = 0;
    for (int64_t i = b; i < e; i++) s += i;
    atomic_fetch_add((atomic_llong *)vctx, s);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void test_threadpool(void) {
    enum { MAXN = 5000 };
    atomic_int *hits = malloc(sizeof(atomic_int) * MAXN);
    for (int nt = 1; nt <= 4; nt++) {
        tp_pool *p = tp_create(nt);
        check(p != NULL && tp_size(p) == nt, "tp_create(%d) / tp_size", nt);
        if (!p) continue;
        int bad_calls = 0;
        for (int call = 0; call < 3000; call++) {
            tp_ctx c;
            c.n = call % 10 == 0 ? rndi(0, 3) : rndi(1, MAXN);
            c.grain = call % 5 == 0 ? rndi(-1, 0) : rndi(1, call % 3 == 0 ? 2000 : 16);
            c.size = nt;
            c.hits = hits;
            atomic_init(&c.chunks, 0);
            atomic_init(&c.errors, 0);
            atomic_init(&c.tid_seen, 0);
            atomic_init(&c.sum, 0);
            for (int64_t i = 0; i < c.n; i++) atomic_init(&hits[i], 0);
            tp_parallel_for(p, c.n, c.grain, tp_check_fn, &c);
            int64_t g = c.grain < 1 ? 1 : c.grain, units = (c.n + g - 1) / g;
            int64_t want_chunks = units < nt ? units : nt;
            int bad = atomic_load(&c.errors) != 0 || atomic_load(&c.chunks) != want_chunks ||
                      atomic_load(&c.sum) != (long long)c.n * (c.n - 1) / 2;
            for (int64_t i = 0; i < c.n; i++) bad |= atomic_load(&hits[i]) != 1;
            if (bad && bad_calls++ < 3)
                printf("  pool %d: n=%lld grain=%lld chunks=%d (want %lld) errors=%d\n", nt, (long long)c.n,
                       (long long)c.grain, atomic_load(&c.chunks), (long long)want_chunks, atomic_load(&c.errors));
        }
        check(bad_calls == 0, "tp_parallel_for pool of %d: coverage, grain, chunk count, thread ids (%d bad calls)",
              nt, bad_calls);

        /* Many back-to-back tiny calls (the decode pattern), timed. */
        atomic_llong total;
        atomic_init(&total, 0);
        const int calls = 20000;
        double t0 = now_s();
        for (int i = 0; i < calls; i++) tp_parallel_for(p, 64, 1, sum_fn, &total);
        double dt = now_s() - t0;
        check(atomic_load(&total) == (long long)calls * (64 * 63 / 2), "pool of %d: %d back-to-back calls sum", nt,
              calls);
        printf("  pool of %d: %.2f us per tp_parallel_for (n=64)\n", nt, dt / calls * 1e6);
        tp_free(p);
    }
    free(hits);
    /* Create/free churn, including pools that never ran a job. */
    for (int i = 0; i < 20; i++) {
        tp_pool *p = tp_create(1 + i % 4);
        if (i % 2) {
            atomic_llong s;
            atomic_init(&s, 0);
            tp_parallel_for(p, 1000, 10, sum_fn, &s);
        }
        tp_free(p);
    }
    check(1, "tp_create/tp_free churn");
}

/* Splitting rows across the pool (the way generated code calls the kernels)
 * must give bit-identical results to one call: every row is computed by the
 * same instruction sequence whatever tile it falls in. */
typedef struct {
    const block_q4_0 *W;
    const kc_q8 *X;
    float *Y;
    int T;
} mm_par_ctx;
static void mm_par_fn(void *vctx, int64_t b, int64_t e, int tid) {
    (void)tid;
    mm_par_ctx *c = vctx;
    kc_mm_q4_0(c->W, c->X, 576 / 32, c->Y, 203, c->T, 576, (int)b, (int)e, NULL, 0);
}
static void test_parallel_matmul(void) {
    const int OUT = 203, IN = 576, T = 5;
    block_q4_0 *W = rnd_weights(INGOT_Q4_0, OUT, IN);
    float *x = malloc(sizeof(float) * T * IN);
    kc_q8 *xq = malloc(sizeof(kc_q8) * T * (IN / 32));
    for (int i = 0; i < T * IN; i++) x[i] = rndf();
    for (int t = 0; t < T; t++) kc_quantize_q8(x + t * IN, xq + t * (IN / 32), IN);
    float *y1 = calloc((size_t)T * OUT, sizeof(float)), *y2 = calloc((size_t)T * OUT, sizeof(float));
    kc_mm_q4_0(W, xq, IN / 32, y1, OUT, T, IN, 0, OUT, NULL, 0);
    int ok = 1;
    for (int nt = 2; nt <= 3; nt++) {
        tp_pool *p = tp_create(nt);
        mm_par_ctx c = {W, xq, y2, T};
        for (int g = 1; g <= 8; g *= 2) {
            memset(y2, 0, sizeof(float) * T * OUT);
            tp_parallel_for(p, OUT, g, mm_par_fn, &c);
            ok &= memcmp(y1, y2, sizeof(float) * T * OUT) == 0;
        }
        tp_free(p);
    }
    check(ok, "row-split kc_mm_q4_0 across pools is bit-identical to one call");
    free(W), free(x), free(xq), free(y1), free(y2);
}

#if KC_KV_Q4
/* The q4 cache's rotation and the error it leaves, beyond the attention cases above. The bounds
 * are those of its design (kc_kv_q4.h): Gaussian key rows with or without a channel 20 times the
 * others, and Gaussian value rows, lose 0.6% of their squared norm (a bound of 0.75%); the same
 * levels without the rotation lose 1.6% on the outlier rows, so the bound catches a key rotation
 * that is not there. The attention cases' rows (uniform in [-1, 1]) are held to the same bound. */
static double gauss(void) {
    double u = (rndf() + 1.0) / 2.0, v = (rndf() + 1.0) / 2.0;
    return sqrt(-2.0 * log(u + 1e-300)) * cos(6.283185307179586 * v);
}
static void test_kv_q4(void) {
    /* the rotation is orthogonal: undone within rounding, norms kept */
    float x[64], y[64];
    double worst = 0;
    for (int r = 0; r < 200; r++) {
        for (int i = 0; i < 64; i++) x[i] = y[i] = rndf() * 3.0f;
        kc_kv_q4_rotate_row(y, 64);
        double n0 = 0, n1 = 0;
        for (int i = 0; i < 64; i++) n0 += (double)x[i] * x[i], n1 += (double)y[i] * y[i];
        worst = fmax(worst, fabs(n1 / n0 - 1));
        kc_kv_q4_unrotate_row(y, 64);
        for (int i = 0; i < 64; i++) worst = fmax(worst, fabs(y[i] - x[i]) / sqrt(n0 / 64));
    }
    /* 2 x (5 butterfly stages + 1 scaling) roundings of 2^-24 each, on sums up to sqrt(32) x the rms */
    check(worst < 12 * 5.7 / 16777216.0, "q4 rotation: orthogonal and undone within f32 rounding (worst %.2g)", worst);
    printf("  q4 KV rows of the attention cases: %.4f of the squared norm lost\n", q4_norm2 > 0 ? q4_err2 / q4_norm2 : -1.0);
    check(q4_norm2 > 0 && q4_err2 / q4_norm2 < 0.0075, "q4 KV rows of the attention cases: %.4f of the squared norm lost",
          q4_norm2 > 0 ? q4_err2 / q4_norm2 : -1.0);
    const char *cases[] = {"Gaussian key rows", "Gaussian key rows with an outlier channel", "Gaussian value rows"};
    for (int c = 0; c < 3; c++) {
        const int is_key = c < 2, outlier = c == 1;
        double e2 = 0, n2 = 0;
        for (int r = 0; r < 4000; r++) {
            uint8_t row[2 * KC_KV_Q4_BYTES];
            float back[64];
            for (int i = 0; i < 64; i++) x[i] = (float)gauss() * (outlier && i % 32 == 5 ? 20.0f : 1.0f);
            kc__kv_put_row(row, x, 64, is_key);
            kc__kv_row(row, 64, back);
            if (is_key) kc_kv_q4_unrotate_row(back, 64);
            for (int i = 0; i < 64; i++) e2 += ((double)back[i] - x[i]) * ((double)back[i] - x[i]), n2 += (double)x[i] * x[i];
        }
        printf("  q4 KV store, %s: %.4f of the squared norm lost\n", cases[c], e2 / n2);
        check(e2 / n2 < 0.0075, "q4 KV store, %s: %.4f of the squared norm lost", cases[c], e2 / n2);
    }
    /* a zero row stores zeros; a constant row comes back within the levels' reach */
    uint8_t row[KC_KV_Q4_BYTES];
    float back[32];
    for (int i = 0; i < 32; i++) x[i] = 0.0f;
    kc__kv_put(row, x, 32);
    kc__kv_row(row, 32, back);
    int nonzero = 0;
    for (int i = 0; i < 32; i++) nonzero += back[i] != 0.0f;
    check(nonzero == 0, "q4 KV: a zero row stays zero (%d values not)", nonzero);
}
#endif

int main(void) {
    test_half();
    test_activation_rows();
    test_layernorm();
    test_causal_conv();
    test_quantize();
    test_embed();
    test_matmul();
    test_attend();
    test_attend_shared_values();
    test_attend_sinks();
#if KC_KV_Q4
    test_kv_q4();
#endif
    test_head_linear();
    test_threadpool();
    test_parallel_matmul();
    return check_summary();
}
