/* kc_matmul.h — tiled matmul kernels Y[t][r] (+)= W[r]·X[t] (+ bias) for f32/f16/bf16/Q8_0/Q4_0/Q4_1 weights, and row dequantization (every type). */
#ifndef INGOT_KC_MATMUL_H
#define INGOT_KC_MATMUL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "dtype.h"
#include "kc_half.h"
#include "kc_quant.h"

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#elif defined(__ARM_NEON)
#include "kc_neon.h"
#elif defined(__wasm_simd128__)
#include "kc_wasm.h"
#endif

/* Conventions shared by every kernel:
 *   W  row-major [OUT][IN] (IN elements per row; for Q types IN/32 blocks),
 *   X  row t at X + t*ldx (floats, or kc_q8 blocks for Q types),
 *   Y  element (t, r) at Y[t*ldy + r]; only rows r0 <= r < r1 are written.
 *
 * Tiling. The loops are: token chunks of KC_*TC tokens (their activations
 * stay in L2), then row tiles of KC_*RB rows, then token tiles of KC_*TB
 * tokens. A microkernel computes the KC_*RB x KC_*TB outputs of one tile in
 * registers, walking IN once: every weight vector it loads is used for
 * KC_*TB tokens and every activation vector for KC_*RB rows. The weight rows
 * of a row tile (a few KB) stay in L1 while the token tiles of a chunk pass
 * over them, so each weight byte comes from memory once per token chunk;
 * with T = 1 (decode) the kernel is a pure stream over W, KC_*RB rows at a
 * time (independent accumulators hide the FMA latency). Rows/tokens that do
 * not fill a tile use the same microkernel with 1 row or 1 token, so there
 * are only four specializations per kernel and no masking.
 *
 * The microkernels are always_inline with the tile size and the weight type
 * as constant arguments: once the caller passes a literal IN, every loop
 * bound is a constant and the tile loops unroll into straight-line code. */

#if defined(__GNUC__) || defined(__clang__)
#define KC_INLINE static inline __attribute__((always_inline))
#else
#define KC_INLINE static inline
#endif
#if defined(__clang__)
#define KC_UNROLL _Pragma("unroll")
#elif defined(__GNUC__)
#define KC_UNROLL _Pragma("GCC unroll 16")
#else
#define KC_UNROLL
#endif

/* KC_WQ4_ZP: Q4_Z (GPTQ/AWQ 4-bit) in the f32-activation kernels below: its 20-byte blocks have
 * Q4_1's layout with an integer zero point z where Q4_1 has its f16 min, so it takes Q4_1's paths
 * with c = -z*d (exact) in place of m. */
enum { KC_WF32 = 0, KC_WF16 = 1, KC_WBF16 = 2, KC_WQ8_0 = 3, KC_WQ4_0 = 4, KC_WQ4_1 = 5, KC_WQ4_ZP = 6 };

/* ------------------------------------------------------------------------
 * Float weights (f32 / f16 / bf16) with f32 activations, FMA in f32.
 * kc_vf is one SIMD register of floats (or a plain float without SIMD);
 * kc__ldw widens KC_VW weights of any float type to it. */
#if defined(__AVX512F__)
#define KC_VW 16
#define KC_FRB 4
#define KC_FTB 4
typedef __m512 kc_vf;
KC_INLINE kc_vf kc__vzero(void) { return _mm512_setzero_ps(); }
KC_INLINE kc_vf kc__ldx(const float *p) { return _mm512_loadu_ps(p); }
KC_INLINE kc_vf kc__vfma(kc_vf a, kc_vf b, kc_vf c) { return _mm512_fmadd_ps(a, b, c); }
KC_INLINE float kc__vsum(kc_vf a) {
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)));
}
KC_INLINE kc_vf kc__ldw(const void *W, int wt, size_t i) {
    if (wt == KC_WF32) return _mm512_loadu_ps((const float *)W + i);
    __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)((const uint16_t *)W + i));
    if (wt == KC_WF16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
#elif defined(__AVX2__) && defined(__FMA__)
#define KC_VW 8
#define KC_FRB 4
#define KC_FTB 2
typedef __m256 kc_vf;
KC_INLINE kc_vf kc__vzero(void) { return _mm256_setzero_ps(); }
KC_INLINE kc_vf kc__ldx(const float *p) { return _mm256_loadu_ps(p); }
KC_INLINE kc_vf kc__vfma(kc_vf a, kc_vf b, kc_vf c) { return _mm256_fmadd_ps(a, b, c); }
KC_INLINE float kc__vsum(kc_vf a) {
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)));
}
KC_INLINE kc_vf kc__ldw(const void *W, int wt, size_t i) {
    if (wt == KC_WF32) return _mm256_loadu_ps((const float *)W + i);
    const uint16_t *p = (const uint16_t *)W + i;
    if (wt == KC_WF16) {
#if defined(__F16C__)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
#else
        float f[8];
        for (int k = 0; k < 8; k++) f[k] = kc_fp16_to_f32(p[k]);
        return _mm256_loadu_ps(f);
#endif
    }
    __m128i h = _mm_loadu_si128((const __m128i *)(const void *)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
#elif defined(__ARM_NEON)
#define KC_VW 4
#define KC_FRB 4
#define KC_FTB 4 /* 16 accumulators, 4 weight vectors, 4 activation vectors: of 32 registers */
typedef float32x4_t kc_vf;
KC_INLINE kc_vf kc__vzero(void) { return vdupq_n_f32(0.0f); }
KC_INLINE kc_vf kc__ldx(const float *p) { return vld1q_f32(p); }
KC_INLINE kc_vf kc__vfma(kc_vf a, kc_vf b, kc_vf c) { return vfmaq_f32(c, a, b); }
KC_INLINE float kc__vsum(kc_vf a) { return vaddvq_f32(a); }
KC_INLINE kc_vf kc__ldw(const void *W, int wt, size_t i) {
    if (wt == KC_WF32) return vld1q_f32((const float *)W + i);
    const uint16x4_t h = vld1_u16((const uint16_t *)W + i);
    if (wt == KC_WF16) return vcvt_f32_f16(vreinterpret_f16_u16(h));
    return vreinterpretq_f32_u32(vshll_n_u16(h, 16));
}
#elif defined(__wasm_simd128__)
/* SIMD128 (kc_wasm.h): no fused multiply-add, so a multiply and an add */
#define KC_VW 4
#define KC_FRB 4
#define KC_FTB 2
typedef v128_t kc_vf;
KC_INLINE kc_vf kc__vzero(void) { return wasm_f32x4_splat(0.0f); }
KC_INLINE kc_vf kc__ldx(const float *p) { return wasm_v128_load(p); }
KC_INLINE kc_vf kc__vfma(kc_vf a, kc_vf b, kc_vf c) { return wasm_f32x4_add(wasm_f32x4_mul(a, b), c); }
KC_INLINE float kc__vsum(kc_vf a) { return kc_wasm_sum4(a); }
KC_INLINE kc_vf kc__ldw(const void *W, int wt, size_t i) {
    if (wt == KC_WF32) return wasm_v128_load((const float *)W + i);
    if (wt == KC_WF16) return kc_wasm_f16x4((const uint16_t *)W + i);
    return wasm_i32x4_shl(wasm_u32x4_extend_low_u16x8(wasm_v128_load64_zero((const uint16_t *)W + i)), 16);
}
#else
#define KC_VW 1
#define KC_FRB 4
#define KC_FTB 2
typedef float kc_vf;
KC_INLINE kc_vf kc__vzero(void) { return 0.0f; }
KC_INLINE kc_vf kc__ldx(const float *p) { return *p; }
KC_INLINE kc_vf kc__vfma(kc_vf a, kc_vf b, kc_vf c) { return a * b + c; }
KC_INLINE float kc__vsum(kc_vf a) { return a; }
KC_INLINE kc_vf kc__ldw(const void *W, int wt, size_t i) {
    if (wt == KC_WF32) return ((const float *)W)[i];
    if (wt == KC_WF16) return kc_fp16_to_f32(((const uint16_t *)W)[i]);
    return kc_bf16_to_f32(((const uint16_t *)W)[i]);
}
#endif
#define KC_FTC 32 /* token chunk: 32 f32 rows of X (<= 196 KB at IN = 1536) stay in L2 */

/* Scalar weight load for the IN % KC_VW tail. */
KC_INLINE float kc__ldw1(const void *W, int wt, size_t i) {
    if (wt == KC_WF32) return ((const float *)W)[i];
    if (wt == KC_WF16) return kc_fp16_to_f32(((const uint16_t *)W)[i]);
    return kc_bf16_to_f32(((const uint16_t *)W)[i]);
}

KC_INLINE void kc__store(float *Y, int ldy, int r, int t, int NR, int NT, float out[][KC_FTB > 4 ? KC_FTB : 4],
                         const float *bias, int accumulate) {
    KC_UNROLL for (int j = 0; j < NT; j++) {
        float *y = Y + (size_t)(t + j) * (size_t)ldy + r;
        KC_UNROLL for (int i = 0; i < NR; i++) {
            float v = out[i][j];
            if (bias) v += bias[r + i];
            if (accumulate) v += y[i];
            y[i] = v;
        }
    }
}

KC_INLINE size_t kc__wsize(int wt) { return wt == KC_WF32 ? 4 : 2; }
/* Software prefetch in each of the tile's rows (the KC_FRB rows are
 * separate streams, each IN elements long): into L1 KC_MMF_PF bytes ahead,
 * into L2 KC_MMF_PF_L2 ahead. The hardware prefetcher alone left
 * SmolLM2-135M's F16 decode at 42 / 79 tokens/s on 1 / 2 threads; the L1
 * prefetch took it to 53 / 100 (512, 1024 and 2048 bytes ahead alike), the
 * L2 one to 66 / 124 (2, 4, 8 and 16 KB: 56, 62, 66, 67 tokens/s at 1
 * thread; alternated runs). */
#define KC_MMF_PF 512
#define KC_MMF_PF_L2 8192
/* NR x NT outputs (NR <= KC_FRB, NT <= KC_FTB) at rows r.., tokens t.. */
KC_INLINE void kc__mmf_tile(const void *W, int wt, const float *X, int ldx, float *Y, int ldy, int IN, int r,
                            int t, int NR, int NT, const float *bias, int accumulate) {
    kc_vf acc[KC_FRB][KC_FTB];
    KC_UNROLL for (int i = 0; i < NR; i++) KC_UNROLL for (int j = 0; j < NT; j++) acc[i][j] = kc__vzero();
    const float *x0 = X + (size_t)t * (size_t)ldx;
    size_t w0 = (size_t)r * (size_t)IN;
    int k = 0;
    for (; k + KC_VW <= IN; k += KC_VW) {
        kc_vf xv[KC_FTB];
        KC_UNROLL for (int j = 0; j < NT; j++) xv[j] = kc__ldx(x0 + (size_t)j * (size_t)ldx + k);
        KC_UNROLL for (int i = 0; i < NR; i++) {
            if (((size_t)k * kc__wsize(wt)) % 64 == 0) { /* once per cache line of the row */
                const char *at = (const char *)W + (w0 + (size_t)i * (size_t)IN + (size_t)k) * kc__wsize(wt);
                __builtin_prefetch(at + KC_MMF_PF, 0, 3);
                __builtin_prefetch(at + KC_MMF_PF_L2, 0, 2);
            }
            kc_vf w = kc__ldw(W, wt, w0 + (size_t)i * (size_t)IN + (size_t)k);
            KC_UNROLL for (int j = 0; j < NT; j++) acc[i][j] = kc__vfma(w, xv[j], acc[i][j]);
        }
    }
    float out[KC_FRB][KC_FTB > 4 ? KC_FTB : 4];
    KC_UNROLL for (int i = 0; i < NR; i++) KC_UNROLL for (int j = 0; j < NT; j++) out[i][j] = kc__vsum(acc[i][j]);
    for (; k < IN; k++) { /* only when IN is not a multiple of the vector width */
        KC_UNROLL for (int i = 0; i < NR; i++) {
            float w = kc__ldw1(W, wt, w0 + (size_t)i * (size_t)IN + (size_t)k);
            KC_UNROLL for (int j = 0; j < NT; j++) out[i][j] += w * x0[(size_t)j * (size_t)ldx + k];
        }
    }
    kc__store(Y, ldy, r, t, NR, NT, out, bias, accumulate);
}

KC_INLINE void kc__mmf(const void *W, int wt, const float *X, int ldx, float *Y, int ldy, int T, int IN, int r0,
                       int r1, const float *bias, int accumulate) {
    for (int t0 = 0; t0 < T; t0 += KC_FTC) {
        int t1 = T - t0 > KC_FTC ? t0 + KC_FTC : T;
        int r = r0;
        for (; r + KC_FRB <= r1; r += KC_FRB) {
            int t = t0;
            for (; t + KC_FTB <= t1; t += KC_FTB)
                kc__mmf_tile(W, wt, X, ldx, Y, ldy, IN, r, t, KC_FRB, KC_FTB, bias, accumulate);
            for (; t < t1; t++) kc__mmf_tile(W, wt, X, ldx, Y, ldy, IN, r, t, KC_FRB, 1, bias, accumulate);
        }
        for (; r < r1; r++) {
            int t = t0;
            for (; t + KC_FTB <= t1; t += KC_FTB)
                kc__mmf_tile(W, wt, X, ldx, Y, ldy, IN, r, t, 1, KC_FTB, bias, accumulate);
            for (; t < t1; t++) kc__mmf_tile(W, wt, X, ldx, Y, ldy, IN, r, t, 1, 1, bias, accumulate);
        }
    }
}

static inline void kc_mm_f32(const float *W, const float *X, int ldx, float *Y, int ldy, int T, int IN, int r0,
                             int r1, const float *bias, int accumulate) {
    kc__mmf(W, KC_WF32, X, ldx, Y, ldy, T, IN, r0, r1, bias, accumulate);
}
static inline void kc_mm_f16(const uint16_t *W, const float *X, int ldx, float *Y, int ldy, int T, int IN, int r0,
                             int r1, const float *bias, int accumulate) {
    kc__mmf(W, KC_WF16, X, ldx, Y, ldy, T, IN, r0, r1, bias, accumulate);
}
static inline void kc_mm_bf16(const uint16_t *W, const float *X, int ldx, float *Y, int ldy, int T, int IN, int r0,
                              int r1, const float *bias, int accumulate) {
    kc__mmf(W, KC_WBF16, X, ldx, Y, ldy, T, IN, r0, r1, bias, accumulate);
}

/* ------------------------------------------------------------------------
 * Quantized weights with kc_q8 activations. Per 32-block and (row, token)
 * pair: an exact integer dot product of the 32 codes, converted to float and
 * scaled by d_w * d_x, accumulated in f32 lanes; Q4_1 adds m_w * s_x.
 *
 * Integer dots use u8 x s8 multiply-adds (VNNI vpdpbusd: 4 products summed
 * into each int32 lane, or AVX2 vpmaddubsw + vpmaddwd), which need one
 * unsigned operand:
 *   Q4_0: the nibbles q in [0,15] are the unsigned side; the -8 offset is
 *         folded into the accumulator's start value nx = -(8 * x summed per
 *         lane), computed once per token block, so sum(q*x) + nx = sum((q-8)x).
 *   Q4_1: the nibbles against x directly; the min term is scalar.
 *   Q8_0: with VNNI, x is made unsigned (x ^ 0x80 = x + 128, computed once
 *         per token block) and the start value is -128*sum(w) (once per row
 *         block); without VNNI (vpmaddubsw saturates at 16 bits) the classic
 *         |w| x sign(x, w) form is used, which never saturates since
 *         |x| <= 127.
 * Nibbles are widened with one 128-bit broadcast load, a 64-bit variable
 * shift of the upper lane by 4 and a mask: the lower 16 bytes become
 * elements 0..15 (low nibbles), the upper 16 bytes elements 16..31. */
#define KC_QTC 64 /* token chunk: 64 kc_q8 rows (<= 120 KB at IN = 1536) stay in L2 */
#if defined(__AVX2__)
#if defined(__AVX512F__)
#define KC_QRB 4 /* 32 vector registers: 12 accumulators + operands */
#define KC_QTB 3
#else
#define KC_QRB 4
#define KC_QTB 2
#endif

/* acc + sum over each 4-byte group of u[i]*s[i] (u unsigned, s signed). */
KC_INLINE __m256i kc__dot(__m256i acc, __m256i u, __m256i s) {
#if defined(__AVXVNNI__)
    return _mm256_dpbusd_avx_epi32(acc, u, s);
#elif defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(acc, u, s);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}
#if defined(__AVXVNNI__) || (defined(__AVX512VNNI__) && defined(__AVX512VL__))
#define KC_HAVE_VNNI 1
#else
#define KC_HAVE_VNNI 0
#endif

KC_INLINE float kc__hsum8(__m256 a) {
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)));
}

/* The 32 weight codes of block b (index into the row-major block array). */
KC_INLINE __m256i kc__wcodes(const void *W, int wt, size_t b) {
    if (wt == KC_WQ8_0) return _mm256_loadu_si256((const __m256i *)(const void *)((const block_q8_0 *)W)[b].qs);
    const uint8_t *qs = wt == KC_WQ4_0 ? ((const block_q4_0 *)W)[b].qs : ((const block_q4_1 *)W)[b].qs;
    __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)qs));
    v = _mm256_srlv_epi64(v, _mm256_setr_epi64x(0, 0, 4, 4));
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
}
#else
#define KC_QRB 4
#define KC_QTB 2
#endif

KC_INLINE float kc__wd(const void *W, int wt, size_t b) {
    uint16_t d = wt == KC_WQ8_0   ? ((const block_q8_0 *)W)[b].d
                 : wt == KC_WQ4_0 ? ((const block_q4_0 *)W)[b].d
                                  : ((const block_q4_1 *)W)[b].d;
    return kc_fp16_to_f32(d);
}

KC_INLINE void kc__mmq_tile(const void *W, int wt, const kc_q8 *X, int ldx, float *Y, int ldy, int IN, int r, int t,
                            int NR, int NT, const float *bias, int accumulate) {
    const int NB = IN / 32;
    const kc_q8 *x0 = X + (size_t)t * (size_t)ldx;
    size_t w0 = (size_t)r * (size_t)NB;
    float out[KC_FRB > 4 ? KC_FRB : 4][KC_FTB > 4 ? KC_FTB : 4];
#if defined(__AVX2__)
    __m256 acc[KC_QRB][KC_QTB];
    float macc[KC_QRB][KC_QTB]; /* Q4_1 min term */
    KC_UNROLL for (int i = 0; i < NR; i++) KC_UNROLL for (int j = 0; j < NT; j++) {
        acc[i][j] = _mm256_setzero_ps();
        macc[i][j] = 0.0f;
    }
    for (int b = 0; b < NB; b++) {
        __m256i xq[KC_QTB], xa[KC_QTB];
        __m256 xd[KC_QTB];
        KC_UNROLL for (int j = 0; j < NT; j++) {
            const kc_q8 *xb = &x0[(size_t)j * (size_t)ldx + (size_t)b];
            xq[j] = _mm256_loadu_si256((const __m256i *)(const void *)xb->qs);
            xd[j] = _mm256_set1_ps(xb->d);
            if (wt == KC_WQ4_0) /* start value: lanes sum to -8 * sum(x) */
                xa[j] = _mm256_sub_epi32(_mm256_setzero_si256(),
                                         kc__dot(_mm256_setzero_si256(), _mm256_set1_epi8(8), xq[j]));
            else if (wt == KC_WQ8_0 && KC_HAVE_VNNI) /* x + 128 as unsigned */
                xa[j] = _mm256_xor_si256(xq[j], _mm256_set1_epi8((char)0x80));
            else
                xa[j] = _mm256_setzero_si256();
        }
        KC_UNROLL for (int i = 0; i < NR; i++) {
            size_t wb = w0 + (size_t)i * (size_t)NB + (size_t)b;
            __m256i wq = kc__wcodes(W, wt, wb);
            __m256 wd = _mm256_set1_ps(kc__wd(W, wt, wb));
            __m256i wa = _mm256_setzero_si256(); /* per-row helper, see above */
            if (wt == KC_WQ8_0) {
                if (KC_HAVE_VNNI)
                    wa = _mm256_sub_epi32(_mm256_setzero_si256(),
                                          kc__dot(_mm256_setzero_si256(), _mm256_set1_epi8((char)0x80), wq));
                else
                    wa = _mm256_sign_epi8(wq, wq); /* |w| */
            }
            KC_UNROLL for (int j = 0; j < NT; j++) {
                __m256i p;
                if (wt == KC_WQ8_0)
                    p = KC_HAVE_VNNI ? kc__dot(wa, xa[j], wq)
                                     : kc__dot(_mm256_setzero_si256(), wa, _mm256_sign_epi8(xq[j], wq));
                else if (wt == KC_WQ4_0)
                    p = kc__dot(xa[j], wq, xq[j]);
                else
                    p = kc__dot(_mm256_setzero_si256(), wq, xq[j]);
                acc[i][j] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(p), xd[j]), wd, acc[i][j]);
            }
        }
    }
    /* Q4_1 min term sum_b m_w[b] * s_x[b]: a second, scalar pass over the
     * tile (in the main loop its 16 scalar accumulators would spill). */
    if (wt == KC_WQ4_1) {
        for (int b = 0; b < NB; b++) {
            float xs[KC_QTB];
            KC_UNROLL for (int j = 0; j < NT; j++) xs[j] = x0[(size_t)j * (size_t)ldx + (size_t)b].s;
            KC_UNROLL for (int i = 0; i < NR; i++) {
                float wm = kc_fp16_to_f32(((const block_q4_1 *)W)[w0 + (size_t)i * (size_t)NB + (size_t)b].m);
                KC_UNROLL for (int j = 0; j < NT; j++) macc[i][j] += wm * xs[j];
            }
        }
    }
    KC_UNROLL for (int i = 0; i < NR; i++) KC_UNROLL for (int j = 0; j < NT; j++)
        out[i][j] = kc__hsum8(acc[i][j]) + macc[i][j];
#else
    KC_UNROLL for (int i = 0; i < NR; i++) KC_UNROLL for (int j = 0; j < NT; j++) out[i][j] = 0.0f;
    for (int b = 0; b < NB; b++) {
        for (int i = 0; i < NR; i++) {
            size_t wb = w0 + (size_t)i * (size_t)NB + (size_t)b;
            float wd = kc__wd(W, wt, wb);
            int8_t wq[32];
            int off = wt == KC_WQ4_0 ? 8 : 0;
            if (wt == KC_WQ8_0) {
                memcpy(wq, ((const block_q8_0 *)W)[wb].qs, 32);
            } else {
                const uint8_t *qs = wt == KC_WQ4_0 ? ((const block_q4_0 *)W)[wb].qs : ((const block_q4_1 *)W)[wb].qs;
                for (int k = 0; k < 16; k++) {
                    wq[k] = (int8_t)((qs[k] & 15) - off);
                    wq[k + 16] = (int8_t)((qs[k] >> 4) - off);
                }
            }
            float wm = wt == KC_WQ4_1 ? kc_fp16_to_f32(((const block_q4_1 *)W)[wb].m) : 0.0f;
            for (int j = 0; j < NT; j++) {
                const kc_q8 *xb = &x0[(size_t)j * (size_t)ldx + (size_t)b];
                int s = 0;
                for (int k = 0; k < 32; k++) s += wq[k] * xb->qs[k];
                out[i][j] += (float)s * (wd * xb->d) + wm * xb->s;
            }
        }
    }
#endif
    KC_UNROLL for (int j = 0; j < NT; j++) {
        float *y = Y + (size_t)(t + j) * (size_t)ldy + r;
        KC_UNROLL for (int i = 0; i < NR; i++) {
            float v = out[i][j];
            if (bias) v += bias[r + i];
            if (accumulate) v += y[i];
            y[i] = v;
        }
    }
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)
/* 512-bit variant: two consecutive 32-blocks per register (lanes 0-7 hold
 * block b, lanes 8-15 block b+1), which halves the dot/convert/scale/FMA
 * work per block; scale vectors are [d_b x8 | d_b+1 x8]. Used when the row
 * has an even number of blocks (576 and 1536 do); same algebra as above.
 * For Q4 the first 32 bytes of the block pair hold both fp16 scales (and
 * Q4_1's mins), so one load + one word permute + one convert gives each
 * scale vector. Q4_1's min term becomes a vector FMA m * (s/8) per lane
 * (8 lanes per block sum back to m * s) instead of a scalar pass. */
#define KC_Q512 1
KC_INLINE __m512 kc__scale2h(uint16_t a, uint16_t b) { /* two fp16 scales */
    __m256i h = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16((short)a)), _mm_set1_epi16((short)b), 1);
    return _mm512_cvtph_ps(h);
}
KC_INLINE __m512 kc__scale2f(float a, float b) {
    return _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(a), _mm512_set1_ps(b));
}
KC_INLINE __m512i kc__join2(const void *a, const void *b) { /* 32 bytes at a, then 32 at b */
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a)),
                              _mm256_loadu_si256((const __m256i *)b), 1);
}
/* Codes of blocks b and b+1. Q4: each 16 nibble bytes are broadcast to a
 * 256-bit half, whose upper 128 bits are shifted right by 4 before masking. */
KC_INLINE __m512i kc__wcodes2(const void *W, int wt, size_t b) {
    if (wt == KC_WQ8_0) return kc__join2(((const block_q8_0 *)W)[b].qs, ((const block_q8_0 *)W)[b + 1].qs);
    const uint8_t *q0 = wt == KC_WQ4_0 ? ((const block_q4_0 *)W)[b].qs : ((const block_q4_1 *)W)[b].qs;
    const uint8_t *q1 = wt == KC_WQ4_0 ? ((const block_q4_0 *)W)[b + 1].qs : ((const block_q4_1 *)W)[b + 1].qs;
    __m512i v = _mm512_mask_blend_epi64(0xf0, _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)q0)),
                                        _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)q1)));
    v = _mm512_srlv_epi64(v, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4));
    return _mm512_and_si512(v, _mm512_set1_epi8(0x0f));
}
KC_INLINE uint16_t kc__wdbits(const void *W, int wt, size_t b) {
    return wt == KC_WQ8_0 ? ((const block_q8_0 *)W)[b].d
           : wt == KC_WQ4_0 ? ((const block_q4_0 *)W)[b].d : ((const block_q4_1 *)W)[b].d;
}

KC_INLINE void kc__mmq_tile512(const void *W, int wt, const kc_q8 *X, int ldx, float *Y, int ldy, int IN, int r,
                               int t, int NR, int NT, const float *bias, int accumulate) {
    const int NB = IN / 32;
    const kc_q8 *x0 = X + (size_t)t * (size_t)ldx;
    size_t w0 = (size_t)r * (size_t)NB;
    const __m512i zero = _mm512_setzero_si512();
    __m512 acc[KC_QRB][KC_QTB];
    KC_UNROLL for (int i = 0; i < NR; i++) KC_UNROLL for (int j = 0; j < NT; j++) acc[i][j] = _mm512_setzero_ps();
    for (int b = 0; b < NB; b += 2) {
        __m512i xq[KC_QTB], xa[KC_QTB];
        __m512 xd[KC_QTB], xs[KC_QTB];
        KC_UNROLL for (int j = 0; j < NT; j++) {
            const kc_q8 *xb = &x0[(size_t)j * (size_t)ldx + (size_t)b];
            xq[j] = kc__join2(xb[0].qs, xb[1].qs);
            xd[j] = kc__scale2f(xb[0].d, xb[1].d);
            xs[j] = wt == KC_WQ4_1 ? kc__scale2f(xb[0].s * 0.125f, xb[1].s * 0.125f) : _mm512_setzero_ps();
            if (wt == KC_WQ4_0)
                xa[j] = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, _mm512_set1_epi8(8), xq[j]));
            else if (wt == KC_WQ8_0)
                xa[j] = _mm512_xor_si512(xq[j], _mm512_set1_epi8((char)0x80));
            else
                xa[j] = zero;
        }
        KC_UNROLL for (int i = 0; i < NR; i++) {
            size_t wb = w0 + (size_t)i * (size_t)NB + (size_t)b;
            __m512i wq = kc__wcodes2(W, wt, wb);
            __m512 wd, wm = _mm512_setzero_ps();
            if (wt == KC_WQ8_0) {
                wd = kc__scale2h(kc__wdbits(W, wt, wb), kc__wdbits(W, wt, wb + 1));
            } else {
                const size_t bs = wt == KC_WQ4_0 ? sizeof(block_q4_0) : sizeof(block_q4_1);
                __m256i raw = _mm256_loadu_si256((const __m256i *)(const void *)((const char *)W + wb * bs));
                /* fp16 word index of d (and m) in blocks b and b+1 */
                const int d1 = (int)(bs / 2);
                wd = _mm512_cvtph_ps(_mm256_permutexvar_epi16(
                    _mm256_setr_epi16(0, 0, 0, 0, 0, 0, 0, 0, (short)d1, (short)d1, (short)d1, (short)d1, (short)d1,
                                      (short)d1, (short)d1, (short)d1), raw));
                if (wt == KC_WQ4_1)
                    wm = _mm512_cvtph_ps(_mm256_permutexvar_epi16(
                        _mm256_setr_epi16(1, 1, 1, 1, 1, 1, 1, 1, (short)(d1 + 1), (short)(d1 + 1), (short)(d1 + 1),
                                          (short)(d1 + 1), (short)(d1 + 1), (short)(d1 + 1), (short)(d1 + 1),
                                          (short)(d1 + 1)), raw));
            }
            __m512i wa = wt == KC_WQ8_0 ? _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, _mm512_set1_epi8((char)0x80), wq))
                                        : zero;
            KC_UNROLL for (int j = 0; j < NT; j++) {
                __m512i p = wt == KC_WQ8_0   ? _mm512_dpbusd_epi32(wa, xa[j], wq)
                            : wt == KC_WQ4_0 ? _mm512_dpbusd_epi32(xa[j], wq, xq[j])
                                             : _mm512_dpbusd_epi32(zero, wq, xq[j]);
                acc[i][j] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(p), xd[j]), wd, acc[i][j]);
                if (wt == KC_WQ4_1) acc[i][j] = _mm512_fmadd_ps(wm, xs[j], acc[i][j]);
            }
        }
    }
    KC_UNROLL for (int j = 0; j < NT; j++) {
        float *y = Y + (size_t)(t + j) * (size_t)ldy + r;
        KC_UNROLL for (int i = 0; i < NR; i++) {
            float v = kc__vsum(acc[i][j]);
            if (bias) v += bias[r + i];
            if (accumulate) v += y[i];
            y[i] = v;
        }
    }
}
#define KC_QTILE(...) (IN % 64 == 0 ? kc__mmq_tile512(__VA_ARGS__) : kc__mmq_tile(__VA_ARGS__))
#else
#define KC_QTILE(...) kc__mmq_tile(__VA_ARGS__)
#endif

KC_INLINE void kc__mmq(const void *W, int wt, const kc_q8 *X, int ldx, float *Y, int ldy, int T, int IN, int r0,
                       int r1, const float *bias, int accumulate) {
    for (int t0 = 0; t0 < T; t0 += KC_QTC) {
        int t1 = T - t0 > KC_QTC ? t0 + KC_QTC : T;
        int r = r0;
        for (; r + KC_QRB <= r1; r += KC_QRB) {
            int t = t0;
            for (; t + KC_QTB <= t1; t += KC_QTB)
                KC_QTILE(W, wt, X, ldx, Y, ldy, IN, r, t, KC_QRB, KC_QTB, bias, accumulate);
            for (; t < t1; t++) KC_QTILE(W, wt, X, ldx, Y, ldy, IN, r, t, KC_QRB, 1, bias, accumulate);
        }
        for (; r < r1; r++) {
            int t = t0;
            for (; t + KC_QTB <= t1; t += KC_QTB)
                KC_QTILE(W, wt, X, ldx, Y, ldy, IN, r, t, 1, KC_QTB, bias, accumulate);
            for (; t < t1; t++) KC_QTILE(W, wt, X, ldx, Y, ldy, IN, r, t, 1, 1, bias, accumulate);
        }
    }
}

static inline void kc_mm_q8_0(const block_q8_0 *W, const kc_q8 *X, int ldx_blocks, float *Y, int ldy, int T,
                              int IN, int r0, int r1, const float *bias, int accumulate) {
    kc__mmq(W, KC_WQ8_0, X, ldx_blocks, Y, ldy, T, IN, r0, r1, bias, accumulate);
}
static inline void kc_mm_q4_0(const block_q4_0 *W, const kc_q8 *X, int ldx_blocks, float *Y, int ldy, int T,
                              int IN, int r0, int r1, const float *bias, int accumulate) {
    kc__mmq(W, KC_WQ4_0, X, ldx_blocks, Y, ldy, T, IN, r0, r1, bias, accumulate);
}
static inline void kc_mm_q4_1(const block_q4_1 *W, const kc_q8 *X, int ldx_blocks, float *Y, int ldy, int T,
                              int IN, int r0, int r1, const float *bias, int accumulate) {
    kc__mmq(W, KC_WQ4_1, X, ldx_blocks, Y, ldy, T, IN, r0, r1, bias, accumulate);
}

/* ------------------------------------------------------------------------
 * Quantized weights with f32 activations (kc_mmx_*): exact dequantization.
 *
 * Every weight is dequantized in registers exactly as GGUF defines it, in
 * f32: w = d*q (Q8_0), d*(q-8) (Q4_0), d*q + m (Q4_1), d and m fp16 -> f32.
 * d*q is exact in f32 (11-bit d times an 8-bit q), so the only rounding of
 * the weight is Q4_1's "+ m" (one rounding whether or not it is an FMA, as
 * in GGUF's f32 dequantization), and Q4_0's d*(q-8) is computed as the exact
 * fma(q, d, -8d). The products with X are then accumulated in f32 FMAs, so
 * the result is the f32 matmul with the dequantized weight matrix (the
 * transformers reference on the dequantized GGUF), not the int8 x int8
 * approximation of kc_mm_q*.
 *
 * Two shapes:
 *  - Few tokens (T < KC_XTMIN; decode): a stream over W. A tile of KC_XRB
 *    rows x up to KC_XTB tokens walks the row's blocks; each 32-block is
 *    dequantized into 32/KC_VW vectors and FMA'd into per-(row, token)
 *    accumulators (two sets alternating on AVX-512 to hide FMA latency),
 *    horizontally summed once at the end. The activation vectors of a block
 *    are loaded once for all KC_XRB rows.
 *  - More tokens (prefill): per token chunk of KC_XTC tokens, per tile of
 *    KC_XMR = 2 vectors of rows, per K chunk of KC_XKB blocks, the weights
 *    are dequantized ONCE into a stack buffer buf[k][KC_XMR] (k-major: one
 *    aligned vector load gives KC_VW rows at one k; 16 KB on AVX-512) and
 *    then an outer-product microkernel runs over all tokens of the chunk,
 *    KC_XNT at a time: per k, 2 weight-vector loads + KC_XNT broadcasts of
 *    x[t][k] feed 2*KC_XNT FMAs (24 accumulators on AVX-512), and the
 *    accumulators are already Y's layout (KC_VW consecutive rows of one
 *    token) so they are stored without horizontal sums. Partial sums of the
 *    K chunks are accumulated in Y (the tile is L1-resident). The
 *    dequantization cost is spread over KC_XTC tokens; on AVX-512 the
 *    k-major layout is produced directly by 16-row gathers of the block
 *    headers and code dwords, so no transpose is needed. */
#if defined(__AVX512F__)
#define KC_XRB 4  /* direct path: rows per tile */
#define KC_XTB 2  /* direct path: tokens per tile */
#define KC_XACC 2 /* direct path: accumulator sets */
#define KC_XNT 12 /* packed path: tokens per microkernel tile */
#elif defined(__AVX2__) && defined(__FMA__)
#define KC_XRB 4
#define KC_XTB 2
#define KC_XACC 1
#define KC_XNT 6 /* 12 accumulators + 2 weights + 1 broadcast of 16 registers */
#else
#define KC_XRB 4
#define KC_XTB 2
#define KC_XACC 1
#define KC_XNT 4
#endif
#define KC_XMR (2 * KC_VW) /* packed path: rows per tile */
#define KC_XKB 4           /* packed path: 32-blocks per K chunk (128 k) */
#define KC_XTC 128         /* packed path: token chunk (128 x 1536 f32 = 768 KB of X in L2) */
#define KC_XTMIN 3         /* T below this: direct path */

/* Lanes s*KC_VW .. s*KC_VW+KC_VW-1 of block b's codes as floats: q for Q8_0
 * (signed), the unsigned nibble q for Q4 (elements 0-15 are the low nibbles
 * of qs[0..15], 16-31 the high nibbles). */
KC_INLINE kc_vf kc__xcodes(const void *W, int wt, size_t b, int s) {
    const int8_t *q8 = ((const block_q8_0 *)W)[b].qs;
    const uint8_t *q4 = wt == KC_WQ4_0 ? ((const block_q4_0 *)W)[b].qs : ((const block_q4_1 *)W)[b].qs;
#if defined(__AVX512F__)
    if (wt == KC_WQ8_0)
        return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(q8 + 16 * s))));
    /* one widening of the 16 bytes serves both halves: low nibble = & 15,
     * high nibble = >> 4 (the dword holds one byte) */
    __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)q4));
    v = s == 0 ? _mm512_and_si512(v, _mm512_set1_epi32(15)) : _mm512_srli_epi32(v, 4);
    return _mm512_cvtepi32_ps(v);
#elif defined(__AVX2__) && defined(__FMA__)
    if (wt == KC_WQ8_0)
        return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(q8 + 8 * s))));
    __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(q4 + 8 * (s & 1))));
    v = s < 2 ? _mm256_and_si256(v, _mm256_set1_epi32(15)) : _mm256_srli_epi32(v, 4);
    return _mm256_cvtepi32_ps(v);
#elif defined(__ARM_NEON)
    if (wt == KC_WQ8_0) return vcvtq_f32_s32(kc_neon_i8x4(q8 + 4 * s));
    /* lanes 4s..4s+3: low nibbles of qs[4s..] for s < 4, high nibbles of qs[4(s - 4)..] after */
    const int32x4_t v = kc_neon_u8x4(q4 + 4 * (s & 3));
    return vcvtq_f32_s32(s < 4 ? vandq_s32(v, vdupq_n_s32(15)) : vshrq_n_s32(v, 4));
#elif defined(__wasm_simd128__)
    if (wt == KC_WQ8_0) return wasm_f32x4_convert_i32x4(kc_wasm_i8x4(q8 + 4 * s));
    const v128_t v = kc_wasm_u8x4(q4 + 4 * (s & 3)); /* as NEON's: 4 lanes */
    return wasm_f32x4_convert_i32x4(s < 4 ? wasm_v128_and(v, wasm_i32x4_splat(15)) : wasm_u32x4_shr(v, 4));
#else
    if (wt == KC_WQ8_0) return (float)q8[s];
    return (float)(s < 16 ? (q4[s] & 15) : (q4[s - 16] >> 4));
#endif
}

#if defined(__AVX512F__)
KC_INLINE kc_vf kc__vset1(float a) { return _mm512_set1_ps(a); }
KC_INLINE kc_vf kc__vmul(kc_vf a, kc_vf b) { return _mm512_mul_ps(a, b); }
#elif defined(__AVX2__) && defined(__FMA__)
KC_INLINE kc_vf kc__vset1(float a) { return _mm256_set1_ps(a); }
KC_INLINE kc_vf kc__vmul(kc_vf a, kc_vf b) { return _mm256_mul_ps(a, b); }
#elif defined(__ARM_NEON)
KC_INLINE kc_vf kc__vset1(float a) { return vdupq_n_f32(a); }
KC_INLINE kc_vf kc__vmul(kc_vf a, kc_vf b) { return vmulq_f32(a, b); }
#elif defined(__wasm_simd128__)
KC_INLINE kc_vf kc__vset1(float a) { return wasm_f32x4_splat(a); }
KC_INLINE kc_vf kc__vmul(kc_vf a, kc_vf b) { return wasm_f32x4_mul(a, b); }
#else
KC_INLINE kc_vf kc__vset1(float a) { return a; }
KC_INLINE kc_vf kc__vmul(kc_vf a, kc_vf b) { return a * b; }
#endif

/* w = d*q, fma(q, d, -8d) = d*(q-8) exactly, or fma(q, d, m) = d*q + m. */
KC_INLINE kc_vf kc__xdeq(int wt, kc_vf q, kc_vf d, kc_vf c) {
    return wt == KC_WQ8_0 ? kc__vmul(q, d) : kc__vfma(q, d, c);
}
/* The per-block constants d and c (-8d for Q4_0, m for Q4_1). */
KC_INLINE void kc__xscale(const void *W, int wt, size_t b, float *d, float *c) {
    *d = kc__wd(W, wt, b);
    *c = wt == KC_WQ4_0    ? -8.0f * *d
         : wt == KC_WQ4_1  ? kc_fp16_to_f32(((const block_q4_1 *)W)[b].m)
         : wt == KC_WQ4_ZP ? -((float)((const block_q4_z *)W)[b].z * *d)
                           : 0.0f;
}

/* Direct path: NR x NT outputs (NR <= KC_XRB, NT <= KC_XTB). */
KC_INLINE void kc__mmx_tile(const void *W, int wt, const float *X, int ldx, float *Y, int ldy, int IN, int r, int t,
                            int NR, int NT, const float *bias, int accumulate) {
    const int NB = IN / 32, NS = 32 / KC_VW;
    const float *x0 = X + (size_t)t * (size_t)ldx;
    const size_t w0 = (size_t)r * (size_t)NB;
    kc_vf acc[KC_XRB][KC_XTB][KC_XACC];
    KC_UNROLL for (int i = 0; i < NR; i++) KC_UNROLL for (int j = 0; j < NT; j++) KC_UNROLL for (int a = 0;
                                                                                              a < KC_XACC; a++)
        acc[i][j][a] = kc__vzero();
    for (int b = 0; b < NB; b++) {
        float ds[KC_XRB], cs[KC_XRB];
#if defined(__AVX512F__)
        /* The NR header dwords (d, and Q4_1's m, as fp16) converted by one
         * vcvtph2ps into dm = [d0 m0 d1 m1 ...]; the per-row broadcasts
         * below then come from memory (load ports, not shuffles). */
        float dm[8] __attribute__((aligned(32)));
        {
            uint32_t hv[4] = {0, 0, 0, 0};
            const size_t bsz = wt == KC_WQ8_0 ? sizeof(block_q8_0) : wt == KC_WQ4_0 ? sizeof(block_q4_0) : sizeof(block_q4_1);
            KC_UNROLL for (int i = 0; i < NR; i++)
                memcpy(&hv[i], (const char *)W + (w0 + (size_t)i * (size_t)NB + (size_t)b) * bsz, 4);
            const __m128i h4 = _mm_setr_epi32((int)hv[0], (int)hv[1], (int)hv[2], (int)hv[3]);
            if (wt == KC_WQ4_ZP) { /* the high half is the integer zero point z: dm = [d0 c0 d1 c1 ...], c = -z*d */
                const __m128 d = _mm_cvtph_ps(_mm_packus_epi32(_mm_and_si128(h4, _mm_set1_epi32(0xffff)), _mm_setzero_si128()));
                const __m128 c = _mm_sub_ps(_mm_setzero_ps(), _mm_mul_ps(_mm_cvtepi32_ps(_mm_srli_epi32(h4, 16)), d));
                _mm256_store_ps(dm, _mm256_set_m128(_mm_unpackhi_ps(d, c), _mm_unpacklo_ps(d, c)));
            } else
                _mm256_store_ps(dm, _mm256_cvtph_ps(h4));
            /* keeps dm in memory: otherwise the compiler extracts each
             * scale with shuffles, which compete with vpermps for port 5 */
            __asm__ __volatile__("" : : "m"(dm) : "memory");
        }
        KC_UNROLL for (int i = 0; i < NR; i++)
            ds[i] = dm[2 * i], cs[i] = wt == KC_WQ4_1 || wt == KC_WQ4_ZP ? dm[2 * i + 1] : 0.0f;
#else
        KC_UNROLL for (int i = 0; i < NR; i++) kc__xscale(W, wt, w0 + (size_t)i * (size_t)NB + (size_t)b, &ds[i], &cs[i]);
#endif
        KC_UNROLL for (int s = 0; s < NS; s++) {
            kc_vf xv[KC_XTB];
            KC_UNROLL for (int j = 0; j < NT; j++) xv[j] = kc__ldx(x0 + (size_t)j * (size_t)ldx + 32 * (size_t)b + s * KC_VW);
            KC_UNROLL for (int i = 0; i < NR; i++) {
#if defined(__AVX512F__)
                /* Q4: the 16 possible weights of the block, table[q] =
                 * fma(q, d, c), are computed once (one FMA) and looked up
                 * by the nibbles with vpermps (only the low 4 bits of each
                 * index are used, so the low half needs no mask) — the same
                 * values as dequantizing each weight. */
                kc_vf w;
                if (wt != KC_WQ8_0) {
                    const uint8_t *q4 = wt == KC_WQ4_0 ? ((const block_q4_0 *)W)[w0 + (size_t)i * (size_t)NB + (size_t)b].qs
                                                       : ((const block_q4_1 *)W)[w0 + (size_t)i * (size_t)NB + (size_t)b].qs;
                    /* Q4_0: (q-8)*d, exact; Q4_1: fma(q, d, m) */
                    const __m512 table =
                        wt == KC_WQ4_0
                            ? _mm512_mul_ps(_mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7),
                                            _mm512_set1_ps(ds[i]))
                            : _mm512_fmadd_ps(_mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                              _mm512_set1_ps(ds[i]), _mm512_set1_ps(cs[i]));
                    __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)q4));
                    w = _mm512_permutexvar_ps(s == 0 ? v : _mm512_srli_epi32(v, 4), table);
                } else
                    w = kc__xdeq(wt, kc__xcodes(W, wt, w0 + (size_t)i * (size_t)NB + (size_t)b, s), kc__vset1(ds[i]),
                                 kc__vset1(cs[i]));
#else
                kc_vf w = kc__xdeq(wt, kc__xcodes(W, wt, w0 + (size_t)i * (size_t)NB + (size_t)b, s), kc__vset1(ds[i]),
                                   kc__vset1(cs[i]));
#endif
                KC_UNROLL for (int j = 0; j < NT; j++) acc[i][j][s % KC_XACC] = kc__vfma(w, xv[j], acc[i][j][s % KC_XACC]);
            }
        }
    }
    float out[KC_FRB > 4 ? KC_FRB : 4][KC_FTB > 4 ? KC_FTB : 4];
    KC_UNROLL for (int i = 0; i < NR; i++) KC_UNROLL for (int j = 0; j < NT; j++) {
        kc_vf v = acc[i][j][0];
        KC_UNROLL for (int a = 1; a < KC_XACC; a++) v = kc__vfma(acc[i][j][a], kc__vset1(1.0f), v);
        out[i][j] = kc__vsum(v);
    }
    kc__store(Y, ldy, r, t, NR, NT, out, bias, accumulate);
}

/* Packed path, step 1: dequantizes blocks [b0, b0+nb) of rows [r, r+nr)
 * (nr <= KC_XMR) into buf[k][KC_XMR] (k = 0 .. 32*nb-1 relative to 32*b0);
 * rows nr.. of the tile are zero. */
KC_INLINE void kc__mmx_pack(const void *W, int wt, int NB, int r, int nr, int b0, int nb, float *buf) {
#if defined(__AVX512F__)
    const int bs = wt == KC_WQ8_0 ? (int)sizeof(block_q8_0) : wt == KC_WQ4_0 ? (int)sizeof(block_q4_0)
                                                                              : (int)sizeof(block_q4_1);
    const int hdr = wt == KC_WQ4_1 || wt == KC_WQ4_ZP ? 4 : 2; /* byte offset of qs */
    /* byte offsets of 16 consecutive rows' blocks from the first one */
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32(NB * bs));
    const __m512i zero = _mm512_setzero_si512(), m4 = _mm512_set1_epi32(15);
    for (int h = 0; h < 2; h++) {
        const int left = nr - 16 * h;
        const __mmask16 mask = left >= 16 ? (__mmask16)0xffff : left <= 0 ? (__mmask16)0 : (__mmask16)((1u << left) - 1);
        for (int bb = 0; bb < nb; bb++) {
            float *o = buf + (size_t)(32 * bb) * KC_XMR + 16 * h;
            if (!mask) { /* whole half beyond the last row */
                for (int k = 0; k < 32; k++) _mm512_store_ps(o + (size_t)k * KC_XMR, _mm512_setzero_ps());
                continue;
            }
            const char *base = (const char *)W + ((size_t)(r + 16 * h) * (size_t)NB + (size_t)(b0 + bb)) * (size_t)bs;
            /* header dword: d in the low half (Q4_1: m in the high half) */
            __m512i hd = _mm512_mask_i32gather_epi32(zero, mask, idx, base, 1);
            __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(hd));
            __m512 c = wt == KC_WQ4_1    ? _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(hd, 16)))
                       : wt == KC_WQ4_0  ? _mm512_mul_ps(d, _mm512_set1_ps(-8.0f))
                       : wt == KC_WQ4_ZP ? _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(hd, 16)),
                                                         _mm512_sub_ps(_mm512_setzero_ps(), d)) /* -z*d */
                                         : _mm512_setzero_ps();
            if (wt == KC_WQ8_0) {
                /* code dword g holds elements 4g..4g+3, one signed byte each */
                KC_UNROLL for (int g = 0; g < 8; g++) {
                    __m512i v = _mm512_mask_i32gather_epi32(zero, mask, idx, base + hdr + 4 * g, 1);
                    KC_UNROLL for (int j = 0; j < 4; j++) {
                        __m512i q = _mm512_srai_epi32(_mm512_slli_epi32(v, 24 - 8 * j), 24);
                        _mm512_store_ps(o + (size_t)(4 * g + j) * KC_XMR, _mm512_mul_ps(_mm512_cvtepi32_ps(q), d));
                    }
                }
            } else {
                /* code dword g holds bytes 4g..4g+3: low nibbles are elements
                 * 4g..4g+3, high nibbles elements 4g+16..4g+19 */
                KC_UNROLL for (int g = 0; g < 4; g++) {
                    __m512i v = _mm512_mask_i32gather_epi32(zero, mask, idx, base + hdr + 4 * g, 1);
                    KC_UNROLL for (int j = 0; j < 4; j++) {
                        __m512 lo = _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(v, 8 * j), m4));
                        __m512 hi = _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(v, 8 * j + 4), m4));
                        _mm512_store_ps(o + (size_t)(4 * g + j) * KC_XMR, _mm512_fmadd_ps(lo, d, c));
                        _mm512_store_ps(o + (size_t)(4 * g + j + 16) * KC_XMR, _mm512_fmadd_ps(hi, d, c));
                    }
                }
            }
        }
    }
#else
    /* Portable: dequantize row by row (contiguous reads) and scatter into
     * the k-major buffer; the cost is spread over the token chunk. */
    for (int i = 0; i < KC_XMR; i++) {
        for (int bb = 0; bb < nb; bb++) {
            float *o = buf + (size_t)(32 * bb) * KC_XMR + i;
            if (i >= nr) {
                for (int k = 0; k < 32; k++) o[(size_t)k * KC_XMR] = 0.0f;
                continue;
            }
            const size_t blk = (size_t)(r + i) * (size_t)NB + (size_t)(b0 + bb);
            float d, c;
            kc__xscale(W, wt, blk, &d, &c);
            for (int k = 0; k < 32; k++) {
                float q;
                if (wt == KC_WQ8_0) q = (float)((const block_q8_0 *)W)[blk].qs[k];
                else {
                    const uint8_t *qs = wt == KC_WQ4_0 ? ((const block_q4_0 *)W)[blk].qs : ((const block_q4_1 *)W)[blk].qs;
                    q = (float)(k < 16 ? (qs[k] & 15) : (qs[k - 16] >> 4));
                }
                o[(size_t)k * KC_XMR] = wt == KC_WQ8_0 ? q * d : fmaf(q, d, c);
            }
        }
    }
#endif
}

/* Packed path, step 2: Y[t][0..nr) (+)= buf^T x X[t] over kk = 32*nb
 * values of k, for NT tokens. Y, X already point at (token, row) and
 * (token, k) of the tile. init: Y starts from 0 instead of its value
 * (first K chunk without accumulate); bias: added (last K chunk). */
KC_INLINE void kc__mmx_kern(const float *buf, int kk, const float *X, int ldx, float *Y, int ldy, int nr, int NT,
                            int init, const float *bias) {
    kc_vf acc[KC_XNT][2];
    KC_UNROLL for (int j = 0; j < NT; j++) acc[j][0] = acc[j][1] = kc__vzero();
    for (int k = 0; k < kk; k++) {
        const kc_vf w0 = kc__ldx(buf + (size_t)k * KC_XMR), w1 = kc__ldx(buf + (size_t)k * KC_XMR + KC_VW);
        KC_UNROLL for (int j = 0; j < NT; j++) {
            const kc_vf xb = kc__vset1(X[(size_t)j * (size_t)ldx + (size_t)k]);
            acc[j][0] = kc__vfma(w0, xb, acc[j][0]);
            acc[j][1] = kc__vfma(w1, xb, acc[j][1]);
        }
    }
    if (nr == KC_XMR) {
        const kc_vf b0 = bias ? kc__ldx(bias) : kc__vzero(), b1 = bias ? kc__ldx(bias + KC_VW) : kc__vzero();
        KC_UNROLL for (int j = 0; j < NT; j++) {
            float *y = Y + (size_t)j * (size_t)ldy;
            kc_vf v0 = acc[j][0], v1 = acc[j][1];
            if (!init) v0 = kc__vfma(kc__ldx(y), kc__vset1(1.0f), v0), v1 = kc__vfma(kc__ldx(y + KC_VW), kc__vset1(1.0f), v1);
            if (bias) v0 = kc__vfma(b0, kc__vset1(1.0f), v0), v1 = kc__vfma(b1, kc__vset1(1.0f), v1);
#if defined(__AVX512F__)
            _mm512_storeu_ps(y, v0), _mm512_storeu_ps(y + KC_VW, v1);
#elif defined(__AVX2__) && defined(__FMA__)
            _mm256_storeu_ps(y, v0), _mm256_storeu_ps(y + KC_VW, v1);
#elif defined(__ARM_NEON)
            vst1q_f32(y, v0), vst1q_f32(y + KC_VW, v1);
#elif defined(__wasm_simd128__)
            wasm_v128_store(y, v0), wasm_v128_store(y + KC_VW, v1);
#else
            y[0] = v0, y[1] = v1;
#endif
        }
        return;
    }
    for (int j = 0; j < NT; j++) { /* partial row tile: through memory */
        float tmp[KC_XMR];
#if defined(__AVX512F__)
        _mm512_storeu_ps(tmp, acc[j][0]), _mm512_storeu_ps(tmp + KC_VW, acc[j][1]);
#elif defined(__AVX2__) && defined(__FMA__)
        _mm256_storeu_ps(tmp, acc[j][0]), _mm256_storeu_ps(tmp + KC_VW, acc[j][1]);
#elif defined(__ARM_NEON)
        vst1q_f32(tmp, acc[j][0]), vst1q_f32(tmp + KC_VW, acc[j][1]);
#elif defined(__wasm_simd128__)
        wasm_v128_store(tmp, acc[j][0]), wasm_v128_store(tmp + KC_VW, acc[j][1]);
#else
        tmp[0] = acc[j][0], tmp[1] = acc[j][1];
#endif
        float *y = Y + (size_t)j * (size_t)ldy;
        for (int i = 0; i < nr; i++) {
            float v = tmp[i];
            if (!init) v = y[i] + v;
            if (bias) v += bias[i];
            y[i] = v;
        }
    }
}
/* The microkernel does not depend on the weight type or IN: three
 * out-of-line specializations (full tile, 4 tokens, 1 token) are shared by
 * every call site. */
static void kc__mmx_kern_n(const float *buf, int kk, const float *X, int ldx, float *Y, int ldy, int nr, int init,
                           const float *bias) {
    kc__mmx_kern(buf, kk, X, ldx, Y, ldy, nr, KC_XNT, init, bias);
}
static void kc__mmx_kern_4(const float *buf, int kk, const float *X, int ldx, float *Y, int ldy, int nr, int init,
                           const float *bias) {
    kc__mmx_kern(buf, kk, X, ldx, Y, ldy, nr, 4, init, bias);
}
static void kc__mmx_kern_1(const float *buf, int kk, const float *X, int ldx, float *Y, int ldy, int nr, int init,
                           const float *bias) {
    kc__mmx_kern(buf, kk, X, ldx, Y, ldy, nr, 1, init, bias);
}
/* Tokens [t0, t1) of the packed rows r .. r + nr (X and Y at token 0): full
 * tiles, then 4 tokens, then one at a time. Every packed-weight GEMM uses it. */
static void kc__mmx_kern_tokens(const float *buf, int kk, const float *X, int ldx, float *Y, int ldy, int r, int nr,
                                int t0, int t1, int init, const float *bias) {
    int t = t0;
    for (; t + KC_XNT <= t1; t += KC_XNT)
        kc__mmx_kern_n(buf, kk, X + (size_t)t * (size_t)ldx, ldx, Y + (size_t)t * (size_t)ldy + r, ldy, nr, init, bias);
    for (; t + 4 <= t1; t += 4)
        kc__mmx_kern_4(buf, kk, X + (size_t)t * (size_t)ldx, ldx, Y + (size_t)t * (size_t)ldy + r, ldy, nr, init, bias);
    for (; t < t1; t++)
        kc__mmx_kern_1(buf, kk, X + (size_t)t * (size_t)ldx, ldx, Y + (size_t)t * (size_t)ldy + r, ldy, nr, init, bias);
}

KC_INLINE void kc__mmx(const void *W, int wt, const float *X, int ldx, float *Y, int ldy, int T, int IN, int r0,
                       int r1, const float *bias, int accumulate) {
    if (T < KC_XTMIN) { /* stream the weights */
        int r = r0;
        for (; r + KC_XRB <= r1; r += KC_XRB) {
            int t = 0;
            for (; t + KC_XTB <= T; t += KC_XTB)
                kc__mmx_tile(W, wt, X, ldx, Y, ldy, IN, r, t, KC_XRB, KC_XTB, bias, accumulate);
            for (; t < T; t++) kc__mmx_tile(W, wt, X, ldx, Y, ldy, IN, r, t, KC_XRB, 1, bias, accumulate);
        }
        for (; r < r1; r++) {
            int t = 0;
            for (; t + KC_XTB <= T; t += KC_XTB)
                kc__mmx_tile(W, wt, X, ldx, Y, ldy, IN, r, t, 1, KC_XTB, bias, accumulate);
            for (; t < T; t++) kc__mmx_tile(W, wt, X, ldx, Y, ldy, IN, r, t, 1, 1, bias, accumulate);
        }
        return;
    }
    const int NB = IN / 32;
#if defined(__GNUC__) || defined(__clang__)
    float buf[KC_XKB * 32 * KC_XMR] __attribute__((aligned(64)));
#else
    float buf[KC_XKB * 32 * KC_XMR];
#endif
    for (int t0 = 0; t0 < T; t0 += KC_XTC) {
        const int t1 = T - t0 > KC_XTC ? t0 + KC_XTC : T;
        for (int r = r0; r < r1; r += KC_XMR) {
            const int nr = r1 - r < KC_XMR ? r1 - r : KC_XMR;
            for (int b0 = 0; b0 < NB; b0 += KC_XKB) {
                const int nb = NB - b0 < KC_XKB ? NB - b0 : KC_XKB;
                kc__mmx_pack(W, wt, NB, r, nr, b0, nb, buf);
                const int init = b0 == 0 && !accumulate;
                const float *bi = b0 + nb == NB && bias ? bias + r : NULL;
                const float *xk = X + 32 * (size_t)b0;
                kc__mmx_kern_tokens(buf, 32 * nb, xk, ldx, Y, ldy, r, nr, t0, t1, init, bi);
            }
        }
    }
}

/* Y[t*ldy + r] = (accumulate ? Y : 0) + dot(dequantized W row r, X row t)
 * + bias[r] for r0 <= r < r1, 0 <= t < T; X rows are f32 at X + t*ldx. */
static inline void kc_mmx_q8_0(const block_q8_0 *W, const float *X, int ldx, float *Y, int ldy, int T, int IN,
                               int r0, int r1, const float *bias, int accumulate) {
    kc__mmx(W, KC_WQ8_0, X, ldx, Y, ldy, T, IN, r0, r1, bias, accumulate);
}
static inline void kc_mmx_q4_0(const block_q4_0 *W, const float *X, int ldx, float *Y, int ldy, int T, int IN,
                               int r0, int r1, const float *bias, int accumulate) {
    kc__mmx(W, KC_WQ4_0, X, ldx, Y, ldy, T, IN, r0, r1, bias, accumulate);
}
static inline void kc_mmx_q4_1(const block_q4_1 *W, const float *X, int ldx, float *Y, int ldy, int T, int IN,
                               int r0, int r1, const float *bias, int accumulate) {
    kc__mmx(W, KC_WQ4_1, X, ldx, Y, ldy, T, IN, r0, r1, bias, accumulate);
}

/* ------------------------------------------------------------------------
 * Dequantizes row `row` (IN elements) of a [rows][IN] table of type t into
 * out, e.g. for embedding lookup. Types not spelled out here (Q5, the
 * K-quants, IQ4) take the scalar reference of dtype.c (one row per token);
 * unknown types leave out untouched. */
static inline void kc_embed_row(ingot_dtype t, const void *W, int64_t row, int IN, float *out) {
    size_t base = (size_t)row * (size_t)IN;
    switch (t) {
    case INGOT_F32:
        memcpy(out, (const float *)W + base, (size_t)IN * sizeof(float));
        break;
    case INGOT_F16:
        for (int k = 0; k < IN; k++) out[k] = kc_fp16_to_f32(((const uint16_t *)W)[base + (size_t)k]);
        break;
    case INGOT_BF16:
        for (int k = 0; k < IN; k++) out[k] = kc_bf16_to_f32(((const uint16_t *)W)[base + (size_t)k]);
        break;
    case INGOT_Q8_0: {
        const block_q8_0 *b = (const block_q8_0 *)W + base / 32;
        for (int i = 0; i < IN / 32; i++) {
            float d = kc_fp16_to_f32(b[i].d);
            for (int k = 0; k < 32; k++) out[32 * i + k] = d * (float)b[i].qs[k];
        }
        break;
    }
    case INGOT_Q4_0: {
        const block_q4_0 *b = (const block_q4_0 *)W + base / 32;
        for (int i = 0; i < IN / 32; i++) {
            float d = kc_fp16_to_f32(b[i].d);
            for (int k = 0; k < 16; k++) {
                out[32 * i + k] = d * (float)((b[i].qs[k] & 15) - 8);
                out[32 * i + k + 16] = d * (float)((b[i].qs[k] >> 4) - 8);
            }
        }
        break;
    }
    case INGOT_Q4_1: {
        const block_q4_1 *b = (const block_q4_1 *)W + base / 32;
        for (int i = 0; i < IN / 32; i++) {
            float d = kc_fp16_to_f32(b[i].d), m = kc_fp16_to_f32(b[i].m);
            for (int k = 0; k < 16; k++) {
                out[32 * i + k] = d * (float)(b[i].qs[k] & 15) + m;
                out[32 * i + k + 16] = d * (float)(b[i].qs[k] >> 4) + m;
            }
        }
        break;
    }
    default: {
        size_t rb;
        if (dtype_row_bytes(t, IN, &rb) == 0) dtype_dequantize_row(t, (const uint8_t *)W + (size_t)row * rb, out, IN);
        break;
    }
    }
}

#endif
