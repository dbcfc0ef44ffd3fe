/* kc_x16.h — the 16-row interleaved layout (x16) of Q8_0/Q4_0/Q4_1 weights and its matmul: integer dot products against 15-bit activations. */
#ifndef INGOT_KC_X16_H
#define INGOT_KC_X16_H

#include "kc_matmul.h"

/* Why a layout of its own. In the row-major GGUF layout a decode GEMV
 * finishes each (row, 32-block) pair with a horizontal step: one integer or
 * float dot product of 32 values, then a scalar scale. Interleaving 16 rows
 * turns that around: one 512-bit register holds the same 4 codes of 16
 * rows, a 4-byte broadcast of the activations feeds all 16 rows in one
 * vpdpbusd, and the per-block scales of the 16 rows are one vector. Nothing
 * is horizontal any more, and the weights of 16 rows stream contiguously.
 * The generator knows every shape, so it chooses this layout per matrix at
 * build time (rows a multiple of 16); the loader writes it once at load. It
 * has exactly the bytes of the row-major blocks, only reordered.
 *
 * Tile (group g of rows 16g..16g+15, block b of 32 columns) at byte offset
 * (g * NB + b) * kc_x16_tile_bytes(wt), NB = IN / 32:
 *   d[16]       f16 scales, lane i = row 16g+i                     32 bytes
 *   m[16]       f16 mins (Q4_1 only)                               32 bytes
 *   codes       Q4: 4 vectors of 64 bytes; in vector p, lane i holds
 *               bytes 4i..4i+3 = elements 4p..4p+3 of row i in the low
 *               nibbles and elements 16+4p..19+4p in the high nibbles.
 *               Q8_0: 8 vectors of 64 bytes; in vector c, lane i holds
 *               elements 4c..4c+3 of row i, each stored as q + 128 (u8).
 * Q8_0's codes are biased to unsigned because vpdpbusd multiplies unsigned
 * by signed bytes; the bias comes back out as -128 * sum(x) per block.
 *
 * Activations for the integer path (kc_q16): each block of 32 values is
 * scaled to integers q in [-16256, 16256] (d = amax / 16256) and q is split
 * into two signed bytes, q = 128 * h + l with h in [-127, 127] and l in
 * [-64, 63]. A weight block's dot product is then 128 * dot(w, h) + dot(w, l),
 * two exact vpdpbusd chains. The rounding error of x is at most d / 2 =
 * amax / 32512 per value, 128 times finer than llama.cpp's int8 activations,
 * which is what makes it a default: SmolLM2's perplexity does not move (see
 * bench/RESULTS.md), while the arithmetic is that of an int8 kernel. */

#define KC_X16_ROWS 16
/* tokens per tile: a float accumulator and two integer chains per token
 * plus the code vector in use fit 32 zmm registers at 8 (measured with
 * bench/kernels_bench.c: 16-token steps 1.16x faster than tiles of 4, decode
 * unchanged), 16 ymm at 2 */
#ifndef KC_X16_NT
#if defined(__AVX512F__) && defined(__AVX512BW__)
#define KC_X16_NT 8
#elif defined(__AVX2__)
#define KC_X16_NT 2
#else
#define KC_X16_NT 4
#endif
#endif
#define KC_X16_QMAX 16256 /* 127 * 128 */

typedef struct {
    float d;      /* x ~= d * (128 * h + l) */
    float s;      /* d * sum(128 * h + l): the Q4_0 (-8) and Q8_0 (-128) offsets and Q4_1's min term need it */
    int8_t h[32]; /* high digit */
    int8_t l[32]; /* low digit */
    int32_t s16[2]; /* sum(128 * h + l) over elements 0..15 and 16..31: Q6_K's -32 per 16 weights (kc_x16k.h) */
} kc_q16;
_Static_assert(sizeof(kc_q16) == 80, "generator/plan.lua's Q16_BLOCK_BYTES plans this size");

KC_INLINE size_t kc_x16_tile_bytes(int wt) { return wt == KC_WQ8_0 ? 544 : wt == KC_WQ4_0 ? 288 : 320; }
KC_INLINE int kc_x16_hdr(int wt) { return wt == KC_WQ4_1 ? 64 : 32; }

/* Software prefetch of the weight stream. A row group's tiles are
 * contiguous and the groups follow one another, so the bytes a fixed
 * distance past the block in use are the next ones read. The hardware
 * prefetcher alone kept one core's decode GEMV 10-30% under DRAM speed,
 * more for the K-quants, whose per-block work is larger; asking for the
 * block KC_X16_PF_BLOCKS ahead (a few KB) into L1 as each block starts
 * brought Q4_0 / Q4_K / Q6_K / Q5_0 from 14.5 / 11.2 / 10.2 / 12.7 to 16.8 /
 * 16.0 / 14.3 / 15.5 GB/s on 2048->5632 from DRAM (one thread; 6 and 10
 * blocks ahead measured worse) and prefill 3-8% faster. The block
 * KC_X16_PF_L2_BLOCKS ahead goes to L2 as well: +11% / +8% SmolLM2 Q4_1
 * decode on 1 / 2 threads, whose weights stream from L3, and +0-3% for a
 * 1.1B model streaming from DRAM (24, 32 and 48 blocks alike). A prefetch
 * past the end of the weights is harmless: it never faults. */
#define KC_X16_PF_BLOCKS 8
#define KC_X16_PF_L2_BLOCKS 32
/* Q8_0 is the exception: its tiles hold twice the bytes per weight of the
 * 4-bit types for the same vector work, and on the 2-core AMD EPYC decode
 * ran faster with the hardware prefetcher alone (SmolLM2 Q8_0 132-147 ->
 * 170-191 tokens/s at 1 thread; a 1.1B Q8_0 18-19 -> 21-25, 29 -> 31-34 at
 * 2 threads; alternated), while the 4-bit types lost up to half their
 * decode speed without it (1.1B Q4_K_M 40 -> 17 tokens/s at 1 thread).
 * That holds for steps of one to three tokens only. From tiles of 4 tokens
 * on, a block's vector work is 4-8 times longer, and without the prefetch
 * the stream stalled it: SmolLM2's Q8_0 LM head (576 -> 49152, 30 MB from
 * DRAM, one thread) ran at 114-132 GFLOP/s for 4-16 tokens with the
 * hardware prefetcher alone and at 156-179 with it, the Q4_1 kernel's rate;
 * 2 tokens 80 against 77, within the noise. So Q8_0 is prefetched in tiles
 * of 4 tokens or more (the AVX-512 path; the AVX2 path, compute-bound in its
 * vpmaddubsw chains, measured no gain on this CPU: 47 and 54 GFLOP/s at 2
 * and 16 tokens with the prefetch, 52 and 53 without). */
KC_INLINE void kc__x16_prefetch(const uint8_t *block, size_t block_bytes) {
    const uint8_t *p = block + KC_X16_PF_BLOCKS * block_bytes, *p2 = block + KC_X16_PF_L2_BLOCKS * block_bytes;
    KC_UNROLL for (size_t o = 0; o < block_bytes; o += 64) {
        __builtin_prefetch(p + o, 0, 3);
        __builtin_prefetch(p2 + o, 0, 2);
    }
}

/* Quantizes n floats (a multiple of 32) into n/32 kc_q16 blocks; rounds to
 * nearest-even on every path, so every instruction set gives the same bits. */
static inline void kc_quantize_q16(const float *x, kc_q16 *out, int n) {
    for (int b = 0; b < n / 32; b++, x += 32) {
        kc_q16 *o = &out[b];
#if defined(__AVX512F__)
        const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        const __m512 vid = _mm512_set1_ps(amax > 0.0f ? (float)KC_X16_QMAX / amax : 0.0f);
        const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, vid)), q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, vid));
        const __m512i c64 = _mm512_set1_epi32(64);
        const __m512i h0 = _mm512_srai_epi32(_mm512_add_epi32(q0, c64), 7), h1 = _mm512_srai_epi32(_mm512_add_epi32(q1, c64), 7);
        const __m512i l0 = _mm512_sub_epi32(q0, _mm512_slli_epi32(h0, 7)), l1 = _mm512_sub_epi32(q1, _mm512_slli_epi32(h1, 7));
        _mm_storeu_si128((__m128i *)(void *)o->h, _mm512_cvtepi32_epi8(h0));
        _mm_storeu_si128((__m128i *)(void *)(o->h + 16), _mm512_cvtepi32_epi8(h1));
        _mm_storeu_si128((__m128i *)(void *)o->l, _mm512_cvtepi32_epi8(l0));
        _mm_storeu_si128((__m128i *)(void *)(o->l + 16), _mm512_cvtepi32_epi8(l1));
        o->s16[0] = _mm512_reduce_add_epi32(q0);
        o->s16[1] = _mm512_reduce_add_epi32(q1);
        const int sum = o->s16[0] + o->s16[1];
#elif defined(__ARM_NEON)
        float32x4_t v[8];
        float32x4_t m = vdupq_n_f32(0.0f);
        KC_UNROLL for (int k = 0; k < 8; k++) m = vmaxq_f32(m, vabsq_f32(v[k] = vld1q_f32(x + 4 * k)));
        const float amax = vmaxvq_f32(m);
        const float id = amax > 0.0f ? (float)KC_X16_QMAX / amax : 0.0f;
        int32x4_t sums[2] = {vdupq_n_s32(0), vdupq_n_s32(0)};
        int16x8_t h16[4], l16[4];
        KC_UNROLL for (int k = 0; k < 8; k += 2) {
            int32x4_t hk[2], lk[2];
            KC_UNROLL for (int e = 0; e < 2; e++) {
                const int32x4_t q = vcvtnq_s32_f32(vmulq_n_f32(v[k + e], id)); /* nearest even */
                hk[e] = vshrq_n_s32(vaddq_s32(q, vdupq_n_s32(64)), 7);        /* floor((q + 64) / 128) */
                lk[e] = vsubq_s32(q, vshlq_n_s32(hk[e], 7));
                sums[k / 4] = vaddq_s32(sums[k / 4], q);
            }
            h16[k / 2] = vcombine_s16(vmovn_s32(hk[0]), vmovn_s32(hk[1]));
            l16[k / 2] = vcombine_s16(vmovn_s32(lk[0]), vmovn_s32(lk[1]));
        }
        vst1q_s8(o->h, vcombine_s8(vmovn_s16(h16[0]), vmovn_s16(h16[1])));
        vst1q_s8(o->h + 16, vcombine_s8(vmovn_s16(h16[2]), vmovn_s16(h16[3])));
        vst1q_s8(o->l, vcombine_s8(vmovn_s16(l16[0]), vmovn_s16(l16[1])));
        vst1q_s8(o->l + 16, vcombine_s8(vmovn_s16(l16[2]), vmovn_s16(l16[3])));
        o->s16[0] = vaddvq_s32(sums[0]);
        o->s16[1] = vaddvq_s32(sums[1]);
        const int sum = o->s16[0] + o->s16[1];
#else
        float amax = 0.0f;
        for (int i = 0; i < 32; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
        const float id = amax > 0.0f ? (float)KC_X16_QMAX / amax : 0.0f;
        int sum = 0;
        for (int i = 0; i < 32; i++) {
            const int q = (int)nearbyintf(x[i] * id);
            const int h = (q + 64) >> 7; /* floor((q + 64) / 128): arithmetic shift */
            o->h[i] = (int8_t)h;
            o->l[i] = (int8_t)(q - 128 * h);
            sum += q;
            if (i == 15) o->s16[0] = sum;
        }
        o->s16[1] = sum - o->s16[0];
#endif
        o->d = amax / (float)KC_X16_QMAX;
        o->s = o->d * (float)sum;
    }
}

/* --act-quant q8 in the same blocks: kc_quantize_q8's codes (x * 127 / amax,
 * nearest-even, in [-127, 127]: llama.cpp's int8 activations) as the high
 * digits, every low digit 0, d = its scale / 128 (exact: 16256 = 127 * 128)
 * and its s. Read by the kc_mmp8_ kernels, which skip the low digits' chain:
 * half the integer work of q16. */
static inline void kc_quantize_q16a8(const float *x, kc_q16 *out, int n) {
    for (int b = 0; b < n / 32; b++) {
        kc_q8 q;
        kc_quantize_q8(x + 32 * b, &q, 32);
        kc_q16 *o = &out[b];
        memcpy(o->h, q.qs, sizeof o->h);
        memset(o->l, 0, sizeof o->l);
        o->s16[0] = o->s16[1] = 0;
        for (int i = 0; i < 32; i++) o->s16[i / 16] += 128 * q.qs[i];
        o->d = q.d / 128.0f;
        o->s = q.s;
    }
}

/* ---- layout: write, read back ------------------------------------------ */

/* Rewrites rows [0, R) of a row-major block matrix (IN columns) into x16
 * tiles at dst (the same number of bytes). R is a multiple of 16. */
static inline void kc_x16_repack(int wt, const void *src, void *dst, int64_t R, int IN) {
    const int NB = IN / 32, hdr = kc_x16_hdr(wt);
    const size_t tb = kc_x16_tile_bytes(wt);
    for (int64_t g = 0; g < R / KC_X16_ROWS; g++)
        for (int b = 0; b < NB; b++) {
            uint8_t *t = (uint8_t *)dst + ((size_t)g * (size_t)NB + (size_t)b) * tb;
            for (int i = 0; i < KC_X16_ROWS; i++) {
                const size_t blk = (size_t)(g * KC_X16_ROWS + i) * (size_t)NB + (size_t)b;
                if (wt == KC_WQ8_0) {
                    const block_q8_0 *s = (const block_q8_0 *)src + blk;
                    memcpy(t + 2 * i, &s->d, 2);
                    for (int k = 0; k < 32; k++) t[hdr + 64 * (k / 4) + 4 * i + k % 4] = (uint8_t)(s->qs[k] + 128);
                } else {
                    const uint8_t *qs;
                    if (wt == KC_WQ4_0) {
                        const block_q4_0 *s = (const block_q4_0 *)src + blk;
                        memcpy(t + 2 * i, &s->d, 2);
                        qs = s->qs;
                    } else {
                        const block_q4_1 *s = (const block_q4_1 *)src + blk;
                        memcpy(t + 2 * i, &s->d, 2);
                        memcpy(t + 32 + 2 * i, &s->m, 2);
                        qs = s->qs;
                    }
                    /* byte k of a row-major block: element k low, element 16+k high */
                    for (int k = 0; k < 16; k++) t[hdr + 64 * (k / 4) + 4 * i + k % 4] = qs[k];
                }
            }
        }
}

/* The code of element k (0..31) of lane i in a tile: Q8_0 signed, Q4 the nibble. */
KC_INLINE int kc__x16_code(const uint8_t *t, int wt, int i, int k) {
    const int hdr = kc_x16_hdr(wt);
    if (wt == KC_WQ8_0) return (int)t[hdr + 64 * (k / 4) + 4 * i + k % 4] - 128;
    const uint8_t byte = t[hdr + 64 * ((k % 16) / 4) + 4 * i + k % 4];
    return k < 16 ? byte & 15 : byte >> 4;
}
/* d and c of lane i, so that a weight is fma(q, d, c) (c = -8d for Q4_0,
 * m for Q4_1, 0 for Q8_0): the row-major f32 kernels' convention. */
KC_INLINE void kc__x16_scales(const uint8_t *t, int wt, int i, float *d, float *c) {
    uint16_t h;
    memcpy(&h, t + 2 * i, 2);
    *d = kc_fp16_to_f32(h);
    if (wt == KC_WQ4_1) memcpy(&h, t + 32 + 2 * i, 2);
    *c = wt == KC_WQ4_0 ? -8.0f * *d : wt == KC_WQ4_1 ? kc_fp16_to_f32(h) : 0.0f;
}

/* Dequantizes row `row` (IN elements) of an x16 matrix into out, bit for
 * bit what kc_embed_row gives for the row-major row (the embedding lookup
 * of a table tied to an x16 LM head goes through here). */
static inline void kc_x16_dequantize_row(int wt, const void *W, int IN, int64_t row, float *out) {
    const int NB = IN / 32, i = (int)(row % KC_X16_ROWS);
    for (int b = 0; b < NB; b++) {
        const uint8_t *t = (const uint8_t *)W + ((size_t)(row / KC_X16_ROWS) * (size_t)NB + (size_t)b) * kc_x16_tile_bytes(wt);
        float d, c;
        kc__x16_scales(t, wt, i, &d, &c);
        for (int k = 0; k < 32; k++) {
            const int q = kc__x16_code(t, wt, i, k);
            out[32 * b + k] = wt == KC_WQ8_0 ? d * (float)q : wt == KC_WQ4_0 ? d * (float)(q - 8) : d * (float)q + c;
        }
    }
}

/* ---- decode: integer dot products -------------------------------------- */

#if defined(__AVX512F__) && defined(__AVX512BW__)
#if defined(__AVX512VNNI__)
#define KC_X16_VNNI 1
KC_INLINE __m512i kc__x16_dp(__m512i acc, __m512i u, __m512i s) { return _mm512_dpbusd_epi32(acc, u, s); }
#else
#define KC_X16_VNNI 0
/* u * s summed over 4-byte groups without VNNI: pairs into int16 (no
 * saturation: the caller keeps |u * s| * 2 below 32768), then pairs again */
KC_INLINE __m512i kc__x16_dp(__m512i acc, __m512i u, __m512i s) {
    return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1)));
}
#endif

/* One group of 16 rows, NT (<= KC_X16_NT) tokens: Y[t][0..16) of the group. */
KC_INLINE void kc__x16_group(const uint8_t *G, int wt, int NB, const kc_q16 *X, int ldxb, int NT, float *Y, int ldy,
                             const float *bias, int accumulate, int a8) {
    const size_t tb = kc_x16_tile_bytes(wt);
    const int hdr = kc_x16_hdr(wt);
    __m512 acc[KC_X16_NT];
    KC_UNROLL for (int j = 0; j < NT; j++) acc[j] = _mm512_setzero_ps();
    for (int b = 0; b < NB; b++) {
        const uint8_t *t = G + (size_t)b * tb;
        if (wt != KC_WQ8_0 || NT >= 4) kc__x16_prefetch(t, tb); /* see KC_X16_PF_BLOCKS, and Q8_0 there */
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)t));
        /* the tile's 8 code vectors in turn, each against every token of the
         * tile: 2 NT integer chains stay in registers across the block */
        __m512i ih[KC_X16_NT], il[KC_X16_NT];
        KC_UNROLL for (int j = 0; j < NT; j++) ih[j] = il[j] = _mm512_setzero_si512();
        KC_UNROLL for (int c = 0; c < 8; c++) {
            /* Q4: vector c holds elements 4c.. (c < 4: low nibbles) or 16+4(c-4).. (high nibbles):
             * the activations of elements 4c.. either way, in the row-major order of kc_q16 */
            __m512i w;
            if (wt == KC_WQ8_0) w = _mm512_loadu_si512((const void *)(t + hdr + 64 * c));
            else {
                const __m512i v = _mm512_loadu_si512((const void *)(t + hdr + 64 * (c % 4)));
                w = _mm512_and_si512(c < 4 ? v : _mm512_srli_epi16(v, 4), _mm512_set1_epi8(0x0f));
            }
#if !KC_X16_VNNI
            __mmask64 neg = 0;
            if (wt == KC_WQ8_0) { /* |w| against x with w's sign: |w| <= 128 keeps maddubs exact */
                const __m512i ws = _mm512_xor_si512(w, _mm512_set1_epi8((char)0x80));
                neg = _mm512_movepi8_mask(ws);
                w = _mm512_abs_epi8(ws);
            }
#endif
            KC_UNROLL for (int j = 0; j < NT; j++) {
                const kc_q16 *x = &X[(size_t)j * (size_t)ldxb + (size_t)b];
                int32_t xh, xl;
                memcpy(&xh, x->h + 4 * c, 4);
                memcpy(&xl, x->l + 4 * c, 4);
                __m512i vh = _mm512_set1_epi32(xh), vl = _mm512_set1_epi32(xl);
#if !KC_X16_VNNI
                if (wt == KC_WQ8_0)
                    vh = _mm512_mask_sub_epi8(vh, neg, _mm512_setzero_si512(), vh),
                    vl = _mm512_mask_sub_epi8(vl, neg, _mm512_setzero_si512(), vl);
#endif
                ih[j] = kc__x16_dp(ih[j], w, vh);
                if (!a8) il[j] = kc__x16_dp(il[j], w, vl); /* a8: the low digits are 0 */
            }
        }
        KC_UNROLL for (int j = 0; j < NT; j++) {
            const kc_q16 *x = &X[(size_t)j * (size_t)ldxb + (size_t)b];
            const __m512 f = _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_slli_epi32(ih[j], 7), il[j]));
            if (wt == KC_WQ4_1) {
                const __m512 mw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(t + 32)));
                acc[j] = _mm512_fmadd_ps(dw, _mm512_mul_ps(f, _mm512_set1_ps(x->d)), acc[j]);
                acc[j] = _mm512_fmadd_ps(mw, _mm512_set1_ps(x->s), acc[j]);
            } else {
                /* Q4_0: codes are q + 8; Q8_0 (VNNI): codes are q + 128 */
                const float off = wt == KC_WQ4_0 ? -8.0f : KC_X16_VNNI ? -128.0f : 0.0f;
                acc[j] = _mm512_fmadd_ps(dw, _mm512_fmadd_ps(f, _mm512_set1_ps(x->d), _mm512_set1_ps(off * x->s)), acc[j]);
            }
        }
    }
    const __m512 bv = bias ? _mm512_loadu_ps(bias) : _mm512_setzero_ps();
    KC_UNROLL for (int j = 0; j < NT; j++) {
        float *y = Y + (size_t)j * (size_t)ldy;
        __m512 v = _mm512_add_ps(acc[j], bv);
        if (accumulate) v = _mm512_add_ps(_mm512_loadu_ps(y), v);
        _mm512_storeu_ps(y, v);
    }
}
#elif defined(__AVX2__)
/* AVX2: the 16 lanes of a tile vector as two halves of 8 rows (bytes
 * 0..31 and 32..63), with kc_matmul.h's kc__dot (AVX-VNNI vpdpbusd, or
 * vpmaddubsw + vpmaddwd, exact for |u * s| * 2 < 32768). */
/* Block b's half (8 rows) of a tile against NT tokens, into acc[0..NT). */
KC_INLINE void kc__x16_block_half(const uint8_t *t, int wt, int b, int half, const kc_q16 *X, int ldxb, int NT,
                                  __m256 acc[], int a8) {
    const int hdr = kc_x16_hdr(wt);
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(t + 16 * half)));
    __m256i w[8];
    if (wt == KC_WQ8_0) {
        KC_UNROLL for (int c = 0; c < 8; c++) {
            w[c] = _mm256_loadu_si256((const __m256i *)(const void *)(t + hdr + 64 * c + 32 * half));
#if !KC_HAVE_VNNI
            w[c] = _mm256_xor_si256(w[c], _mm256_set1_epi8((char)0x80)); /* signed codes again */
#endif
        }
    } else {
        const __m256i m4 = _mm256_set1_epi8(0x0f);
        KC_UNROLL for (int p = 0; p < 4; p++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(t + hdr + 64 * p + 32 * half));
            w[p] = _mm256_and_si256(v, m4);
            w[p + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        }
    }
    KC_UNROLL for (int j = 0; j < NT; j++) {
        const kc_q16 *x = &X[(size_t)j * (size_t)ldxb + (size_t)b];
        __m256i dot; /* per row of the half: 128 * dot(w, h) + dot(w, l) */
        if (wt != KC_WQ8_0 && !KC_HAVE_VNNI) {
            /* Q4 without VNNI: a vpmaddubsw lane is two products of a code <= 15 and a digit
               <= 127 (<= 3810), so the 8 of a block add up exactly in 16 bits (<= 30480) and
               one vpmaddwd per digit widens them: 18 multiplies a block, not 32 (vpmaddubsw
               and vpmaddwd share the multiply ports; the same integers, so the same bits). */
            __m256i sh = _mm256_setzero_si256(), sl = _mm256_setzero_si256();
            KC_UNROLL for (int c = 0; c < 8; c++) {
                int32_t xh, xl;
                memcpy(&xh, x->h + 4 * c, 4);
                memcpy(&xl, x->l + 4 * c, 4);
                sh = _mm256_add_epi16(sh, _mm256_maddubs_epi16(w[c], _mm256_set1_epi32(xh)));
                if (!a8) sl = _mm256_add_epi16(sl, _mm256_maddubs_epi16(w[c], _mm256_set1_epi32(xl)));
            }
            dot = _mm256_madd_epi16(sh, _mm256_set1_epi16(128));
            if (!a8) dot = _mm256_add_epi32(dot, _mm256_madd_epi16(sl, _mm256_set1_epi16(1)));
        } else {
            __m256i ih = _mm256_setzero_si256(), il = _mm256_setzero_si256();
            KC_UNROLL for (int c = 0; c < 8; c++) {
                int32_t xh, xl;
                memcpy(&xh, x->h + 4 * c, 4);
                memcpy(&xl, x->l + 4 * c, 4);
                const __m256i vh = _mm256_set1_epi32(xh), vl = _mm256_set1_epi32(xl);
                if (wt == KC_WQ8_0 && !KC_HAVE_VNNI) { /* |w| against x with w's sign: |w| <= 127 */
                    const __m256i aw = _mm256_sign_epi8(w[c], w[c]);
                    ih = kc__dot(ih, aw, _mm256_sign_epi8(vh, w[c]));
                    if (!a8) il = kc__dot(il, aw, _mm256_sign_epi8(vl, w[c]));
                } else {
                    ih = kc__dot(ih, w[c], vh);
                    if (!a8) il = kc__dot(il, w[c], vl); /* a8: the low digits are 0 */
                }
            }
            dot = _mm256_add_epi32(_mm256_slli_epi32(ih, 7), il);
        }
        const __m256 f = _mm256_cvtepi32_ps(dot);
        if (wt == KC_WQ4_1) {
            const __m256 mw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(t + 32 + 16 * half)));
            acc[j] = _mm256_fmadd_ps(dw, _mm256_mul_ps(f, _mm256_set1_ps(x->d)), acc[j]);
            acc[j] = _mm256_fmadd_ps(mw, _mm256_set1_ps(x->s), acc[j]);
        } else {
            const float off = wt == KC_WQ4_0 ? -8.0f : KC_HAVE_VNNI ? -128.0f : 0.0f;
            acc[j] = _mm256_fmadd_ps(dw, _mm256_fmadd_ps(f, _mm256_set1_ps(x->d), _mm256_set1_ps(off * x->s)), acc[j]);
        }
    }
}

/* The float sums of one half out to Y: + bias, then + Y when accumulating. */
KC_INLINE void kc__x16_store_half(float *Y, int ldy, const __m256 acc[], int NT, int half, const float *bias,
                                  int accumulate) {
    const __m256 bv = bias ? _mm256_loadu_ps(bias + 8 * half) : _mm256_setzero_ps();
    KC_UNROLL for (int j = 0; j < NT; j++) {
        float *y = Y + (size_t)j * (size_t)ldy + 8 * half;
        __m256 v = _mm256_add_ps(acc[j], bv);
        if (accumulate) v = _mm256_add_ps(_mm256_loadu_ps(y), v);
        _mm256_storeu_ps(y, v);
    }
}

KC_INLINE void kc__x16_group(const uint8_t *G, int wt, int NB, const kc_q16 *X, int ldxb, int NT, float *Y, int ldy,
                             const float *bias, int accumulate, int a8) {
    const size_t tb = kc_x16_tile_bytes(wt);
    if (NT == 1) {
        /* one token (decode): both halves of each block in turn, so that the weights stream from
         * memory with a prefetch per block throughout (half by half, the second pass issued none
         * and waited on its own reads: 8.1 -> 10.3-13.2 GB/s from DRAM for kc_x16s.h's Q4_K) */
        __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
        for (int b = 0; b < NB; b++) {
            const uint8_t *t = G + (size_t)b * tb;
            if (wt != KC_WQ8_0) kc__x16_prefetch(t, tb);
            kc__x16_block_half(t, wt, b, 0, X, ldxb, 1, &acc[0], a8);
            kc__x16_block_half(t, wt, b, 1, X, ldxb, 1, &acc[1], a8);
        }
        kc__x16_store_half(Y, ldy, &acc[0], 1, 0, bias, accumulate);
        kc__x16_store_half(Y, ldy, &acc[1], 1, 1, bias, accumulate);
        return;
    }
    for (int half = 0; half < 2; half++) {
        __m256 acc[KC_X16_NT];
        KC_UNROLL for (int j = 0; j < NT; j++) acc[j] = _mm256_setzero_ps();
        for (int b = 0; b < NB; b++) {
            const uint8_t *t = G + (size_t)b * tb;
            if (!half && wt != KC_WQ8_0) kc__x16_prefetch(t, tb);
            kc__x16_block_half(t, wt, b, half, X, ldxb, NT, acc, a8);
        }
        kc__x16_store_half(Y, ldy, acc, NT, half, bias, accumulate);
    }
}
#elif defined(__ARM_NEON)
/* NEON (kc_neon.h): a tile vector's 64 bytes as four quarters of 4 rows, each 16 bytes holding 4
 * codes of each of its rows; sdot's indexed form multiplies them by 4 digits of the token (one
 * 32-bit lane of its 16 digits) and sums each row's 4 products into its lane. The dot product is
 * signed by signed: Q8_0's codes come back to q (the layout stores q + 128 for vpdpbusd) and its
 * offset is 0, the nibbles go in as they are. */
/* Quarter q (rows 4q..4q+3) of block b against NT tokens, into acc[0..NT). */
KC_INLINE void kc__x16_block_quarter(const uint8_t *t, int wt, int b, int q, const kc_q16 *X, int ldxb, int NT,
                                     float32x4_t acc[], int a8) {
    const int hdr = kc_x16_hdr(wt);
    const float32x4_t dw = kc_neon_f16x4(t + 8 * q);
    int8x16_t w[8];
    if (wt == KC_WQ8_0) {
        KC_UNROLL for (int c = 0; c < 8; c++)
            w[c] = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(t + hdr + 64 * c + 16 * q), vdupq_n_u8(0x80)));
    } else {
        KC_UNROLL for (int p = 0; p < 4; p++) {
            const uint8x16_t v = vld1q_u8(t + hdr + 64 * p + 16 * q);
            w[p] = vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0f)));
            w[p + 4] = vreinterpretq_s8_u8(vshrq_n_u8(v, 4));
        }
    }
    KC_UNROLL for (int j = 0; j < NT; j++) {
        const kc_q16 *x = &X[(size_t)j * (size_t)ldxb + (size_t)b];
        const int8x16_t h0 = vld1q_s8(x->h), h1 = vld1q_s8(x->h + 16), l0 = vld1q_s8(x->l), l1 = vld1q_s8(x->l + 16);
        int32x4_t ih = vdupq_n_s32(0), il = vdupq_n_s32(0);
        KC_UNROLL for (int c = 0; c < 8; c++) {
            ih = kc_neon_dot4_lane(ih, w[c], c < 4 ? h0 : h1, c);
            if (!a8) il = kc_neon_dot4_lane(il, w[c], c < 4 ? l0 : l1, c); /* a8: the low digits are 0 */
        }
        const float32x4_t f = vcvtq_f32_s32(vaddq_s32(vshlq_n_s32(ih, 7), il));
        if (wt == KC_WQ4_1) {
            acc[j] = vfmaq_f32(acc[j], dw, vmulq_n_f32(f, x->d));
            acc[j] = vfmaq_f32(acc[j], kc_neon_f16x4(t + 32 + 8 * q), vdupq_n_f32(x->s));
        } else {
            const float off = wt == KC_WQ4_0 ? -8.0f : 0.0f; /* Q4_0: codes are q + 8 */
            acc[j] = vfmaq_f32(acc[j], dw, vfmaq_f32(vdupq_n_f32(off * x->s), f, vdupq_n_f32(x->d)));
        }
    }
}

/* The float sums of one quarter out to Y: + bias, then + Y when accumulating. */
KC_INLINE void kc__x16_store_quarter(float *Y, int ldy, const float32x4_t acc[], int NT, int q, const float *bias,
                                     int accumulate) {
    const float32x4_t bv = bias ? vld1q_f32(bias + 4 * q) : vdupq_n_f32(0.0f);
    KC_UNROLL for (int j = 0; j < NT; j++) {
        float *y = Y + (size_t)j * (size_t)ldy + 4 * q;
        float32x4_t v = vaddq_f32(acc[j], bv);
        if (accumulate) v = vaddq_f32(vld1q_f32(y), v);
        vst1q_f32(y, v);
    }
}


KC_INLINE void kc__x16_group(const uint8_t *G, int wt, int NB, const kc_q16 *X, int ldxb, int NT, float *Y, int ldy,
                             const float *bias, int accumulate, int a8) {
    const size_t tb = kc_x16_tile_bytes(wt);
    if (NT == 1) { /* decode: the four quarters of each block in turn, streaming the tiles once */
        /* four named sums rather than an array whose elements pass by address: GCC kept that one
         * on the stack, a load and a store per quarter and block */
        float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0;
        for (int b = 0; b < NB; b++) {
            const uint8_t *t = G + (size_t)b * tb;
            kc__x16_prefetch(t, tb);
            kc__x16_block_quarter(t, wt, b, 0, X, ldxb, 1, &a0, a8);
            kc__x16_block_quarter(t, wt, b, 1, X, ldxb, 1, &a1, a8);
            kc__x16_block_quarter(t, wt, b, 2, X, ldxb, 1, &a2, a8);
            kc__x16_block_quarter(t, wt, b, 3, X, ldxb, 1, &a3, a8);
        }
        kc__x16_store_quarter(Y, ldy, &a0, 1, 0, bias, accumulate);
        kc__x16_store_quarter(Y, ldy, &a1, 1, 1, bias, accumulate);
        kc__x16_store_quarter(Y, ldy, &a2, 1, 2, bias, accumulate);
        kc__x16_store_quarter(Y, ldy, &a3, 1, 3, bias, accumulate);
        return;
    }
    for (int q = 0; q < 4; q++) {
        float32x4_t acc[KC_X16_NT];
        KC_UNROLL for (int j = 0; j < NT; j++) acc[j] = vdupq_n_f32(0.0f);
        for (int b = 0; b < NB; b++) {
            const uint8_t *t = G + (size_t)b * tb;
            if (!q) kc__x16_prefetch(t, tb);
            kc__x16_block_quarter(t, wt, b, q, X, ldxb, NT, acc, a8);
        }
        kc__x16_store_quarter(Y, ldy, acc, NT, q, bias, accumulate);
    }
}
#elif defined(__wasm_simd128__)
/* SIMD128 (kc_wasm.h): i32x4.dot_i16x8_s multiplies int16, and a token's 15-bit value q = 128 h + l
 * (|q| <= 16256) fits one: so the two digit chains of the byte paths are one here, the same
 * integers (dot(w, 128 h + l) = 128 dot(w, h) + dot(w, l); |w q| <= 128 * 16256 and a block's sums
 * stay far inside 32 bits). Per block, each token's q in the kc_wasm_digits4 pattern (once per
 * block and token), then each quarter of 4 rows in turn: a code vector's 16 bytes widened to two
 * int16 vectors (rows 0-1, 2-3), each met by every token of the tile in one dot; the halves of each
 * row's sums are added once at the block's end (kc_wasm_row_sums). Q8_0's codes come back to q
 * (the layout stores q + 128) and its offset is 0; the nibbles go in as they are. a8: the low
 * digits are 0, and the same loop serves. */
KC_INLINE void kc__x16_group(const uint8_t *G, int wt, int NB, const kc_q16 *X, int ldxb, int NT, float *Y, int ldy,
                             const float *bias, int accumulate, int a8) {
    (void)a8;
    const size_t tb = kc_x16_tile_bytes(wt);
    const int hdr = kc_x16_hdr(wt);
    v128_t acc[4][KC_X16_NT];
    KC_UNROLL for (int q = 0; q < 4; q++) KC_UNROLL for (int j = 0; j < NT; j++) acc[q][j] = wasm_f32x4_splat(0.0f);
    for (int b = 0; b < NB; b++) {
        const uint8_t *t = G + (size_t)b * tb;
        v128_t xq[KC_X16_NT][8];
        KC_UNROLL for (int j = 0; j < NT; j++) {
            const kc_q16 *x = &X[(size_t)j * (size_t)ldxb + (size_t)b];
            KC_UNROLL for (int c = 0; c < 8; c++)
                xq[j][c] = wasm_i16x8_add(wasm_i16x8_shl(kc_wasm_digits4(x->h + 4 * c), 7), kc_wasm_digits4(x->l + 4 * c));
        }
        KC_UNROLL for (int q = 0; q < 4; q++) {
            v128_t s01[KC_X16_NT], s23[KC_X16_NT];
            KC_UNROLL for (int j = 0; j < NT; j++) s01[j] = s23[j] = wasm_i32x4_splat(0);
            KC_UNROLL for (int c = 0; c < 8; c++) {
                v128_t w01, w23;
                if (wt == KC_WQ8_0) {
                    const v128_t w = wasm_v128_xor(wasm_v128_load(t + hdr + 64 * c + 16 * q), wasm_i8x16_splat((int8_t)0x80));
                    w01 = wasm_i16x8_extend_low_i8x16(w), w23 = wasm_i16x8_extend_high_i8x16(w);
                } else { /* vector c < 4: low nibbles (elements 4c..), else high nibbles (16 + 4(c - 4)..) */
                    const v128_t v = wasm_v128_load(t + hdr + 64 * (c % 4) + 16 * q);
                    const v128_t w = c < 4 ? wasm_v128_and(v, wasm_i8x16_splat(0x0f)) : wasm_u8x16_shr(v, 4);
                    w01 = wasm_u16x8_extend_low_u8x16(w), w23 = wasm_u16x8_extend_high_u8x16(w);
                }
                KC_UNROLL for (int j = 0; j < NT; j++) {
                    s01[j] = wasm_i32x4_add(s01[j], wasm_i32x4_dot_i16x8(w01, xq[j][c]));
                    s23[j] = wasm_i32x4_add(s23[j], wasm_i32x4_dot_i16x8(w23, xq[j][c]));
                }
            }
            const v128_t dw = kc_wasm_f16x4(t + 8 * q);
            KC_UNROLL for (int j = 0; j < NT; j++) {
                const kc_q16 *x = &X[(size_t)j * (size_t)ldxb + (size_t)b];
                const v128_t f = wasm_f32x4_convert_i32x4(kc_wasm_row_sums(s01[j], s23[j]));
                if (wt == KC_WQ4_1) {
                    const v128_t m = kc_wasm_f16x4(t + 32 + 8 * q);
                    acc[q][j] = wasm_f32x4_add(acc[q][j], wasm_f32x4_mul(dw, wasm_f32x4_mul(f, wasm_f32x4_splat(x->d))));
                    acc[q][j] = wasm_f32x4_add(acc[q][j], wasm_f32x4_mul(m, wasm_f32x4_splat(x->s)));
                } else {
                    const float off = wt == KC_WQ4_0 ? -8.0f : 0.0f; /* Q4_0: codes are q + 8 */
                    const v128_t v = wasm_f32x4_add(wasm_f32x4_mul(f, wasm_f32x4_splat(x->d)), wasm_f32x4_splat(off * x->s));
                    acc[q][j] = wasm_f32x4_add(acc[q][j], wasm_f32x4_mul(dw, v));
                }
            }
        }
    }
    KC_UNROLL for (int q = 0; q < 4; q++) {
        const v128_t bv = bias ? wasm_v128_load(bias + 4 * q) : wasm_f32x4_splat(0.0f);
        KC_UNROLL for (int j = 0; j < NT; j++) {
            float *y = Y + (size_t)j * (size_t)ldy + 4 * q;
            v128_t v = wasm_f32x4_add(acc[q][j], bv);
            if (accumulate) v = wasm_f32x4_add(wasm_v128_load(y), v);
            wasm_v128_store(y, v);
        }
    }
}
#else
/* Portable: the same integer dot products, one (row, block) at a time (a8's
 * low digits are 0 and add nothing: one loop serves both). */
KC_INLINE void kc__x16_group(const uint8_t *G, int wt, int NB, const kc_q16 *X, int ldxb, int NT, float *Y, int ldy,
                             const float *bias, int accumulate, int a8) {
    (void)a8;
    const size_t tb = kc_x16_tile_bytes(wt);
    for (int j = 0; j < NT; j++) {
        float acc[KC_X16_ROWS] = {0};
        for (int b = 0; b < NB; b++) {
            const uint8_t *t = G + (size_t)b * tb;
            const kc_q16 *x = &X[(size_t)j * (size_t)ldxb + (size_t)b];
            if (!j) kc__x16_prefetch(t, tb);
            for (int i = 0; i < KC_X16_ROWS; i++) {
                int32_t dot = 0; /* Q8_0: signed codes; Q4: the nibbles */
                for (int k = 0; k < 32; k++) dot += kc__x16_code(t, wt, i, k) * (128 * x->h[k] + x->l[k]);
                float d, c;
                kc__x16_scales(t, wt, i, &d, &c);
                if (wt == KC_WQ4_1) {
                    acc[i] = fmaf(d, (float)dot * x->d, acc[i]);
                    acc[i] = fmaf(c, x->s, acc[i]);
                } else {
                    const float off = wt == KC_WQ4_0 ? -8.0f : 0.0f;
                    acc[i] = fmaf(d, fmaf((float)dot, x->d, off * x->s), acc[i]);
                }
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

/* Runs STEP(t, nt) over the tokens [t, T): tiles of NT (a constant), then what is left in one
 * tile of 4 and one of 2 where NT is larger, then one token at a time. Each nt is a constant, so
 * each call is its own unrolled kernel: a step of 4-7 tokens (batched decode of that many
 * sequences) ran one token at a time before, at 0.6x the speed per matmul. */
#define KC_X16_TOKEN_TILES(t, T, NT, STEP)                    \
    do {                                                      \
        for (; (t) + (NT) <= (T); (t) += (NT)) STEP(t, NT);   \
        if ((NT) > 4 && (t) + 4 <= (T)) STEP(t, 4), (t) += 4; \
        if ((NT) > 2 && (t) + 2 <= (T)) STEP(t, 2), (t) += 2; \
        for (; (t) < (T); (t)++) STEP(t, 1);                  \
    } while (0)

/* Y[t*ldy + r] = (accumulate ? Y : 0) + W[r] . X[t] (+ bias[r]) for rows
 * r0 <= r < r1 (multiples of 16) of an x16 matrix and T tokens of kc_q16
 * activations (token t's blocks at X + t*ldxb). Every token takes the same
 * arithmetic whatever T is, so a sequence's logits do not depend on what it
 * is batched with. Per group of 16 rows (a few KB, kept in L1) the tokens
 * pass in tiles of KC_X16_NT, each unpacked weight vector serving the tile. */
KC_INLINE void kc__mmp(const void *W, int wt, const kc_q16 *X, int ldxb, float *Y, int ldy, int T, int IN, int r0,
                       int r1, const float *bias, int accumulate, int a8) {
    const int NB = IN / 32;
    const size_t tb = kc_x16_tile_bytes(wt);
    for (int r = r0; r < r1; r += KC_X16_ROWS) {
        const uint8_t *G = (const uint8_t *)W + (size_t)(r / KC_X16_ROWS) * (size_t)NB * tb;
        const float *bi = bias ? bias + r : NULL;
        int t = 0;
#define KC__X16_STEP(t, nt) \
    kc__x16_group(G, wt, NB, X + (size_t)(t) * (size_t)ldxb, ldxb, nt, Y + (size_t)(t) * (size_t)ldy + r, ldy, bi, accumulate, a8)
        KC_X16_TOKEN_TILES(t, T, KC_X16_NT, KC__X16_STEP);
#undef KC__X16_STEP
    }
}

/* kc_mmp_q8_0/q4_0/q4_1 (and kc_mmp8_) are made in kc_x16k.h, with its AMX path for steps of 16+ tokens */

#endif
