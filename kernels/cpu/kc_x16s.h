/* kc_x16s.h — Q4_K, Q5_K and Q6_K x16 matrices (kc_x16k.h) against activations quantized per
 * 256-element super-block (kc_q16s), with an AMX tile path for steps of 16 tokens or more. */
#ifndef INGOT_KC_X16S_H
#define INGOT_KC_X16S_H

#include "kc_amx.h"
#include "kc_x16k.h"

/* Why a second activation format. kc_q16 scales every 32 activations on
 * their own, so a weight super-block's sum has to leave the integers at
 * every 32 (or 16) elements: the int32 dot product of a group goes to float
 * and takes the group's d * sc. That costs little in the vpdpbusd kernels,
 * but it rules out AMX: a tile multiply (tdpbsud) takes the same time for
 * 32 columns as for 64, and each group's int32 tile has to go through
 * memory to be scaled, so the unit waits most of the time (measured on
 * the AMX prototypes on kc_q16, 1.1-1.3x VNNI).
 *
 * Here one d covers a whole super-block of 256 activations (15 bits as in
 * kc_q16: q = 128 h + l, |q| <= 16256), and a weight's integer sub-block
 * scale goes into the integer sum: with v = sc * q (Q4_K/Q5_K) or
 * sc * (q - 32) (Q6_K), the super-block's dot product is
 *     V = 128 * VH + VL,  VH = sum(v * h),  VL = sum(v * l)
 * two exact int32 sums (|VH| <= 4096 * 127 * 256 < 2^27). The AMX path
 * splits v into two bytes (v = 256 * hi + lo) and gets VH and VL from four
 * tile products over the whole super-block; the vector paths keep
 * kc_x16k.h's per-group digit chains and multiply each by its integer sc.
 * Both end in the same float arithmetic on the same integers, so a token's
 * output does not depend on the path or the step's size:
 *     y += x.d * (d * fma(float(VH), 128, float(VL)) - dmin * M)
 * with M = sum over the 8 groups of m * (float) sum(q), an fma chain in
 * group order (Q4_K/Q5_K's mins; Q6_K has none: its -32 is in v).
 *
 * The rounding of x is at most amax / 32512 of its super-block's largest
 * value: coarser than kc_q16's where one block of 32 holds a super-block's
 * outlier (by the ratio of the two maxima), 128 times finer than llama.cpp's
 * Q8_K (int8 per 256) that its K-quant kernels use (bench/RESULTS.md measures
 * the perplexity). */

typedef struct {
    int8_t h[256]; /* high digits: x ~= d * (128 * h + l) */
    int8_t l[256]; /* low digits */
    float d;
    float sq[8];     /* sum(128 * h + l) per 32 elements, as float (exact: at most 32 * 16256 < 2^24) */
    int16_t sh[16];  /* sum(h) per 16 elements: Q6_K's -32 against the high digits */
    int16_t sl[16];  /* sum(l) per 16 elements */
    uint8_t pad[28]; /* to 640 bytes: 80 per 32 elements, kc_q16's size */
} kc_q16s;
_Static_assert(sizeof(kc_q16s) == 640, "generator/plan.lua plans 80 bytes per 32 activations");

KC_INLINE int kc_x16s_type(int wt) { return wt == KC_WQ4_K || wt == KC_WQ5_K || wt == KC_WQ6_K; }

/* Quantizes n floats (a multiple of 256) into n/256 kc_q16s blocks: kc_quantize_q16's rounding
 * (nearest-even, the same digits on every path) with one scale per 256. */
static inline void kc_quantize_q16s(const float *x, kc_q16s *out, int n) {
    for (int s = 0; s < n / 256; s++, x += 256) {
        kc_q16s *o = &out[s];
#if defined(__AVX512F__) && defined(__AVX512BW__)
        __m512 mx = _mm512_setzero_ps();
        for (int i = 0; i < 256; i += 16) mx = _mm512_max_ps(mx, _mm512_abs_ps(_mm512_loadu_ps(x + i)));
        const float amax = _mm512_reduce_max_ps(mx);
        const __m512 vid = _mm512_set1_ps(amax > 0.0f ? (float)KC_X16_QMAX / amax : 0.0f);
        for (int b = 0; b < 16; b++) {
            const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + 16 * b), vid)); /* nearest-even */
            const __m512i h = _mm512_srai_epi32(_mm512_add_epi32(q, _mm512_set1_epi32(64)), 7);
            const __m512i l = _mm512_sub_epi32(q, _mm512_slli_epi32(h, 7));
            _mm_storeu_si128((__m128i *)(void *)(o->h + 16 * b), _mm512_cvtepi32_epi8(h));
            _mm_storeu_si128((__m128i *)(void *)(o->l + 16 * b), _mm512_cvtepi32_epi8(l));
        }
        /* the digit sums per 16 from the stored bytes: biased to unsigned (+128), vpsadbw sums
         * each 8 (one horizontal reduction per 64 digits instead of three per 16 values) */
        uint64_t sums[2][32];
        for (int v = 0; v < 4; v++) {
            const __m512i bias = _mm512_set1_epi8((char)0x80);
            _mm512_storeu_si512(sums[0] + 8 * v, _mm512_sad_epu8(_mm512_xor_si512(_mm512_loadu_si512(o->h + 64 * v), bias), _mm512_setzero_si512()));
            _mm512_storeu_si512(sums[1] + 8 * v, _mm512_sad_epu8(_mm512_xor_si512(_mm512_loadu_si512(o->l + 64 * v), bias), _mm512_setzero_si512()));
        }
        for (int b = 0; b < 16; b++) {
            o->sh[b] = (int16_t)((int)(sums[0][2 * b] + sums[0][2 * b + 1]) - 16 * 128);
            o->sl[b] = (int16_t)((int)(sums[1][2 * b] + sums[1][2 * b + 1]) - 16 * 128);
        }
        for (int g = 0; g < 8; g++)
            o->sq[g] = (float)(128 * (o->sh[2 * g] + o->sh[2 * g + 1]) + o->sl[2 * g] + o->sl[2 * g + 1]);
#else
        float amax = 0.0f;
        for (int i = 0; i < 256; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
        const float id = amax > 0.0f ? (float)KC_X16_QMAX / amax : 0.0f;
        for (int b = 0; b < 16; b++) {
            int sum = 0, sh = 0, sl = 0;
            for (int i = 16 * b; i < 16 * b + 16; i++) {
                const int q = (int)nearbyintf(x[i] * id);
                const int h = (q + 64) >> 7; /* floor((q + 64) / 128): arithmetic shift */
                o->h[i] = (int8_t)h;
                o->l[i] = (int8_t)(q - 128 * h);
                sum += q, sh += h, sl += q - 128 * h;
            }
            o->sh[b] = (int16_t)sh, o->sl[b] = (int16_t)sl;
            o->sq[b / 2] = b % 2 ? o->sq[b / 2] + (float)sum : (float)sum;
        }
#endif
        o->d = amax / (float)KC_X16_QMAX;
        memset(o->pad, 0, sizeof o->pad);
    }
}

/* Quantizes n floats (a multiple of 256) into n/256 kc_q16s blocks of int8 activations, one
 * scale per super-block: llama.cpp's Q8_K rounding (|q| <= 127, nearest-even here), carried in
 * the high digits with the low digits 0 (x ~= d * 128 * q, d = amax / (127 * 128): exact powers
 * of two apart from Q8_K's), so that every kernel below reads them as it reads kc_quantize_q16s's
 * and the a8 vector path skips the low digits' chain (one integer chain per weight: half the
 * multiplies; bench/RESULTS.md measures the speed and the perplexity). */
static inline void kc_quantize_q16s_a8(const float *x, kc_q16s *out, int n) {
    for (int s = 0; s < n / 256; s++, x += 256) {
        kc_q16s *o = &out[s];
        float amax = 0.0f;
        for (int i = 0; i < 256; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
        const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
        memset(o->l, 0, sizeof o->l);
        for (int b = 0; b < 16; b++) {
            int sh = 0;
            for (int i = 16 * b; i < 16 * b + 16; i++) {
                const int q = (int)nearbyintf(x[i] * id);
                o->h[i] = (int8_t)q;
                sh += q;
            }
            o->sh[b] = (int16_t)sh, o->sl[b] = 0;
            o->sq[b / 2] = b % 2 ? o->sq[b / 2] + (float)(128 * sh) : (float)(128 * sh);
        }
        o->d = amax / (127.0f * 128.0f);
        memset(o->pad, 0, sizeof o->pad);
    }
}

/* tokens per vector step: their integer sums (two per token) and chains (two per token) with the
 * group's code vectors fit 32 zmm registers at 4 (at 8, kc_x16k.h's tile, the sums went to the
 * stack: 0.75-0.85x kc_mmp_ per matmul on bench/kernels_bench.c, where 4 measures level or faster) */
#ifndef KC_X16S_NT
#if defined(__AVX512F__) && defined(__AVX512BW__)
#define KC_X16S_NT 4
#else
#define KC_X16S_NT KC_X16_NT
#endif
#endif

/* ---- vector paths: kc_x16k.h's digit chains, folded by integer scales ---- */

#if (defined(__AVX512F__) && defined(__AVX512BW__)) || defined(__AVX2__) || defined(__ARM_NEON) || defined(__wasm_simd128__)
#if defined(__AVX512F__) && defined(__AVX512BW__)
#define kx_mullo32 _mm512_mullo_epi32
#define kx_i8i(p) _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(p)))
#define kx_fnmadd _mm512_fnmadd_ps
#define kx_madd16 _mm512_madd_epi16
#elif defined(__AVX2__)
#define kx_mullo32 _mm256_mullo_epi32
#define kx_i8i(p) _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(p)))
#define kx_fnmadd _mm256_fnmadd_ps
#define kx_madd16 _mm256_madd_epi16
#elif defined(__ARM_NEON)
#define kx_mullo32 vmulq_s32
#define kx_i8i(p) kc_neon_i8x4(p)
#define kx_fnmadd(a, b, c) vfmsq_f32(c, a, b)
/* vpmaddwd: 16-bit pairs multiplied, each pair's two products summed into 32 bits */
KC_INLINE kx_vi kx_madd16(kx_vi a, kx_vi b) {
    const int16x8_t x = vreinterpretq_s16_s32(a), y = vreinterpretq_s16_s32(b);
    return vpaddq_s32(vmull_s16(vget_low_s16(x), vget_low_s16(y)), vmull_high_s16(x, y));
}
#else
#define kx_mullo32 wasm_i32x4_mul
#define kx_i8i(p) kc_wasm_i8x4(p)
#define kx_fnmadd(a, b, c) wasm_f32x4_sub(c, wasm_f32x4_mul(a, b))
#define kx_madd16 wasm_i32x4_dot_i16x8 /* vpmaddwd exactly */
#endif

/* Q6_K's codes are q - 32: sum over the 16 half-groups b of sc_b (sum(q x) - 32 sum(x)) takes
 * the -32 once per super-block and token, as 32 sum_b sc_b sh_b: the rows' scales of half-groups
 * 2k and 2k + 1 as int16 pairs (kc__x16s_q6_pairs, once per super-block) against the token's sums
 * sh[2k], sh[2k + 1] (one 32-bit broadcast), one vpmaddwd a pair. The same integers as taking
 * the -32 per half-group (|32 sum_b sc_b sh_b| < 2^28), without the scalar shift, broadcast and
 * subtraction per token and half-group: for a tile of tokens, which shares the pairs (a single
 * token, decode, keeps the subtraction: the pairs would cost it more than they save). */
KC_INLINE void kc__x16s_q6_pairs(const uint8_t *sc, kx_vi pairs[8]) {
    KC_UNROLL for (int k = 0; k < 8; k++)
        pairs[k] = kx_or(kx_and(kx_i8i(sc + 32 * k), kx_set1_32(0xFFFF)), kx_slli32(kx_i8i(sc + 32 * k + 16), 16));
}
KC_INLINE kx_vi kc__x16s_q6_offset(const kx_vi pairs[8], const int16_t sums[16]) {
    kx_vi acc = kx_zero();
    KC_UNROLL for (int k = 0; k < 8; k++) {
        int32_t two;
        memcpy(&two, sums + 2 * k, sizeof two); /* sums[2k] in the low half, as the pairs hold sc */
        acc = kx_add32(acc, kx_madd16(pairs[k], kx_set1_32(two)));
    }
    return kx_slli32(acc, 5);
}

/* Q4_K/Q5_K's mins against one token's sums per 32: sum over g of m[g] * sq[g], an fma chain in
 * group order (m: the row group's 8 mins as floats). */
KC_INLINE kx_vf kc__x16s_mins(const kx_vf m[8], const kc_q16s *x) {
    kx_vf mf = kx_fmul(m[0], kx_fset1(x->sq[0]));
    KC_UNROLL for (int g = 1; g < 8; g++) mf = kx_fmadd(m[g], kx_fset1(x->sq[g]), mf);
    return mf;
}

/* The end of a super-block for one token: the float arithmetic every path shares (above);
 * mf: kc__x16s_mins, or 0 for Q6_K. */
KC_INLINE kx_vf kc__x16s_fold(kx_vf acc, kx_vi vh, kx_vi vl, const kc_q16s *x, kx_vf d, kx_vf dmin, kx_vf mf, int mins) {
    kx_vf u = kx_fmul(d, kx_fmadd(kx_cvt(vh), kx_fset1(128.0f), kx_cvt(vl)));
    if (mins) u = kx_fnmadd(dmin, mf, u);
    return kx_fmadd(u, kx_fset1(x->d), acc);
}

#if KX_LANES < 16
/* One token (decode) on 8- or 4-lane vectors: every part of the 16 rows (halves, quarters) in the
 * same pass over the tiles, each code vector's broadcast of the token's digits serving both, two independent chains
 * in flight (the same integers and float steps as kc__x16s_group, so the same bits). */
KC_INLINE void kc__x16s_group1(const uint8_t *G, int wt, int NS, const kc_q16s *x0, float *Y, const float *bias,
                               int accumulate, int a8) {
    const size_t tb = kc_x16k_tile_bytes(wt);
    const int q6 = wt == KC_WQ6_K;
    enum { parts = KC_X16_ROWS / KX_LANES };
    kx_vf acc[parts];
    KC_UNROLL for (int h = 0; h < parts; h++) acc[h] = kx_fzero();
    for (int s = 0; s < NS; s++) {
        const uint8_t *t = G + (size_t)s * tb;
        const kc_q16s *x = &x0[s];
        kx_vi vh[parts], vl[parts];
        KC_UNROLL for (int h = 0; h < parts; h++) vh[h] = vl[h] = kx_zero();
        for (int g = 0; g < 8; g++) {
            const int b = 8 * s + g;
            kc__x16_prefetch(t + (size_t)g * (tb / 8), tb / 8);
            const int8_t *xh[1] = {x->h + 32 * g}, *xl[1] = {x->l + 32 * g};
            KC_UNROLL for (int h = 0; h < parts; h++) {
                kx_vi w[8];
                kx_vf dA, dB = kx_fzero(), c = kx_fzero(), cB = kx_fzero();
                kc__x16k_unpack(G, wt, b, KX_LANES * h, w, &dA, &dB, &c, &cB);
                KC_UNROLL for (int hf = 0; hf < 2; hf++) {
                    if (hf && !q6) break;
                    const kx_vi sc = q6 ? kx_i8i(t + KC_X16K_Q6_SC + 16 * (2 * g + hf) + KX_LANES * h)
                                        : kx_u8i(t + KC_X16K_K4_SC + 16 * g + KX_LANES * h);
                    kx_vi ih[1], il[1];
                    kc__x16k_chains(w, q6 ? 4 * hf : 0, q6 ? 4 * hf + 4 : 8, xh, xl, 1, wt, a8, ih, il);
                    if (q6) {
                        ih[0] = kx_sub32(ih[0], kx_set1_32(32 * x->sh[2 * g + hf]));
                        if (!a8) il[0] = kx_sub32(il[0], kx_set1_32(32 * x->sl[2 * g + hf]));
                    }
                    vh[h] = kx_add32(vh[h], kx_mullo32(ih[0], sc));
                    if (!a8) vl[h] = kx_add32(vl[h], kx_mullo32(il[0], sc));
                }
            }
        }
        KC_UNROLL for (int h = 0; h < parts; h++) {
            const kx_vf d = kx_f16(t + 2 * KX_LANES * h), dmin = q6 ? kx_fzero() : kx_f16(t + 32 + 2 * KX_LANES * h);
            kx_vf m[8];
            KC_UNROLL for (int g = 0; g < 8; g++) m[g] = q6 ? kx_fzero() : kx_u8f(t + KC_X16K_K4_M + 16 * g + KX_LANES * h);
            acc[h] = kc__x16s_fold(acc[h], vh[h], vl[h], x, d, dmin, q6 ? kx_fzero() : kc__x16s_mins(m, x), !q6);
        }
    }
    KC_UNROLL for (int h = 0; h < parts; h++) kc__x16k_store(Y, 0, &acc[h], 1, KX_LANES * h, bias, accumulate);
}
#endif

/* One group of 16 rows, NT (<= KC_X16S_NT) tokens: Y[t][0..16). */
/* Super-blocks [s0, s1) of a group of 16 rows for NT (<= KC_X16S_NT) tokens. U: NULL, or the
 * groups' code vectors unpacked (kc__x16s_unpacked) for s0..s1; accm: NULL (the sums start at 0
 * and end in Y, with bias and accumulate), or the NT tokens' float sums, 16 apiece, carried
 * in and out (so that a row group taken in pieces adds the same floats in the same order). */
KC_INLINE void kc__x16s_part(const uint8_t *G, int wt, int s0, int s1, const uint8_t *U, const kc_q16s *X, int ldxs,
                             int NT, float *accm, float *Y, int ldy, const float *bias, int accumulate, int a8) {
    const size_t tb = kc_x16k_tile_bytes(wt);
    const int q6 = wt == KC_WQ6_K;
    for (int lo = 0; lo < KC_X16_ROWS; lo += KX_LANES) {
        kx_vf acc[KC_X16S_NT];
        KC_UNROLL for (int j = 0; j < NT; j++) acc[j] = accm ? kx_fload(accm + 16 * j + lo) : kx_fzero();
        for (int s = s0; s < s1; s++) {
            const uint8_t *t = G + (size_t)s * tb;
            kx_vi vh[KC_X16S_NT], vl[KC_X16S_NT];
            KC_UNROLL for (int j = 0; j < NT; j++) vh[j] = vl[j] = kx_zero();
            for (int g = 0; g < 8; g++) {
                const int b = 8 * s + g;
                kx_vi w[8];
                kx_vf dA, dB = kx_fzero(), c = kx_fzero(), cB = kx_fzero();
                if (U) {
                    const uint8_t *u = U + (((size_t)(s - s0) * 8 + (size_t)g) * (KC_X16_ROWS / KX_LANES) + (size_t)(lo / KX_LANES)) * 8 * sizeof(kx_vi);
                    KC_UNROLL for (int k = 0; k < 8; k++) w[k] = kx_load(u + k * sizeof(kx_vi));
                } else {
                    if (!lo) kc__x16_prefetch(t + (size_t)g * (tb / 8), tb / 8);
                    kc__x16k_unpack(G, wt, b, lo, w, &dA, &dB, &c, &cB);
                }
                KC_UNROLL for (int hf = 0; hf < 2; hf++) {
                    if (hf && !q6) break;
                    const kx_vi sc = q6 ? kx_i8i(t + KC_X16K_Q6_SC + 16 * (2 * g + hf) + lo)
                                        : kx_u8i(t + KC_X16K_K4_SC + 16 * g + lo);
                    kx_vi ih[KC_X16S_NT], il[KC_X16S_NT];
                    const int8_t *xh[KC_X16S_NT], *xl[KC_X16S_NT];
                    KC_UNROLL for (int j = 0; j < NT; j++) {
                        xh[j] = X[(size_t)j * (size_t)ldxs + (size_t)s].h + 32 * g;
                        xl[j] = X[(size_t)j * (size_t)ldxs + (size_t)s].l + 32 * g;
                    }
                    kc__x16k_chains(w, q6 ? 4 * hf : 0, q6 ? 4 * hf + 4 : 8, xh, xl, NT, wt, a8, ih, il); /* a8: il 0 */
                    KC_UNROLL for (int j = 0; j < NT; j++) {
                        if (q6 && NT == 1) { /* sum((q - 32) * digit) over the half (a tile: below) */
                            const kc_q16s *x = &X[(size_t)j * (size_t)ldxs + (size_t)s];
                            ih[j] = kx_sub32(ih[j], kx_set1_32(32 * x->sh[2 * g + hf]));
                            if (!a8) il[j] = kx_sub32(il[j], kx_set1_32(32 * x->sl[2 * g + hf]));
                        }
                        vh[j] = kx_add32(vh[j], kx_mullo32(ih[j], sc));
                        if (!a8) vl[j] = kx_add32(vl[j], kx_mullo32(il[j], sc));
                    }
                }
            }
            if (q6 && NT > 1) { /* the codes' -32, for the whole super-block (kc__x16s_q6_offset) */
                kx_vi pairs[8];
                kc__x16s_q6_pairs(t + KC_X16K_Q6_SC + lo, pairs);
                KC_UNROLL for (int j = 0; j < NT; j++) {
                    const kc_q16s *x = &X[(size_t)j * (size_t)ldxs + (size_t)s];
                    vh[j] = kx_sub32(vh[j], kc__x16s_q6_offset(pairs, x->sh));
                    if (!a8) vl[j] = kx_sub32(vl[j], kc__x16s_q6_offset(pairs, x->sl));
                }
            }
            /* the mins are read from the tile (in L1 by now) here rather than kept in registers
             * through the groups: the step's integer sums need those */
            const kx_vf d = kx_f16(t + 2 * lo), dmin = q6 ? kx_fzero() : kx_f16(t + 32 + 2 * lo);
            kx_vf m[8];
            KC_UNROLL for (int g = 0; g < 8; g++) m[g] = q6 ? kx_fzero() : kx_u8f(t + KC_X16K_K4_M + 16 * g + lo);
            KC_UNROLL for (int j = 0; j < NT; j++) {
                const kc_q16s *x = &X[(size_t)j * (size_t)ldxs + (size_t)s];
                acc[j] = kc__x16s_fold(acc[j], vh[j], vl[j], x, d, dmin, q6 ? kx_fzero() : kc__x16s_mins(m, x), !q6);
            }
        }
        if (accm) KC_UNROLL for (int j = 0; j < NT; j++) kx_fstore(accm + 16 * j + lo, acc[j]);
        else kc__x16k_store(Y, ldy, acc, NT, lo, bias, accumulate);
    }
}

/* The code vectors of super-blocks [s0, s1) of a row group, unpacked once into U in the order
 * kc__x16s_part reads them: (s, group, lanes, k). */
KC_INLINE void kc__x16s_unpacked(const uint8_t *G, int wt, int s0, int s1, uint8_t *U) {
    for (int s = s0; s < s1; s++)
        for (int g = 0; g < 8; g++)
            for (int lo = 0; lo < KC_X16_ROWS; lo += KX_LANES) {
                kx_vi w[8];
                kx_vf dA, dB = kx_fzero(), c = kx_fzero(), cB = kx_fzero();
                kc__x16k_unpack(G, wt, 8 * s + g, lo, w, &dA, &dB, &c, &cB);
                uint8_t *u = U + (((size_t)(s - s0) * 8 + (size_t)g) * (KC_X16_ROWS / KX_LANES) + (size_t)(lo / KX_LANES)) * 8 * sizeof(kx_vi);
                KC_UNROLL for (int k = 0; k < 8; k++) memcpy(u + k * sizeof(kx_vi), &w[k], sizeof(kx_vi));
            }
}

/* One group of 16 rows, NT (<= KC_X16S_NT) tokens: Y[t][0..16). */
KC_INLINE void kc__x16s_group(const uint8_t *G, int wt, int NS, const kc_q16s *X, int ldxs, int NT, float *Y, int ldy,
                              const float *bias, int accumulate, int a8) {
#if KX_LANES < 16
    if (NT == 1) {
        kc__x16s_group1(G, wt, NS, X, Y, bias, accumulate, a8);
        return;
    }
#endif
    kc__x16s_part(G, wt, 0, NS, NULL, X, ldxs, NT, NULL, Y, ldy, bias, accumulate, a8);
}

#define KC_X16S_PRE_TOKENS 64 /* tokens per piece: their float sums (4 KiB) on the stack */
#define KC_X16S_PRE_SUPER 4   /* super-blocks per piece: their unpacked code vectors (16 KiB) stay in L1 */
/* A row group against many tokens: the code vectors of 4 super-blocks are unpacked once and read
 * by every token tile of a piece of 64 tokens, whose float sums wait in memory between pieces.
 * Unpacking a vector of Q5_K's or Q6_K's codes takes four or five operations, as many as the
 * multiplies of a tile of tokens (two tokens' vpmaddubsw chains on AVX2, four tokens' vpdpbusd on
 * AVX-512 VNNI), so unpacking once per tile would double the work. The same integers and float
 * steps in the same order as kc__x16s_group: the same bits. */
KC_INLINE void kc__x16s_group_many(const uint8_t *G, int wt, int NS, const kc_q16s *X, int ldxs, int T, float *Y,
                                   int ldy, const float *bias, int accumulate, int a8) {
    _Alignas(64) uint8_t U[KC_X16S_PRE_SUPER * 8 * (KC_X16_ROWS / KX_LANES) * 8 * sizeof(kx_vi)];
    _Alignas(64) float accm[KC_X16S_PRE_TOKENS * 16];
    for (int tc = 0; tc < T; tc += KC_X16S_PRE_TOKENS) {
        const int nt = T - tc < KC_X16S_PRE_TOKENS ? T - tc : KC_X16S_PRE_TOKENS;
        memset(accm, 0, sizeof(float) * 16 * (size_t)nt);
        for (int s0 = 0; s0 < NS; s0 += KC_X16S_PRE_SUPER) {
            const int s1 = NS - s0 < KC_X16S_PRE_SUPER ? NS : s0 + KC_X16S_PRE_SUPER;
            kc__x16s_unpacked(G, wt, s0, s1, U);
            int u = 0;
#define KC__X16S_PRE_STEP(u, n) \
    kc__x16s_part(G, wt, s0, s1, U, X + (size_t)(tc + (u)) * (size_t)ldxs, ldxs, n, accm + 16 * (u), NULL, 0, NULL, 0, a8)
            KC_X16_TOKEN_TILES(u, nt, KC_X16S_NT, KC__X16S_PRE_STEP);
#undef KC__X16S_PRE_STEP
        }
        for (int lo = 0; lo < KC_X16_ROWS; lo += KX_LANES)
            for (int j = 0; j < nt; j++) {
                const kx_vf a = kx_fload(accm + 16 * j + lo);
                kc__x16k_store(Y + (size_t)(tc + j) * (size_t)ldy, ldy, &a, 1, lo, bias, accumulate);
            }
    }
}
#else
/* Portable: the same integers and the same float steps, one (token, row) at a time (a8's low
 * digits are 0 and add nothing: one loop serves both). */
KC_INLINE void kc__x16s_group(const uint8_t *G, int wt, int NS, const kc_q16s *X, int ldxs, int NT, float *Y, int ldy,
                              const float *bias, int accumulate, int a8) {
    (void)a8;
    const size_t tb = kc_x16k_tile_bytes(wt);
    const int q6 = wt == KC_WQ6_K;
    for (int j = 0; j < NT; j++) {
        float acc[KC_X16_ROWS] = {0};
        for (int s = 0; s < NS; s++) {
            const kc_q16s *x = &X[(size_t)j * (size_t)ldxs + (size_t)s];
            const uint8_t *t = G + (size_t)s * tb;
            if (!j) kc__x16_prefetch(t, tb);
            for (int i = 0; i < KC_X16_ROWS; i++) {
                int32_t vh = 0, vl = 0;
                for (int g = 0; g < 8; g++) {
                    int q[32];
                    float dA, dB, c, cB;
                    kc__x16k_lane(G, wt, 8 * s + g, i, q, &dA, &dB, &c, &cB);
                    for (int k = 0; k < 32; k++) {
                        const int sc = q6 ? (int8_t)t[KC_X16K_Q6_SC + 16 * (2 * g + k / 16) + i] : t[KC_X16K_K4_SC + 16 * g + i];
                        const int v = sc * (q6 ? q[k] - 32 : q[k]);
                        vh += v * x->h[32 * g + k];
                        vl += v * x->l[32 * g + k];
                    }
                }
                uint16_t h;
                memcpy(&h, t + 2 * i, 2);
                float u = kc_fp16_to_f32(h) * fmaf((float)vh, 128.0f, (float)vl);
                if (!q6) {
                    float mf = (float)t[KC_X16K_K4_M + i] * x->sq[0];
                    for (int g = 1; g < 8; g++) mf = fmaf((float)t[KC_X16K_K4_M + 16 * g + i], x->sq[g], mf);
                    memcpy(&h, t + 32 + 2 * i, 2);
                    u = fmaf(-kc_fp16_to_f32(h), mf, u);
                }
                acc[i] = fmaf(u, x->d, acc[i]);
            }
        }
        float *y = Y + (size_t)j * (size_t)ldy;
        for (int i = 0; i < KC_X16_ROWS; i++) {
            const float v = acc[i] + (bias ? bias[i] : 0.0f);
            y[i] = accumulate ? y[i] + v : v;
        }
    }
}
#endif

/* ---- AMX: 16 tokens x 16 rows per tile, a super-block per step ---------- */

#if KC_AMX
/* Super-block s of a row group as AMX B tiles: the low and the high byte of each v (v = 256 *
 * high + low) in two 4 KiB planes at P and P + 4096; offset 512 g + 64 k holds code vector k of
 * group g, so K-step c (elements 64c..64c+63) is the 1 KiB at 1024 c, 64 bytes per 4 elements
 * of the 16 rows (the B layout). */
KC_AMX_TARGET static void kc__x16s_planes(const uint8_t *G, int wt, int s, uint8_t *P) {
    const int q6 = wt == KC_WQ6_K;
    const __m512i lo8 = _mm512_set1_epi16(0x00ff), c32 = _mm512_set1_epi16(32);
    const uint8_t *t = G + (size_t)s * kc_x16k_tile_bytes(wt);
    for (int g = 0; g < 8; g++) {
        __m512i w[8];
        __m512 dA, dB = _mm512_setzero_ps(), c = _mm512_setzero_ps(), cB = _mm512_setzero_ps();
        kc__x16k_unpack(G, wt, 8 * s + g, 0, w, &dA, &dB, &c, &cB);
        __m512i sc2[2]; /* each lane's sc (Q6_K: per half) in both of its 16-bit halves */
        for (int hf = 0; hf < 1 + q6; hf++) {
            const __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(t + (q6 ? KC_X16K_Q6_SC + 16 * (2 * g + hf) : KC_X16K_K4_SC + 16 * g)));
            const __m512i sc = q6 ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b);
            sc2[hf] = _mm512_or_si512(_mm512_and_si512(sc, _mm512_set1_epi32(0xffff)), _mm512_slli_epi32(sc, 16));
        }
        for (int k = 0; k < 8; k++) {
            __m512i qe = _mm512_and_si512(w[k], lo8), qo = _mm512_srli_epi16(w[k], 8); /* elements 0, 2 and 1, 3 */
            if (q6) qe = _mm512_sub_epi16(qe, c32), qo = _mm512_sub_epi16(qo, c32);
            const __m512i pe = _mm512_mullo_epi16(qe, sc2[q6 ? k / 4 : 0]), po = _mm512_mullo_epi16(qo, sc2[q6 ? k / 4 : 0]);
            /* low bytes: pe's low byte, po's low byte above it; high bytes: pe's high byte, po's
             * high byte in place (one ternary-logic op each: 0xD8 = c ? b : a, bitwise) */
            _mm512_store_si512(P + 512 * g + 64 * k, _mm512_ternarylogic_epi32(_mm512_slli_epi16(po, 8), pe, lo8, 0xD8));
            _mm512_store_si512(P + 4096 + 512 * g + 64 * k, _mm512_ternarylogic_epi32(po, _mm512_srli_epi16(pe, 8), lo8, 0xD8));
        }
    }
}


/* One tile step's int32 results (C tiles: high digits x low bytes, x high bytes, low digits x
 * low bytes, x high bytes) folded into the float sums of its 16 tokens (16 floats each); sc:
 * the row group's d, dmin and 8 mins for the super-block, as floats. */
KC_AMX_INLINE void
kc__x16s_amx_fold(int32_t (*cb)[16][16], float *acc, const kc_q16s *x, int ldxs, const float (*sc)[16], int mins) {
    const __m512 d = _mm512_load_ps(sc[0]), dmin = _mm512_load_ps(sc[1]);
    __m512 m[8];
    for (int g = 0; g < 8; g++) m[g] = _mm512_load_ps(sc[2 + g]);
    for (int j = 0; j < 16; j++) {
        float *a = acc + 16 * j;
        const __m512i vh = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(cb[1][j]), 8), _mm512_load_si512(cb[0][j]));
        const __m512i vl = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(cb[3][j]), 8), _mm512_load_si512(cb[2][j]));
        const kc_q16s *xj = &x[(size_t)j * (size_t)ldxs];
        _mm512_store_ps(a, kc__x16s_fold(_mm512_load_ps(a), vh, vl, xj, d, dmin, mins ? kc__x16s_mins(m, xj) : _mm512_setzero_ps(), mins));
    }
}

#define KC_X16S_AMX_TOKENS 64 /* tokens per pass: their digits of one super-block (32 KiB) stay in L1 */
#define KC_X16S_AMX_GROUPS 8 /* row groups per chunk: the chunk's float sums (64 tokens: 32 KiB) stay near */

/* Rows r0..r1 (multiples of 16), tokens [0, T16) in tiles of 16 (T16 a multiple of 16).
 * A pass of up to 64 tokens copies their digits into A (scratch) in tile order (the tokens'
 * own blocks are 640 bytes x IN/256 apart, a stride whose lines crowd a few L1 sets). Then per
 * chunk of 8 row groups, super-blocks outermost: the pass's tiles of super-block s (32 KiB)
 * stay in L1 while the chunk's groups meet them, each group's B planes are made once per pass,
 * and the float sums wait in acc (1 KiB per row group and token tile). Ordered by row group
 * instead, every tile step read its activations from L2; with all rows in one chunk, its sums.
 * Software pipelined: each tile step's int32 results are read back one step later (cb[2]),
 * and the B planes are made one (s, group) ahead (P, P + 8192), so that no load waits on the
 * stores just before it (an AVX load of a tile just stored, a tile load of planes just written:
 * each stalled for most of a step). */
KC_AMX_TARGET static void kc__x16s_amx(const void *W, int wt, const kc_q16s *X, int ldxs, float *Y, int ldy, int T16,
                                       int IN, int r0, int r1, const float *bias, int accumulate, uint8_t *P, float *acc,
                                       uint8_t *A) {
    const int NS = IN / 256, q6 = wt == KC_WQ6_K, NG = (r1 - r0) / KC_X16_ROWS;
    const size_t tb = kc_x16k_tile_bytes(wt), gb = (size_t)NS * tb;
    const uint8_t *W0 = (const uint8_t *)W + (size_t)(r0 / KC_X16_ROWS) * gb;
    static const uint8_t rows[8] = {16, 16, 16, 16, 16, 16, 16, 16};
    static const uint16_t colsb[8] = {64, 64, 64, 64, 64, 64, 64, 64};
    kc_amx_configure(rows, colsb);
    int32_t cb[2][4][16][16] __attribute__((aligned(64)));
    float sc[2][10][16] __attribute__((aligned(64))); /* d, dmin, m[8] of the (s, group) in flight */
    for (int tc = 0; tc < T16; tc += KC_X16S_AMX_TOKENS) {
        const int nt = T16 - tc < KC_X16S_AMX_TOKENS ? T16 - tc : KC_X16S_AMX_TOKENS, ntl = nt / 16;
        /* A: [s][token tile][K-step c][high, low][16 tokens][64 bytes] */
        for (int j = 0; j < nt; j++)
            for (int s = 0; s < NS; s++) {
                const kc_q16s *x = &X[(size_t)(tc + j) * (size_t)ldxs + (size_t)s];
                uint8_t *a = A + ((size_t)s * (size_t)ntl + (size_t)(j / 16)) * 8192 + 64 * (size_t)(j % 16);
                for (int c = 0; c < 4; c++) {
                    memcpy(a + 2048 * c, x->h + 64 * c, 64);
                    memcpy(a + 2048 * c + 1024, x->l + 64 * c, 64);
                }
            }
        int step = 0, cur = 0, have = 0;
        float *pend_acc = NULL;
        const kc_q16s *pend_x = NULL;
        int pend_sc = 0;
        kc__x16s_planes(W0, wt, 0, P);
        for (int g0 = 0; g0 < NG; g0 += KC_X16S_AMX_GROUPS) {
            const int cg = NG - g0 < KC_X16S_AMX_GROUPS ? NG - g0 : KC_X16S_AMX_GROUPS;
            memset(acc, 0, sizeof(float) * (size_t)nt * (size_t)cg * 16);
            for (int s = 0; s < NS; s++)
                for (int gi = 0; gi < cg; gi++, step++) {
                    const uint8_t *t = W0 + (size_t)(g0 + gi) * gb + (size_t)s * tb;
                    const uint8_t *PL = P + 8192 * (size_t)(step % 2);
                    float (*scs)[16] = sc[step % 2];
                    _mm512_store_ps(scs[0], _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)t)));
                    _mm512_store_ps(scs[1], q6 ? _mm512_setzero_ps() : _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(t + 32))));
                    for (int g = 0; g < 8; g++)
                        _mm512_store_ps(scs[2 + g], q6 ? _mm512_setzero_ps()
                                                       : _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(t + KC_X16K_K4_M + 16 * g)))));
                    for (int tt = 0; tt < ntl; tt++) {
                        const uint8_t *A0 = A + ((size_t)s * (size_t)ntl + (size_t)tt) * 8192;
                        _tile_zero(0);
                        _tile_zero(1);
                        _tile_zero(2);
                        _tile_zero(3);
                        for (int c = 0; c < 4; c++) {
                            _tile_loadd(4, A0 + 2048 * c, 64);
                            _tile_loadd(5, A0 + 2048 * c + 1024, 64);
                            _tile_loadd(6, PL + 1024 * c, 64);
                            _tile_loadd(7, PL + 4096 + 1024 * c, 64);
                            _tile_dpbsud(0, 4, 6); /* high digits x low bytes */
                            _tile_dpbsud(2, 5, 6); /* low digits x low bytes */
                            if (q6) {              /* Q6_K's high bytes are signed */
                                _tile_dpbssd(1, 4, 7);
                                _tile_dpbssd(3, 5, 7);
                            } else {
                                _tile_dpbsud(1, 4, 7);
                                _tile_dpbsud(3, 5, 7);
                            }
                        }
                        _tile_stored(0, cb[cur][0], 64);
                        _tile_stored(1, cb[cur][1], 64);
                        _tile_stored(2, cb[cur][2], 64);
                        _tile_stored(3, cb[cur][3], 64);
                        if (have) kc__x16s_amx_fold(cb[cur ^ 1], pend_acc, pend_x, ldxs, (const float (*)[16])sc[pend_sc], !q6);
                        pend_acc = acc + ((size_t)gi * (size_t)nt + 16 * (size_t)tt) * 16;
                        pend_x = X + (size_t)(tc + 16 * tt) * (size_t)ldxs + (size_t)s, pend_sc = step % 2;
                        have = 1, cur ^= 1;
                    }
                    /* the next (s, group)'s planes: this chunk's next group, its next super-block, the next chunk */
                    int ngi, ns;
                    kc_amx_next_step(g0, gi, cg, s, NS, KC_X16S_AMX_GROUPS, &ngi, &ns);
                    if (ngi < NG) kc__x16s_planes(W0 + (size_t)ngi * gb, wt, ns, P + 8192 * (size_t)((step + 1) % 2));
                }
            if (have) kc__x16s_amx_fold(cb[cur ^ 1], pend_acc, pend_x, ldxs, (const float (*)[16])sc[pend_sc], !q6);
            have = 0;
            kc_amx_write_sums(Y + (size_t)tc * (size_t)ldy, ldy, acc, nt, cg, r0 + KC_X16_ROWS * g0, bias, accumulate);
        }
    }
    _tile_release();
}

#endif

/* Y[t*ldy + r] = (accumulate ? Y : 0) + W[r] . X[t] (+ bias[r]) for rows r0 <= r < r1
 * (multiples of 16), T tokens of kc_q16s activations (ldxs blocks apart). Whole tiles of 16
 * tokens take AMX where the process has it, the rest the vector path: the same bits. a8: the
 * activations of kc_quantize_q16s_a8 (AMX multiplies their zero low digits as it does any). */
KC_INLINE void kc__x16s_mms(const void *W, int wt, const kc_q16s *X, int ldxs, float *Y, int ldy, int T, int IN, int r0,
                            int r1, const float *bias, int accumulate, int a8) {
    const int NS = IN / 256;
    const size_t gb = (size_t)NS * kc_x16k_tile_bytes(wt);
    int t = 0;
#if KC_AMX
    if (T >= 16 && kc_amx_ready()) {
        const size_t acc_bytes = sizeof(float) * KC_X16S_AMX_TOKENS * KC_X16S_AMX_GROUPS * KC_X16_ROWS;
        uint8_t *P = kc_amx_scratch(16384 + acc_bytes + (size_t)KC_X16S_AMX_TOKENS * (size_t)IN * 2);
        if (P) {
            t = T / 16 * 16;
            kc__x16s_amx(W, wt, X, ldxs, Y, ldy, t, IN, r0, r1, bias, accumulate, P, (float *)(void *)(P + 16384),
                         P + 16384 + acc_bytes);
        }
    }
#endif
    for (int r = r0; r < r1; r += KC_X16_ROWS) {
        const uint8_t *G = (const uint8_t *)W + (size_t)(r / KC_X16_ROWS) * gb;
        const float *bi = bias ? bias + r : NULL;
        int u = t;
#if (defined(__AVX512F__) && defined(__AVX512BW__)) || defined(__AVX2__) || defined(__ARM_NEON) || defined(__wasm_simd128__)
        if (T - u >= KC_X16S_NT * 4) { /* enough token tiles to share the unpacking */
            kc__x16s_group_many(G, wt, NS, X + (size_t)u * (size_t)ldxs, ldxs, T - u, Y + (size_t)u * (size_t)ldy + r, ldy,
                                bi, accumulate, a8);
            continue;
        }
#endif
#define KC__X16S_STEP(u, nt) \
    kc__x16s_group(G, wt, NS, X + (size_t)(u) * (size_t)ldxs, ldxs, nt, Y + (size_t)(u) * (size_t)ldy + r, ldy, bi, accumulate, a8)
        KC_X16_TOKEN_TILES(u, T, KC_X16S_NT, KC__X16S_STEP);
#undef KC__X16S_STEP
    }
}

/* kc_mms_TYPE: against kc_quantize_q16s's activations; kc_mms8_TYPE: against kc_quantize_q16s_a8's. */
#define KC_X16S_MMS(name, WT)                                                                                          \
    static inline void kc_mms_##name(const void *W, const kc_q16s *X, int ldxs, float *Y, int ldy, int T, int IN, int r0, \
                                     int r1, const float *bias, int accumulate) {                                      \
        kc__x16s_mms(W, WT, X, ldxs, Y, ldy, T, IN, r0, r1, bias, accumulate, 0);                                     \
    }                                                                                                                  \
    static inline void kc_mms8_##name(const void *W, const kc_q16s *X, int ldxs, float *Y, int ldy, int T, int IN,      \
                                      int r0, int r1, const float *bias, int accumulate) {                             \
        kc__x16s_mms(W, WT, X, ldxs, Y, ldy, T, IN, r0, r1, bias, accumulate, 1);                                     \
    }
KC_X16S_MMS(q4_k, KC_WQ4_K)
KC_X16S_MMS(q5_k, KC_WQ5_K)
KC_X16S_MMS(q6_k, KC_WQ6_K)
#undef KC_X16S_MMS

#endif
