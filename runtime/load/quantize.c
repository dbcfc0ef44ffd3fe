/* quantize.c — f32 to Q5_0/Q5_1 (reference formulas) and Q2_K/Q3_K/Q4_K/Q5_K/Q6_K/IQ4_NL/IQ4_XS (least-squares scale search). */
#include "quantize.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "dtype.h"

static inline void st16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }

/* Float to int with clamping; NaN goes to lo (a cast of an out-of-range
 * float would be undefined behaviour). Truncates toward zero. */
static inline int clamp_int(float v, int lo, int hi) {
    if (!(v >= (float)lo)) return lo;
    if (v >= (float)hi) return hi;
    return (int)v;
}
/* Nearest integer (halves away from zero), clamped. */
static inline int round_clamp(float v, int lo, int hi) { return clamp_int(roundf(v), lo, hi); }

/* Q5_0: d = (the value of largest magnitude) / -16, q = trunc(x/d + 16.5)
 * clamped to 31, as GGUF's reference; the fifth bits go to qh. */
void quant_q5_0_block(const float *x, uint8_t *out) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; j++)
        if (amax < fabsf(x[j])) { amax = fabsf(x[j]); max = x[j]; }
    const float d = max / -16.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    uint32_t qh = 0;
    st16(out, f32_to_fp16(d));
    for (int j = 0; j < 16; j++) {
        const int q0 = clamp_int(x[j] * id + 16.5f, 0, 31), q1 = clamp_int(x[j + 16] * id + 16.5f, 0, 31);
        out[offsetof(block_q5_0, qs) + j] = (uint8_t)((q0 & 15) | (q1 & 15) << 4);
        qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + 16);
    }
    for (int k = 0; k < 4; k++) out[offsetof(block_q5_0, qh) + k] = (uint8_t)(qh >> (8 * k));
}

/* Q5_1: d = (max - min)/31, m = min, q = trunc((x - min)/d + 0.5). */
void quant_q5_1_block(const float *x, uint8_t *out) {
    float min = x[0], max = x[0];
    for (int j = 1; j < 32; j++) {
        if (x[j] < min) min = x[j];
        if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / 31.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    uint32_t qh = 0;
    st16(out, f32_to_fp16(d));
    st16(out + offsetof(block_q5_1, m), f32_to_fp16(min));
    for (int j = 0; j < 16; j++) {
        const int q0 = clamp_int((x[j] - min) * id + 0.5f, 0, 31), q1 = clamp_int((x[j + 16] - min) * id + 0.5f, 0, 31);
        out[offsetof(block_q5_1, qs) + j] = (uint8_t)((q0 & 15) | (q1 & 15) << 4);
        qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + 16);
    }
    for (int k = 0; k < 4; k++) out[offsetof(block_q5_1, qh) + k] = (uint8_t)(qh >> (8 * k));
}

/* Squared error of x ~= s*q + a for the codes q that the grid step 1/iscale
 * from `lo` gives; also returns the least-squares (s, a) for those codes,
 * with a <= 0 (K-quants store the min as a non-negative offset) and s >= 0.
 * Returns INFINITY for a candidate without a valid fit. */
static float affine_candidate(const float *x, int n, int nmax, float lo, float iscale, float *s_out, float *a_out) {
    float sq = 0, sqq = 0, sx = 0, sqx = 0;
    int q[32];
    for (int i = 0; i < n; i++) {
        q[i] = round_clamp(iscale * (x[i] - lo), 0, nmax);
        sq += (float)q[i];
        sqq += (float)(q[i] * q[i]);
        sx += x[i];
        sqx += (float)q[i] * x[i];
    }
    const float det = (float)n * sqq - sq * sq;
    if (!(det > 0.0f)) return INFINITY; /* every code equal: nothing to fit */
    float s = ((float)n * sqx - sq * sx) / det, a = (sqq * sx - sq * sqx) / det;
    if (a > 0.0f) { a = 0.0f; s = sqx / sqq; }
    if (!(s >= 0.0f)) return INFINITY;
    float err = 0;
    for (int i = 0; i < n; i++) {
        const float e = s * (float)q[i] + a - x[i];
        err += e * e;
    }
    *s_out = s;
    *a_out = a;
    return err;
}

/* Chooses scale s >= 0 and offset a <= 0 for one group of n values (x ~=
 * s*q + a, q in [0, nmax]): the min/max grid and 20 grid steps around it
 * (nmax - 1 .. nmax + 1 levels over the range), each refitted by least
 * squares for its codes; the one with the lowest squared error wins. */
static void fit_affine(const float *x, int n, int nmax, float *s_out, float *a_out) {
    float lo = 0.0f, hi = x[0];
    for (int i = 0; i < n; i++) {
        if (x[i] < lo) lo = x[i];
        if (x[i] > hi) hi = x[i];
    }
    *a_out = lo;
    *s_out = hi > lo ? (hi - lo) / (float)nmax : 0.0f;
    if (!(hi > lo)) return;
    float best = 0;
    for (int i = 0; i < n; i++) {
        const float e = *s_out * (float)round_clamp((x[i] - lo) / *s_out, 0, nmax) + lo - x[i];
        best += e * e;
    }
    for (int k = -10; k <= 10; k++) {
        float s = 0.0f, a = 0.0f;
        const float err = affine_candidate(x, n, nmax, lo, ((float)nmax + 0.1f * (float)k) / (hi - lo), &s, &a);
        if (err < best) { best = err; *s_out = s; *a_out = a; }
    }
}

/* Q4_K / Q5_K: per group of 32 a scale and a min (fit_affine), quantized to
 * 6 bits against d = max scale / 63 and dmin = max min / 63. */
static void quant_k_affine(const float *x, uint8_t *out, int nbits) {
    const int nmax = (1 << nbits) - 1, five = nbits == 5;
    float s[8], m[8], smax = 0, mmax = 0;
    for (int g = 0; g < 8; g++) {
        float a = 0.0f;
        fit_affine(x + 32 * g, 32, nmax, &s[g], &a);
        m[g] = -a;
        if (s[g] > smax) smax = s[g];
        if (m[g] > mmax) mmax = m[g];
    }
    const uint16_t dh = f32_to_fp16(smax / 63.0f), mh = f32_to_fp16(mmax / 63.0f);
    const float d = fp16_to_f32(dh), dmin = fp16_to_f32(mh);
    uint8_t *sc = out + (five ? offsetof(block_q5_K, scales) : offsetof(block_q4_K, scales));
    uint8_t *qs = out + (five ? offsetof(block_q5_K, qs) : offsetof(block_q4_K, qs));
    uint8_t *qh = out + offsetof(block_q5_K, qh);
    memset(out, 0, five ? sizeof(block_q5_K) : sizeof(block_q4_K));
    st16(out, dh);
    st16(out + 2, mh);
    int ls[8], lm[8];
    for (int g = 0; g < 8; g++) {
        /* a group with any spread keeps a step: rounding its scale to 0
         * would collapse it onto its min */
        ls[g] = d > 0.0f ? round_clamp(s[g] / d, s[g] > 0.0f ? 1 : 0, 63) : 0;
        lm[g] = dmin > 0.0f ? round_clamp(m[g] / dmin, 0, 63) : 0;
        /* the packing dtype_k4_scale_min undoes */
        if (g < 4) {
            sc[g] = (uint8_t)ls[g];
            sc[g + 4] = (uint8_t)lm[g];
        } else {
            sc[g + 4] = (uint8_t)((ls[g] & 15) | (lm[g] & 15) << 4);
            sc[g - 4] |= (uint8_t)((ls[g] >> 4) << 6);
            sc[g] |= (uint8_t)((lm[g] >> 4) << 6);
        }
    }
    for (int g = 0; g < 8; g++) {
        const float dl = d * (float)ls[g], ml = dmin * (float)lm[g];
        for (int l = 0; l < 32; l++) {
            const int q = dl > 0.0f ? round_clamp((x[32 * g + l] + ml) / dl, 0, nmax) : 0;
            qs[32 * (g / 2) + l] |= (uint8_t)((q & 15) << (4 * (g % 2)));
            if (five) qh[l] |= (uint8_t)(((q >> 4) & 1) << g);
        }
    }
}

void quant_q4_k_block(const float *x, uint8_t *out) { quant_k_affine(x, out, 4); }
void quant_q5_k_block(const float *x, uint8_t *out) { quant_k_affine(x, out, 5); }

/* Symmetric scale for 16 values, q in [-32, 31]: candidates map the value of
 * largest magnitude to about -32 (the side with the extra level), each
 * refitted by least squares (s = sum qx / sum qq); lowest squared error wins. */
static float fit_symmetric16(const float *x) {
    float amax = 0, max = 0;
    for (int i = 0; i < 16; i++)
        if (fabsf(x[i]) > amax) { amax = fabsf(x[i]); max = x[i]; }
    if (amax == 0.0f) return 0.0f;
    float best = INFINITY, best_s = -max / 32.0f;
    for (int k = -9; k <= 9; k++) {
        const float iscale = -(32.0f + 0.1f * (float)k) / max;
        float sqx = 0, sqq = 0;
        int q[16];
        for (int i = 0; i < 16; i++) {
            q[i] = round_clamp(iscale * x[i], -32, 31);
            sqx += (float)q[i] * x[i];
            sqq += (float)(q[i] * q[i]);
        }
        if (!(sqq > 0.0f)) continue;
        const float s = sqx / sqq;
        float err = 0;
        for (int i = 0; i < 16; i++) {
            const float e = s * (float)q[i] - x[i];
            err += e * e;
        }
        if (err < best) { best = err; best_s = s; }
    }
    return best_s;
}

/* Q6_K: 16 signed group scales, int8 against d = -(largest-magnitude scale)/128
 * (so that scale becomes exactly -128); q = round(x / (d*sc)) + 32. */
void quant_q6_k_block(const float *x, uint8_t *out) {
    float s[16], smax = 0, samax = 0;
    for (int i = 0; i < 16; i++) {
        s[i] = fit_symmetric16(x + 16 * i);
        if (fabsf(s[i]) > samax) { samax = fabsf(s[i]); smax = s[i]; }
    }
    memset(out, 0, sizeof(block_q6_K));
    const uint16_t dh = f32_to_fp16(smax / -128.0f);
    const float d = fp16_to_f32(dh);
    uint8_t *ql = out + offsetof(block_q6_K, ql), *qh = out + offsetof(block_q6_K, qh);
    int8_t *sc = (int8_t *)(out + offsetof(block_q6_K, scales));
    st16(out + offsetof(block_q6_K, d), dh);
    for (int i = 0; i < 16; i++) sc[i] = (int8_t)(d != 0.0f ? round_clamp(s[i] / d, -128, 127) : 0);
    for (int e = 0; e < INGOT_KBLOCK; e++) {
        const float dl = d * (float)sc[e / 16];
        const int q = (dl != 0.0f ? round_clamp(x[e] / dl, -32, 31) : 0) + 32;
        const int g = e / 32, l = e % 32;
        ql[64 * (g / 4) + 32 * (g % 2) + l] |= (uint8_t)((q & 15) << (4 * ((g % 4) / 2)));
        qh[32 * (g / 4) + l] |= (uint8_t)((q >> 4) << (2 * (g % 4)));
    }
}

/* ---- IQ4_NL / IQ4_XS: 4-bit indices into the non-linear table dtype_iq4_values ----
 *
 * For a group of 32 the scale d is chosen to minimize sum w (x - d v[q])^2
 * with w = x^2 (the larger values matter more, as in llama.cpp's quantizer
 * without an importance matrix): the codes are the table entries nearest to
 * x / d for a few trial scales around max / v[0] (the value of largest
 * magnitude on the table's widest entry, either sign), and for each trial
 * set of codes the least-squares d = sum w x v / sum w v^2; the set with the
 * smallest error wins. */

/* Index of the table value nearest to v (the table is sorted). */
static int iq4_nearest(float v) {
    if (!(v > (float)dtype_iq4_values[0])) return 0;
    if (v >= (float)dtype_iq4_values[15]) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (v < (float)dtype_iq4_values[mid]) hi = mid;
        else lo = mid;
    }
    return v - (float)dtype_iq4_values[lo] < (float)dtype_iq4_values[hi] - v ? lo : hi;
}

/* Codes of the 32 values of x for scale d (0: all the code of 0's nearest). */
static void iq4_codes(const float *x, float d, uint8_t *q) {
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < 32; j++) q[j] = (uint8_t)iq4_nearest(id * x[j]);
}

/* The best scale of one group of 32 (codes in q); 0 for an all-zero group. */
static float iq4_group_scale(const float *x, uint8_t *q) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; j++)
        if (fabsf(x[j]) > amax) amax = fabsf(x[j]), max = x[j];
    if (!(amax > 1e-15f)) {
        iq4_codes(x, 0.0f, q);
        return 0.0f;
    }
    float best_d = 0.0f, best = -1.0f;
    uint8_t trial[32];
    for (int t = -7; t <= 7; t++) {
        /* d such that max lands on table value v[0] + t (the widest entry, nudged inward or out) */
        iq4_codes(x, max / (float)(dtype_iq4_values[0] + t), trial);
        double sxv = 0, svv = 0;
        for (int j = 0; j < 32; j++) {
            const double w = (double)x[j] * x[j], v = dtype_iq4_values[trial[j]];
            sxv += w * x[j] * v, svv += w * v * v;
        }
        /* error = sum w x^2 - sxv^2 / svv at the least-squares d: maximize sxv^2 / svv */
        if (svv > 0 && sxv * sxv / svv > best) {
            best = (float)(sxv * sxv / svv), best_d = (float)(sxv / svv);
            memcpy(q, trial, 32);
        }
    }
    return best_d;
}

/* 16 bytes of nibbles: element j in the low nibble of byte j, element j + 16 in its high nibble. */
static void iq4_pack(const uint8_t *q, uint8_t *qs) {
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(q[j] | q[j + 16] << 4);
}

void quant_iq4_nl_block(const float *x, uint8_t *out) {
    uint8_t q[32];
    const float d = iq4_group_scale(x, q);
    const uint16_t dh = f32_to_fp16(d);
    st16(out, dh);
    iq4_codes(x, fp16_to_f32(dh), q); /* the codes of the scale actually stored */
    iq4_pack(q, out + offsetof(block_iq4_nl, qs));
}

/* IQ4_XS: each group's best scale as above, then stored as d * s with one f16
 * d per super-block and a 6-bit s - 32 in [-32, 31] per group (d = the
 * largest group scale / -32, so that group takes s = -32 exactly), and the
 * codes recomputed with each group's stored scale. */
void quant_iq4_xs_block(const float *x, uint8_t *out) {
    uint8_t q[32];
    float scale[8], amax = 0.0f, max = 0.0f;
    for (int g = 0; g < 8; g++) {
        scale[g] = iq4_group_scale(x + 32 * g, q);
        if (fabsf(scale[g]) > amax) amax = fabsf(scale[g]), max = scale[g];
    }
    const uint16_t dh = f32_to_fp16(-max / 32.0f);
    const float d = fp16_to_f32(dh), id = d != 0.0f ? 1.0f / d : 0.0f;
    uint16_t scales_h = 0;
    uint8_t *scales_l = out + offsetof(block_iq4_xs, scales_l);
    memset(scales_l, 0, 4);
    for (int g = 0; g < 8; g++) {
        const int s = round_clamp(id * scale[g], -32, 31) + 32;
        scales_l[g / 2] |= (uint8_t)((s & 15) << 4 * (g % 2));
        scales_h |= (uint16_t)((s >> 4) << 2 * g);
        iq4_codes(x + 32 * g, d * (float)(s - 32), q);
        iq4_pack(q, out + offsetof(block_iq4_xs, qs) + 16 * g);
    }
    st16(out, dh);
    st16(out + offsetof(block_iq4_xs, scales_h), scales_h);
}

/* ---- Q2_K / Q3_K: 16 groups of 16 per super-block, 2- and 3-bit codes ----
 *
 * With so few levels the scale of each group of 16 matters most, and it is
 * stored in only 4 (Q2_K) or 6 (Q3_K) bits against the super-block's f16
 * scale. So: each group's scale (and Q2_K's min) is first fitted in f32 by a
 * least-squares search over candidate grids, then the super-block
 * scale is set from the largest, and each group takes, of the stored scale
 * codes next to its rounded one, the one whose recomputed codes give the
 * smallest error. Q3_K weighs each value's squared error by |x| (the larger
 * weights matter more to a matmul's output; llama.cpp's reference uses x^2);
 * Q2_K, with only 4 levels, leaves the error unweighted: on random normal
 * and heavy-tailed matrices that is 0.89x and 0.82x the RMSE of llama.cpp's
 * |x|-weighted reference, and on the test Llama it moved the logits less
 * than |x| or x^2 + mean(x^2) weights (test_kquants). */

/* f16 of a non-negative scale, saturated at the largest finite half (65504)
 * so that a range too wide for the format clips its extremes instead of
 * storing an infinite scale. */
static uint16_t half_scale(float v) { return v < 65504.0f ? f32_to_fp16(v) : 0x7bff; }

/* Nearest integer in [lo, hi] (ties to even: rintf compiles to one
 * instruction, where roundf is a library call; a tie's code is a free
 * choice): the loops over a group run ~60 times per element. NaN goes to lo. */
static inline int nearest_clamp(float v, int lo, int hi) {
    if (!(v >= (float)lo)) return lo;
    if (v >= (float)hi) return hi;
    return (int)rintf(v);
}

/* Least-squares (s, a) of x ~= s*q + a for the codes of the grid from lo
 * with step 1/iscale (q in [0, 3]), a <= 0, s >= 0, and the squared error
 * (INFINITY without a valid fit). */
static float q2_candidate(const float *x, float lo, float iscale, float *s_out, float *a_out) {
    float sq = 0, sqq = 0, sx = 0, sqx = 0;
    for (int i = 0; i < 16; i++) {
        const float q = (float)nearest_clamp(iscale * (x[i] - lo), 0, 3);
        sq += q, sqq += q * q, sx += x[i], sqx += q * x[i];
    }
    const float det = 16.0f * sqq - sq * sq;
    if (!(det > 0.0f)) return INFINITY;
    float s = (16.0f * sqx - sq * sx) / det, a = (sqq * sx - sq * sqx) / det;
    if (a > 0.0f) a = 0.0f, s = sqx / sqq;
    if (!(s >= 0.0f)) return INFINITY;
    const float is = s > 0.0f ? 1.0f / s : 0.0f;
    float err = 0;
    for (int i = 0; i < 16; i++) {
        const float e = s * (float)nearest_clamp((x[i] - a) * is, 0, 3) + a - x[i];
        err += e * e;
    }
    *s_out = s, *a_out = a;
    return err;
}

/* Q2_K's fit of one group of 16 (x ~= s*q + a, q in [0, 3]), least squared
 * error: the min/max grid (from lo = min(0, min), 3 steps to the max), and
 * trial grids of 2.1 .. 3.9 steps over the range in steps of 0.3, each
 * refitted by least squares and its error taken at its own codes. (Steps of
 * 0.1 from 2 to 4, as fit_affine tries for Q4_K, found 0.2% lower error in
 * twice the time.) */
static void fit_q2_group(const float *x, float *s_out, float *a_out) {
    float lo = 0.0f, hi = x[0];
    for (int i = 0; i < 16; i++) lo = fminf(lo, x[i]), hi = fmaxf(hi, x[i]);
    *a_out = lo;
    *s_out = hi > lo ? (hi - lo) / 3.0f : 0.0f;
    if (!(hi > lo)) return;
    float best = 0;
    const float is = 1.0f / *s_out;
    for (int i = 0; i < 16; i++) {
        const float e = *s_out * (float)nearest_clamp((x[i] - lo) * is, 0, 3) + lo - x[i];
        best += e * e;
    }
    for (int k = -3; k <= 3; k++) {
        float s = 0.0f, a = 0.0f;
        const float err = q2_candidate(x, lo, (3.0f + 0.3f * (float)k) / (hi - lo), &s, &a);
        if (err < best) best = err, *s_out = s, *a_out = a;
    }
}

/* Q2_K: x ~= d*ls*q - dmin*lm with q in [0, 3] and ls, lm in [0, 15]. */
void quant_q2_k_block(const float *x, uint8_t *out) {
    float s[16], m[16], smax = 0.0f, mmax = 0.0f;
    for (int g = 0; g < 16; g++) {
        float a = 0.0f;
        fit_q2_group(x + 16 * g, &s[g], &a);
        m[g] = -a;
        if (s[g] > smax) smax = s[g];
        if (m[g] > mmax) mmax = m[g];
    }
    const uint16_t dh = half_scale(smax / 15.0f), mh = half_scale(mmax / 15.0f);
    const float d = fp16_to_f32(dh), dmin = fp16_to_f32(mh);
    memset(out, 0, sizeof(block_q2_K));
    uint8_t *sc = out + offsetof(block_q2_K, scales), *qs = out + offsetof(block_q2_K, qs);
    st16(out + offsetof(block_q2_K, d), dh);
    st16(out + offsetof(block_q2_K, dmin), mh);
    for (int g = 0; g < 16; g++) {
        const float *xg = x + 16 * g;
        const int ls0 = d > 0.0f ? round_clamp(s[g] / d, 0, 15) : 0, lm0 = dmin > 0.0f ? round_clamp(m[g] / dmin, 0, 15) : 0;
        int best_ls = ls0, best_lm = lm0;
        float best = INFINITY;
        /* the rounded pair and its 8 neighbours; the rounded pair first, so that it wins ties */
        static const int8_t step[9][2] = {{0, 0}, {-1, -1}, {-1, 0}, {-1, 1}, {0, -1}, {0, 1}, {1, -1}, {1, 0}, {1, 1}};
        for (int t = 0; t < 9; t++) {
            const int ls = ls0 + step[t][0], lm = lm0 + step[t][1];
            if (ls < 0 || ls > 15 || lm < 0 || lm > 15) continue;
            const float dl = d * (float)ls, ml = dmin * (float)lm, idl = dl > 0.0f ? 1.0f / dl : 0.0f;
            float err = 0.0f;
            for (int l = 0; l < 16; l++) {
                const int q = nearest_clamp((xg[l] + ml) * idl, 0, 3);
                const float e = dl * (float)q - ml - xg[l];
                err += e * e;
            }
            if (err < best) best = err, best_ls = ls, best_lm = lm;
        }
        sc[g] = (uint8_t)(best_ls | best_lm << 4);
    }
    for (int e = 0; e < INGOT_KBLOCK; e++) {
        const float dl = d * (float)(sc[e / 16] & 15), ml = dmin * (float)(sc[e / 16] >> 4);
        const int q = nearest_clamp((x[e] + ml) * (dl > 0.0f ? 1.0f / dl : 0.0f), 0, 3);
        const int g = e / 32, l = e % 32; /* the packing dtype.c's dequantizer undoes */
        qs[32 * (g / 4) + l] |= (uint8_t)(q << (2 * (g % 4)));
    }
}

/* Weighted squared error of 16 values at scale s with codes q = round(x/s) in
 * [-4, 3] (s = 0: every code 0), and the codes. */
static float q3_group_error(const float *x, const float *w, float s, int *q) {
    const float is = s != 0.0f ? 1.0f / s : 0.0f;
    float err = 0.0f;
    for (int l = 0; l < 16; l++) {
        q[l] = nearest_clamp(x[l] * is, -4, 3);
        const float e = s * (float)q[l] - x[l];
        err += w[l] * e * e;
    }
    return err;
}

/* Signed scale of one group of 16 for codes in [-4, 3] minimizing the
 * w-weighted squared error: trial grids put the value of largest magnitude
 * near code -4 (the side with the extra level), 2.8 to 5.2 levels out in
 * steps of 0.3 (finer steps, or trials on the +3 side too, found the same
 * error within 0.1%: the refinement below does the rest, at a quarter of
 * the time); each trial's codes get their least-squares scale
 * (sum w q x / sum w q^2), at which the error is sum w x^2 - (sum w q x)^2 /
 * sum w q^2: the trial maximizing the last term wins, and its scale is then
 * refined by recomputing the codes at it while that lowers the error. */
static float fit_q3_group(const float *x, const float *w) {
    float amax = 0.0f, max = 0.0f;
    for (int l = 0; l < 16; l++)
        if (fabsf(x[l]) > amax) amax = fabsf(x[l]), max = x[l];
    if (!(amax > 0.0f)) return 0.0f;
    float best_s = -max / 4.0f, best_gain = -1.0f;
    int q[16];
    for (int k = -4; k <= 4; k++) {
        const float iscale = -(4.0f + 0.3f * (float)k) / max;
        float sqx = 0.0f, sqq = 0.0f;
        for (int l = 0; l < 16; l++) {
            const float c = (float)nearest_clamp(iscale * x[l], -4, 3);
            sqx += w[l] * c * x[l];
            sqq += w[l] * c * c;
        }
        if (sqq > 0.0f && sqx * sqx > best_gain * sqq) best_gain = sqx * sqx / sqq, best_s = sqx / sqq;
    }
    float best = q3_group_error(x, w, best_s, q);
    for (int it = 0; it < 4; it++) {
        q3_group_error(x, w, best_s, q);
        float sqx = 0.0f, sqq = 0.0f;
        for (int l = 0; l < 16; l++) sqx += w[l] * (float)q[l] * x[l], sqq += w[l] * (float)(q[l] * q[l]);
        if (!(sqq > 0.0f)) break;
        const float s = sqx / sqq, err = q3_group_error(x, w, s, q);
        if (!(err < best)) break;
        best = err, best_s = s;
    }
    return best_s;
}

/* Q3_K: x ~= d*(sc - 32)*q with q in [-4, 3] and a 6-bit sc per group; d =
 * -(the group scale of largest magnitude)/32, so that scale is exactly -32
 * steps of d. */
void quant_q3_k_block(const float *x, uint8_t *out) {
    float w[INGOT_KBLOCK], s[16], samax = 0.0f, smax = 0.0f;
    for (int i = 0; i < INGOT_KBLOCK; i++) w[i] = fabsf(x[i]);
    for (int g = 0; g < 16; g++) {
        s[g] = fit_q3_group(x + 16 * g, w + 16 * g);
        if (fabsf(s[g]) > samax) samax = fabsf(s[g]), smax = s[g];
    }
    const uint16_t dh = (uint16_t)(half_scale(samax / 32.0f) | (smax > 0.0f ? 0x8000 : 0)); /* d = -smax/32 */
    const float d = fp16_to_f32(dh);
    memset(out, 0, sizeof(block_q3_K));
    uint8_t *hm = out + offsetof(block_q3_K, hmask), *qs = out + offsetof(block_q3_K, qs);
    uint8_t *sc = out + offsetof(block_q3_K, scales);
    st16(out + offsetof(block_q3_K, d), dh);
    for (int g = 0; g < 16; g++) {
        const int l0 = d != 0.0f ? nearest_clamp(s[g] / d, -32, 31) : 0;
        int best_l = l0, q[16], best_q[16];
        float best = q3_group_error(x + 16 * g, w + 16 * g, d * (float)l0, best_q);
        for (int l = l0 - 1; l <= l0 + 1; l += 2) {
            if (l < -32 || l > 31) continue;
            const float err = q3_group_error(x + 16 * g, w + 16 * g, d * (float)l, q);
            if (err < best) best = err, best_l = l, memcpy(best_q, q, sizeof q);
        }
        /* the 6-bit sc = l + 32: low nibbles in bytes 0-7 (groups 8-15 in
         * the high halves), the top two bits in bytes 8-11 */
        const int u = best_l + 32;
        sc[g % 8] |= (uint8_t)((u & 15) << (4 * (g / 8)));
        sc[8 + g % 4] |= (uint8_t)((u >> 4) << (2 * (g / 4)));
        for (int l = 0; l < 16; l++) {
            const int e = 16 * g + l, c = best_q[l] + 4, g32 = e / 32, l32 = e % 32;
            qs[32 * (g32 / 4) + l32] |= (uint8_t)((c & 3) << (2 * (g32 % 4)));
            hm[l32] |= (uint8_t)((c >> 2) << g32);
        }
    }
}
