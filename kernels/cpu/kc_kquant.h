/* kc_kquant.h — matmuls with f32 activations for Q5_0, Q5_1, IQ4_NL, MXFP4, the super-block types Q2_K..Q6_K,
 * IQ4_XS, and Q8_Z, F8_B32 (GPTQ 8-bit and FP8 checkpoints; Q4_Z takes kc_matmul.h's Q4_1 paths). */
#ifndef INGOT_KC_KQUANT_H
#define INGOT_KC_KQUANT_H

#include "kc_matmul.h"

/* Every type here is handled as a row of 32-element segments: segment s is
 * elements 32s..32s+31 of the row, inside block s / spb (spb = segments per
 * block: 1 for the 32-blocks, 8 for the 256-element super-blocks) at group
 * g = s % spb. A segment decodes to 32 small unsigned codes (q, without any
 * offset) and two (d, c) pairs, one per half of 16 elements, so that
 *     w = q * d + c                        (Q5, K-quants)
 *     w = d * dtype_iq4_values[q]          (IQ4_NL, IQ4_XS)
 *     w = d * dtype_mxfp4_values[q]        (MXFP4: d = 2^(e-128), a power of two)
 *     w = (e4m3(q) * 256) * d             (F8_B32: q's bits placed in an f16
 *                                          are e4m3(q) / 256, exactly)
 * with the offsets folded into c: -16d (Q5_0), m (Q5_1), -dmin*m (Q2_K,
 * Q4_K, Q5_K), -4d (Q3_K), -32d (Q6_K), -z*d (Q8_Z: the zero point).
 * Every product q*d (d being the f16 scale times a group scale of at most 8
 * bits, or Q8_Z's f16 scale and a code of 8 bits) is exact in f32, so q*d + c,
 * with one FMA or with a multiply and an add, rounds once at the add: the
 * weights are bit-identical to dtype_dequantize_row's (GGUF's reference),
 * and the matmul is the f32 matmul with the dequantized weight matrix.
 *
 * The codes of a segment are produced with 256-bit integer ops (one 32-byte
 * load and a shift/mask per bit field; Q5's fifth bits are spread from the
 * 32-bit qh with a byte shuffle and a bit test), then widened to f32 lanes.
 * The tiles and the packed prefill path are kc_mmx's (kc_matmul.h): a
 * stream over W for few tokens, for more tokens a k-major buffer of
 * dequantized weights shared by a token chunk, multiplied by kc_mmx's
 * outer-product microkernels. */

enum { KC_WQ5_0 = 16, KC_WQ5_1, KC_WIQ4_NL, KC_WQ2_K, KC_WQ3_K, KC_WQ4_K, KC_WQ5_K, KC_WQ6_K, KC_WIQ4_XS,
       KC_WQ8_Z, KC_WF8_B32, KC_WMXFP4 };

/* Bytes per block and segments per block of a type. */
KC_INLINE size_t kc__kbytes(int wt) {
    switch (wt) {
    case KC_WQ5_0: return sizeof(block_q5_0);
    case KC_WQ5_1: return sizeof(block_q5_1);
    case KC_WIQ4_NL: return sizeof(block_iq4_nl);
    case KC_WQ2_K: return sizeof(block_q2_K);
    case KC_WQ3_K: return sizeof(block_q3_K);
    case KC_WQ4_K: return sizeof(block_q4_K);
    case KC_WQ5_K: return sizeof(block_q5_K);
    case KC_WQ6_K: return sizeof(block_q6_K);
    case KC_WQ8_Z: return sizeof(block_q8_z);
    case KC_WF8_B32: return sizeof(block_f8_b32);
    case KC_WMXFP4: return sizeof(block_mxfp4);
    default: return sizeof(block_iq4_xs);
    }
}
KC_INLINE int kc__kspb(int wt) {
    return wt == KC_WQ5_0 || wt == KC_WQ5_1 || wt == KC_WIQ4_NL || wt == KC_WQ8_Z || wt == KC_WF8_B32 || wt == KC_WMXFP4
               ? 1 : 8;
}
/* The types whose codes index a table of 16 signed values, and the table. */
KC_INLINE int kc__ktable(int wt) { return wt == KC_WIQ4_NL || wt == KC_WIQ4_XS || wt == KC_WMXFP4; }
KC_INLINE const int8_t *kc__ktable_values(int wt) { return wt == KC_WMXFP4 ? dtype_mxfp4_values : dtype_iq4_values; }

KC_INLINE float kc__h(const uint8_t *p) { /* an f16 field (blocks need not be 2-aligned in memory) */
    uint16_t h;
    memcpy(&h, p, 2);
    return kc_fp16_to_f32(h);
}

/* The (d, c) pairs of group g of block b (for the IQ4 types only d0). */
KC_INLINE void kc__kscales(const uint8_t *b, int wt, int g, float *d0, float *c0, float *d1, float *c1) {
    switch (wt) {
    case KC_WQ5_0: *d0 = kc__h(b); *c0 = -16.0f * *d0; break;
    case KC_WQ5_1: *d0 = kc__h(b); *c0 = kc__h(b + 2); break;
    case KC_WIQ4_NL: *d0 = kc__h(b); *c0 = 0.0f; break;
    case KC_WQ8_Z: {
        uint16_t z;
        memcpy(&z, b + 2, 2);
        *d0 = kc__h(b), *c0 = -((float)z * *d0);
        break;
    }
    case KC_WF8_B32: memcpy(d0, b, 4); *c0 = 0.0f; break;
    case KC_WMXFP4: *d0 = dtype_e8m0_half(b[0]); *c0 = 0.0f; break;
    case KC_WQ2_K: {
        const float d = kc__h(b + offsetof(block_q2_K, d)), dmin = kc__h(b + offsetof(block_q2_K, dmin));
        const uint8_t s0 = b[2 * g], s1 = b[2 * g + 1];
        *d0 = d * (float)(s0 & 15), *c0 = -(dmin * (float)(s0 >> 4));
        *d1 = d * (float)(s1 & 15), *c1 = -(dmin * (float)(s1 >> 4));
        return;
    }
    case KC_WQ3_K: {
        const float d = kc__h(b + offsetof(block_q3_K, d));
        const uint8_t *sc = b + offsetof(block_q3_K, scales);
        const int i0 = 2 * g, i1 = 2 * g + 1;
        const int s0 = ((sc[i0 % 8] >> (4 * (i0 / 8))) & 15) | ((sc[8 + i0 % 4] >> (2 * (i0 / 4))) & 3) << 4;
        const int s1 = ((sc[i1 % 8] >> (4 * (i1 / 8))) & 15) | ((sc[8 + i1 % 4] >> (2 * (i1 / 4))) & 3) << 4;
        *d0 = d * (float)(s0 - 32), *c0 = -4.0f * *d0;
        *d1 = d * (float)(s1 - 32), *c1 = -4.0f * *d1;
        return;
    }
    case KC_WQ4_K: case KC_WQ5_K: {
        int sc, m;
        dtype_k4_scale_min(b + offsetof(block_q4_K, scales), g, &sc, &m);
        *d0 = kc__h(b) * (float)sc, *c0 = -(kc__h(b + 2) * (float)m);
        break;
    }
    case KC_WQ6_K: {
        const float d = kc__h(b + offsetof(block_q6_K, d));
        const int8_t *sc = (const int8_t *)(b + offsetof(block_q6_K, scales));
        *d0 = d * (float)sc[2 * g], *c0 = -32.0f * *d0;
        *d1 = d * (float)sc[2 * g + 1], *c1 = -32.0f * *d1;
        return;
    }
    default: { /* IQ4_XS */
        uint16_t sh;
        memcpy(&sh, b + offsetof(block_iq4_xs, scales_h), 2);
        const int ls = ((b[offsetof(block_iq4_xs, scales_l) + g / 2] >> (4 * (g % 2))) & 15) | ((sh >> (2 * g)) & 3) << 4;
        *d0 = kc__h(b) * (float)(ls - 32), *c0 = 0.0f;
        break;
    }
    }
    *d1 = *d0, *c1 = *c0; /* one scale for the whole group of 32 */
}

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
/* Bit field (v >> sh) & mask of every byte; 16-bit shifts pull bits of the
 * neighbouring byte into the top, which the mask drops (every field here
 * satisfies width <= 8 - shift). */
KC_INLINE __m256i kc__kfield(const uint8_t *p, int sh, int mask) {
    const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)p);
    return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(sh)), _mm256_set1_epi8((char)mask));
}
/* 16 bytes of nibbles: the low nibbles are elements 0..15, the high ones 16..31. */
KC_INLINE __m256i kc__knibbles(const uint8_t *p) {
    __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)p));
    v = _mm256_srlv_epi64(v, _mm256_setr_epi64x(0, 0, 4, 4));
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
}
/* Bit j of the little-endian 32 bits at p as 0x10 in byte j: byte j takes
 * qh byte j/8 (a shuffle within each 128-bit lane, which both hold qh) and
 * tests bit j%8. */
KC_INLINE __m256i kc__kfifth(const uint8_t *p) {
    int32_t qh;
    memcpy(&qh, p, 4);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(qh), _mm256_setr_epi64x(0, 0x0101010101010101LL,
                                                                             0x0202020202020202LL, 0x0303030303030303LL));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}
/* The 32 codes of group g of block b, one byte each. */
KC_INLINE __m256i kc__kcodes(const uint8_t *b, int wt, int g) {
    switch (wt) {
    case KC_WQ5_0:
        return _mm256_or_si256(kc__knibbles(b + offsetof(block_q5_0, qs)), kc__kfifth(b + offsetof(block_q5_0, qh)));
    case KC_WQ5_1:
        return _mm256_or_si256(kc__knibbles(b + offsetof(block_q5_1, qs)), kc__kfifth(b + offsetof(block_q5_1, qh)));
    case KC_WIQ4_NL: return kc__knibbles(b + offsetof(block_iq4_nl, qs));
    case KC_WMXFP4: return kc__knibbles(b + offsetof(block_mxfp4, qs));
    case KC_WQ8_Z: case KC_WF8_B32: /* the bytes as they are (both have qs at offset 4) */
        return _mm256_loadu_si256((const __m256i *)(const void *)(b + offsetof(block_q8_z, qs)));
    case KC_WQ2_K: return kc__kfield(b + offsetof(block_q2_K, qs) + 32 * (g / 4), 2 * (g % 4), 3);
    case KC_WQ3_K:
        return _mm256_or_si256(kc__kfield(b + offsetof(block_q3_K, qs) + 32 * (g / 4), 2 * (g % 4), 3),
                               _mm256_slli_epi16(kc__kfield(b + offsetof(block_q3_K, hmask), g, 1), 2));
    case KC_WQ4_K: return kc__kfield(b + offsetof(block_q4_K, qs) + 32 * (g / 2), 4 * (g % 2), 15);
    case KC_WQ5_K:
        return _mm256_or_si256(kc__kfield(b + offsetof(block_q5_K, qs) + 32 * (g / 2), 4 * (g % 2), 15),
                               _mm256_slli_epi16(kc__kfield(b + offsetof(block_q5_K, qh), g, 1), 4));
    case KC_WQ6_K:
        return _mm256_or_si256(
            kc__kfield(b + offsetof(block_q6_K, ql) + 64 * (g / 4) + 32 * (g % 2), 4 * ((g % 4) / 2), 15),
            _mm256_slli_epi16(kc__kfield(b + offsetof(block_q6_K, qh) + 32 * (g / 4), 2 * (g % 4), 3), 4));
    default: return kc__knibbles(b + offsetof(block_iq4_xs, qs) + 16 * g);
    }
}
#else
/* Portable: the same codes, one byte at a time. */
KC_INLINE void kc__kcodes(const uint8_t *b, int wt, int g, uint8_t q[32]) {
    for (int l = 0; l < 32; l++) {
        int v;
        switch (wt) {
        case KC_WQ8_Z: case KC_WF8_B32: v = b[offsetof(block_q8_z, qs) + l]; break;
        case KC_WQ5_0: case KC_WQ5_1: case KC_WIQ4_NL: case KC_WIQ4_XS: case KC_WMXFP4: {
            const size_t qs = wt == KC_WQ5_0 ? offsetof(block_q5_0, qs) : wt == KC_WQ5_1 ? offsetof(block_q5_1, qs)
                              : wt == KC_WIQ4_NL ? offsetof(block_iq4_nl, qs)
                              : wt == KC_WMXFP4 ? offsetof(block_mxfp4, qs) : offsetof(block_iq4_xs, qs) + 16 * (size_t)g;
            v = (b[qs + l % 16] >> (4 * (l / 16))) & 15;
            if (wt == KC_WQ5_0 || wt == KC_WQ5_1) {
                const uint8_t *qh = b + (wt == KC_WQ5_0 ? offsetof(block_q5_0, qh) : offsetof(block_q5_1, qh));
                v |= ((qh[l / 8] >> (l % 8)) & 1) << 4;
            }
            break;
        }
        case KC_WQ2_K: v = (b[offsetof(block_q2_K, qs) + 32 * (g / 4) + l] >> (2 * (g % 4))) & 3; break;
        case KC_WQ3_K:
            v = ((b[offsetof(block_q3_K, qs) + 32 * (g / 4) + l] >> (2 * (g % 4))) & 3) |
                ((b[offsetof(block_q3_K, hmask) + l] >> g) & 1) << 2;
            break;
        case KC_WQ4_K: v = (b[offsetof(block_q4_K, qs) + 32 * (g / 2) + l] >> (4 * (g % 2))) & 15; break;
        case KC_WQ5_K:
            v = ((b[offsetof(block_q5_K, qs) + 32 * (g / 2) + l] >> (4 * (g % 2))) & 15) |
                ((b[offsetof(block_q5_K, qh) + l] >> g) & 1) << 4;
            break;
        default: /* Q6_K */
            v = ((b[offsetof(block_q6_K, ql) + 64 * (g / 4) + 32 * (g % 2) + l] >> (4 * ((g % 4) / 2))) & 15) |
                ((b[offsetof(block_q6_K, qh) + 32 * (g / 4) + l] >> (2 * (g % 4))) & 3) << 4;
            break;
        }
        q[l] = (uint8_t)v;
    }
}
#endif

#if defined(__ARM_NEON)
/* NEON: the 32 codes of group g of block b as two vectors (elements 0..15, 16..31); byte shifts
 * by a register (vshlq_u8 with a negative count) since the counts come from g. */
KC_INLINE uint8x16x2_t kc__kfield_neon(const uint8_t *p, int sh, int mask) {
    const int8x16_t n = vdupq_n_s8((int8_t)-sh);
    const uint8x16_t m = vdupq_n_u8((uint8_t)mask);
    return (uint8x16x2_t){{vandq_u8(vshlq_u8(vld1q_u8(p), n), m), vandq_u8(vshlq_u8(vld1q_u8(p + 16), n), m)}};
}
KC_INLINE uint8x16x2_t kc__knibbles_neon(const uint8_t *p) {
    const uint8x16_t v = vld1q_u8(p);
    return (uint8x16x2_t){{vandq_u8(v, vdupq_n_u8(0x0f)), vshrq_n_u8(v, 4)}};
}
/* bit j of the 32 bits at p as 0x10 in byte j: byte j/8 of them in every byte of its eight, tested
 * against bit j%8 */
KC_INLINE uint8x16x2_t kc__kfifth_neon(const uint8_t *p) {
    uint32_t qh;
    memcpy(&qh, p, sizeof qh);
    const uint8x16_t v = vreinterpretq_u8_u32(vdupq_n_u32(qh));
    static const uint8_t sel0[16] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
    static const uint8_t bits[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t s0 = vld1q_u8(sel0), s1 = vaddq_u8(s0, vdupq_n_u8(2)), b = vld1q_u8(bits), f = vdupq_n_u8(0x10);
    return (uint8x16x2_t){{vandq_u8(vtstq_u8(vqtbl1q_u8(v, s0), b), f), vandq_u8(vtstq_u8(vqtbl1q_u8(v, s1), b), f)}};
}
KC_INLINE uint8x16x2_t kc__kor_neon(uint8x16x2_t a, uint8x16x2_t b, int shl) {
    const int8x16_t n = vdupq_n_s8((int8_t)shl);
    return (uint8x16x2_t){{vorrq_u8(a.val[0], vshlq_u8(b.val[0], n)), vorrq_u8(a.val[1], vshlq_u8(b.val[1], n))}};
}
KC_INLINE uint8x16x2_t kc__kcodes_neon(const uint8_t *b, int wt, int g) {
    switch (wt) {
    case KC_WQ5_0: return kc__kor_neon(kc__knibbles_neon(b + offsetof(block_q5_0, qs)), kc__kfifth_neon(b + offsetof(block_q5_0, qh)), 0);
    case KC_WQ5_1: return kc__kor_neon(kc__knibbles_neon(b + offsetof(block_q5_1, qs)), kc__kfifth_neon(b + offsetof(block_q5_1, qh)), 0);
    case KC_WIQ4_NL: return kc__knibbles_neon(b + offsetof(block_iq4_nl, qs));
    case KC_WMXFP4: return kc__knibbles_neon(b + offsetof(block_mxfp4, qs));
    case KC_WQ8_Z: case KC_WF8_B32: return vld1q_u8_x2(b + offsetof(block_q8_z, qs));
    case KC_WQ2_K: return kc__kfield_neon(b + offsetof(block_q2_K, qs) + 32 * (g / 4), 2 * (g % 4), 3);
    case KC_WQ3_K:
        return kc__kor_neon(kc__kfield_neon(b + offsetof(block_q3_K, qs) + 32 * (g / 4), 2 * (g % 4), 3),
                            kc__kfield_neon(b + offsetof(block_q3_K, hmask), g, 1), 2);
    case KC_WQ4_K: return kc__kfield_neon(b + offsetof(block_q4_K, qs) + 32 * (g / 2), 4 * (g % 2), 15);
    case KC_WQ5_K:
        return kc__kor_neon(kc__kfield_neon(b + offsetof(block_q5_K, qs) + 32 * (g / 2), 4 * (g % 2), 15),
                            kc__kfield_neon(b + offsetof(block_q5_K, qh), g, 1), 4);
    case KC_WQ6_K:
        return kc__kor_neon(kc__kfield_neon(b + offsetof(block_q6_K, ql) + 64 * (g / 4) + 32 * (g % 2), 4 * ((g % 4) / 2), 15),
                            kc__kfield_neon(b + offsetof(block_q6_K, qh) + 32 * (g / 4), 2 * (g % 4), 3), 4);
    default: return kc__knibbles_neon(b + offsetof(block_iq4_xs, qs) + 16 * g);
    }
}
#endif

#define KC_KSV (32 / KC_VW) /* vectors per segment */

/* The 32 dequantized weights of segment s of the row at `row`: w[v] holds
 * elements 32s + v*KC_VW .. 32s + v*KC_VW + KC_VW - 1. */
KC_INLINE void kc__kseg(const uint8_t *row, int wt, int s, kc_vf w[KC_KSV]) {
    const int spb = kc__kspb(wt), g = s % spb;
    const uint8_t *b = row + (size_t)(s / spb) * kc__kbytes(wt);
    float d0, c0, d1, c1;
    kc__kscales(b, wt, g, &d0, &c0, &d1, &c1);
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
    if (wt == KC_WF8_B32) { /* E4M3 bits moved into f16 bits (sign to bit 15, the rest up by 7), widened */
        const __m256i q = kc__kcodes(b, wt, g);
        const __m256i m7f = _mm256_set1_epi16(0x7f), m80 = _mm256_set1_epi16(0x80);
        __m128i h[2];
        KC_UNROLL for (int k = 0; k < 2; k++) {
            const __m256i v = _mm256_cvtepu8_epi16(k ? _mm256_extracti128_si256(q, 1) : _mm256_castsi256_si128(q));
            const __m256i f16 = _mm256_or_si256(_mm256_slli_epi16(_mm256_and_si256(v, m80), 8),
                                                _mm256_slli_epi16(_mm256_and_si256(v, m7f), 7));
#if defined(__AVX512F__)
            w[k] = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtph_ps(f16), _mm512_set1_ps(256.0f)), _mm512_set1_ps(d0));
            (void)h;
#else
            h[0] = _mm256_castsi256_si128(f16), h[1] = _mm256_extracti128_si256(f16, 1);
            KC_UNROLL for (int u = 0; u < 2; u++)
                w[2 * k + u] = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtph_ps(h[u]), _mm256_set1_ps(256.0f)),
                                             _mm256_set1_ps(d0));
#endif
        }
        (void)c0, (void)d1, (void)c1;
        return;
    }
#endif
#if defined(__AVX512F__)
    const __m256i q = kc__kcodes(b, wt, g);
    const __m512i q0 = _mm512_cvtepu8_epi32(_mm256_castsi256_si128(q)), q1 = _mm512_cvtepu8_epi32(_mm256_extracti128_si256(q, 1));
    if (kc__ktable(wt)) { /* the 16 values of the block, d * table[i], looked up by the codes */
        const __m512 tab = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                                             _mm_loadu_si128((const __m128i *)(const void *)kc__ktable_values(wt)))),
                                         _mm512_set1_ps(d0));
        w[0] = _mm512_permutexvar_ps(q0, tab);
        w[1] = _mm512_permutexvar_ps(q1, tab);
    } else {
        w[0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(q0), _mm512_set1_ps(d0), _mm512_set1_ps(c0));
        w[1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(q1), _mm512_set1_ps(d1), _mm512_set1_ps(c1));
    }
#elif defined(__AVX2__) && defined(__FMA__)
    __m256i q = kc__kcodes(b, wt, g);
    if (kc__ktable(wt)) /* the table values as signed bytes (pshufb looks up 16 entries per lane) */
        q = _mm256_shuffle_epi8(
            _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)kc__ktable_values(wt))), q);
    const __m128i h[2] = {_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1)};
    KC_UNROLL for (int v = 0; v < 4; v++) {
        const __m128i bytes = v % 2 ? _mm_srli_si128(h[v / 2], 8) : h[v / 2];
        if (kc__ktable(wt))
            w[v] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)), _mm256_set1_ps(d0));
        else
            w[v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes)), _mm256_set1_ps(v < 2 ? d0 : d1),
                                   _mm256_set1_ps(v < 2 ? c0 : c1));
    }
#elif defined(__ARM_NEON)
    const uint8x16x2_t q = kc__kcodes_neon(b, wt, g);
    KC_UNROLL for (int h = 0; h < 2; h++) {
        if (wt == KC_WF8_B32) { /* E4M3 bits moved into f16 bits (sign to bit 15, the rest up by 7) */
            KC_UNROLL for (int k = 0; k < 2; k++) {
                const uint16x8_t v = k ? vmovl_high_u8(q.val[h]) : vmovl_u8(vget_low_u8(q.val[h]));
                const uint16x8_t f = vorrq_u16(vshlq_n_u16(vandq_u16(v, vdupq_n_u16(0x80)), 8),
                                               vshlq_n_u16(vandq_u16(v, vdupq_n_u16(0x7f)), 7));
                KC_UNROLL for (int u = 0; u < 2; u++) {
                    const float32x4_t x = vcvt_f32_f16(vreinterpret_f16_u16(u ? vget_high_u16(f) : vget_low_u16(f)));
                    w[4 * h + 2 * k + u] = vmulq_n_f32(vmulq_n_f32(x, 256.0f), d0);
                }
            }
            continue;
        }
        if (kc__ktable(wt)) { /* the signed table values, times d */
            const int8x16_t t = vqtbl1q_s8(vld1q_s8(kc__ktable_values(wt)), q.val[h]);
            const int16x8_t lo = vmovl_s8(vget_low_s8(t)), hi = vmovl_high_s8(t);
            w[4 * h + 0] = vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), d0);
            w[4 * h + 1] = vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(lo)), d0);
            w[4 * h + 2] = vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), d0);
            w[4 * h + 3] = vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(hi)), d0);
            continue;
        }
        const uint16x8_t lo = vmovl_u8(vget_low_u8(q.val[h])), hi = vmovl_high_u8(q.val[h]);
        const float d = h ? d1 : d0, c = h ? c1 : c0;
        const uint32x4_t u4[4] = {vmovl_u16(vget_low_u16(lo)), vmovl_high_u16(lo), vmovl_u16(vget_low_u16(hi)), vmovl_high_u16(hi)};
        KC_UNROLL for (int v = 0; v < 4; v++) w[4 * h + v] = vfmaq_n_f32(vdupq_n_f32(c), vcvtq_f32_u32(u4[v]), d);
    }
#elif defined(__wasm_simd128__)
    /* SIMD128: the codes as the portable path finds them, widened and scaled 4 at a time (the same
     * multiply and add as the portable path: the same bits) */
    uint8_t q[32];
    kc__kcodes(b, wt, g, q);
    if (wt == KC_WF8_B32 || kc__ktable(wt)) {
        float f[32];
        for (int l = 0; l < 32; l++)
            f[l] = wt == KC_WF8_B32 ? kc_fp16_to_f32((uint16_t)((q[l] & 0x80) << 8 | (q[l] & 0x7f) << 7)) * 256.0f * d0
                                    : d0 * (float)kc__ktable_values(wt)[q[l]];
        KC_UNROLL for (int v = 0; v < 8; v++) w[v] = wasm_v128_load(f + 4 * v);
        (void)c0, (void)d1, (void)c1;
        return;
    }
    KC_UNROLL for (int v = 0; v < 8; v++)
        w[v] = wasm_f32x4_add(wasm_f32x4_mul(wasm_f32x4_convert_i32x4(kc_wasm_u8x4(q + 4 * v)), wasm_f32x4_splat(v < 4 ? d0 : d1)),
                              wasm_f32x4_splat(v < 4 ? c0 : c1));
#else
    uint8_t q[32];
    kc__kcodes(b, wt, g, q);
    for (int l = 0; l < 32; l++)
        w[l] = wt == KC_WF8_B32 ? kc_fp16_to_f32((uint16_t)((q[l] & 0x80) << 8 | (q[l] & 0x7f) << 7)) * 256.0f * d0
               : kc__ktable(wt) ? d0 * (float)kc__ktable_values(wt)[q[l]] : (float)q[l] * (l < 16 ? d0 : d1) + (l < 16 ? c0 : c1);
#endif
}

/* Direct path: NR x NT outputs (NR <= KC_XRB, NT <= KC_XTB). Per segment and
 * row the weights are decoded once into registers and multiplied with each
 * token's activations (loads from L1, folded into the FMAs). */
KC_INLINE void kc__kmm_tile(const void *W, int wt, const float *X, int ldx, float *Y, int ldy, int IN, int r, int t,
                            int NR, int NT, const float *bias, int accumulate) {
    const int NS = IN / 32;
    const size_t rb = (size_t)(NS / kc__kspb(wt)) * kc__kbytes(wt);
    const float *x0 = X + (size_t)t * (size_t)ldx;
    const uint8_t *w0 = (const uint8_t *)W + (size_t)r * rb;
    kc_vf acc[KC_XRB][KC_XTB];
    KC_UNROLL for (int i = 0; i < NR; i++) KC_UNROLL for (int j = 0; j < NT; j++) acc[i][j] = kc__vzero();
    for (int s = 0; s < NS; s++) {
        KC_UNROLL for (int i = 0; i < NR; i++) {
            kc_vf w[KC_KSV];
            kc__kseg(w0 + (size_t)i * rb, wt, s, w);
            KC_UNROLL for (int j = 0; j < NT; j++) {
                const float *x = x0 + (size_t)j * (size_t)ldx + 32 * (size_t)s;
                KC_UNROLL for (int v = 0; v < KC_KSV; v++) acc[i][j] = kc__vfma(w[v], kc__ldx(x + v * KC_VW), acc[i][j]);
            }
        }
    }
    float out[KC_FRB > 4 ? KC_FRB : 4][KC_FTB > 4 ? KC_FTB : 4];
    KC_UNROLL for (int i = 0; i < NR; i++) KC_UNROLL for (int j = 0; j < NT; j++) out[i][j] = kc__vsum(acc[i][j]);
    kc__store(Y, ldy, r, t, NR, NT, out, bias, accumulate);
}

/* Packed path, step 1: segments [s0, s0+ns) of rows [r, r+nr) dequantized
 * into buf[k][KC_XMR] (k-major, as kc__mmx_pack); rows nr.. are zero. Each
 * row's segment is decoded in registers, stored, and scattered into its
 * column; the cost is shared by the token chunk. */
KC_INLINE void kc__kpack(const void *W, int wt, size_t rb, int r, int nr, int s0, int ns, float *buf) {
#if defined(__GNUC__) || defined(__clang__)
    float tmp[32] __attribute__((aligned(64)));
#else
    float tmp[32];
#endif
    for (int i = 0; i < KC_XMR; i++) {
        for (int ss = 0; ss < ns; ss++) {
            float *o = buf + (size_t)(32 * ss) * KC_XMR + i;
            if (i >= nr) {
                for (int k = 0; k < 32; k++) o[(size_t)k * KC_XMR] = 0.0f;
                continue;
            }
            kc_vf w[KC_KSV];
            kc__kseg((const uint8_t *)W + (size_t)(r + i) * rb, wt, s0 + ss, w);
#if defined(__AVX512F__)
            _mm512_store_ps(tmp, w[0]), _mm512_store_ps(tmp + 16, w[1]);
#elif defined(__AVX2__) && defined(__FMA__)
            KC_UNROLL for (int v = 0; v < 4; v++) _mm256_store_ps(tmp + 8 * v, w[v]);
#elif defined(__ARM_NEON)
            KC_UNROLL for (int v = 0; v < 8; v++) vst1q_f32(tmp + 4 * v, w[v]);
#elif defined(__wasm_simd128__)
            KC_UNROLL for (int v = 0; v < 8; v++) wasm_v128_store(tmp + 4 * v, w[v]);
#else
            for (int v = 0; v < 32; v++) tmp[v] = w[v];
#endif
            for (int k = 0; k < 32; k++) o[(size_t)k * KC_XMR] = tmp[k];
        }
    }
}

/* Y[t*ldy + r] = (accumulate ? Y : 0) + dot(dequantized W row r, X row t)
 * + bias[r], r0 <= r < r1, 0 <= t < T (the contract of kc_mmx_q4_0). */
KC_INLINE void kc__kmm(const void *W, int wt, const float *X, int ldx, float *Y, int ldy, int T, int IN, int r0,
                       int r1, const float *bias, int accumulate) {
    if (T < KC_XTMIN) {
        int r = r0;
        for (; r + KC_XRB <= r1; r += KC_XRB) {
            int t = 0;
            for (; t + KC_XTB <= T; t += KC_XTB)
                kc__kmm_tile(W, wt, X, ldx, Y, ldy, IN, r, t, KC_XRB, KC_XTB, bias, accumulate);
            for (; t < T; t++) kc__kmm_tile(W, wt, X, ldx, Y, ldy, IN, r, t, KC_XRB, 1, bias, accumulate);
        }
        for (; r < r1; r++) {
            int t = 0;
            for (; t + KC_XTB <= T; t += KC_XTB)
                kc__kmm_tile(W, wt, X, ldx, Y, ldy, IN, r, t, 1, KC_XTB, bias, accumulate);
            for (; t < T; t++) kc__kmm_tile(W, wt, X, ldx, Y, ldy, IN, r, t, 1, 1, bias, accumulate);
        }
        return;
    }
    const int NS = IN / 32;
    const size_t rb = (size_t)(NS / kc__kspb(wt)) * kc__kbytes(wt);
#if defined(__GNUC__) || defined(__clang__)
    float buf[KC_XKB * 32 * KC_XMR] __attribute__((aligned(64)));
#else
    float buf[KC_XKB * 32 * KC_XMR];
#endif
    for (int t0 = 0; t0 < T; t0 += KC_XTC) {
        const int t1 = T - t0 > KC_XTC ? t0 + KC_XTC : T;
        for (int r = r0; r < r1; r += KC_XMR) {
            const int nr = r1 - r < KC_XMR ? r1 - r : KC_XMR;
            for (int s0 = 0; s0 < NS; s0 += KC_XKB) {
                const int ns = NS - s0 < KC_XKB ? NS - s0 : KC_XKB;
                kc__kpack(W, wt, rb, r, nr, s0, ns, buf);
                const int init = s0 == 0 && !accumulate;
                const float *bi = s0 + ns == NS && bias ? bias + r : NULL;
                const float *xk = X + 32 * (size_t)s0;
                kc__mmx_kern_tokens(buf, 32 * ns, xk, ldx, Y, ldy, r, nr, t0, t1, init, bi);
            }
        }
    }
}

/* ------------------------------------------------------------------------
 * The same weights with int8 activations (--act-quant q8): X is kc_q8
 * blocks of 32 (kc_quant.h), one per segment. With codes u, activation
 * codes v and the activation scale dx, a segment contributes
 *     dx * (d0 * sum_{l<16} u_l v_l + d1 * sum_{l>=16} u_l v_l)
 *   + dx * (c0 * sum_{l<16} v_l   + c1 * sum_{l>=16} v_l)
 * The first line is an integer dot product (u <= 63 unsigned, v signed: the
 * u8 x s8 multiply-adds of kc__dot, which cannot saturate) whose 8 int32
 * lanes are 4-element partial sums: lanes 0-3 are elements 0-15, lanes 4-7
 * elements 16-31, so one float vector [d0 x4 | d1 x4] scales both halves.
 * The second line is c0 * s_x (s_x = dx * sum v, precomputed in kc_q8) when
 * the segment has one scale; for the types with groups of 16 (Q2_K, Q3_K,
 * Q6_K) it uses the lane sums of v, computed once per token and segment.
 * IQ4's table values are signed: their dot uses |w| against v * sign(w)
 * (|w|, |v| <= 127, so pairs never saturate 16 bits). */
KC_INLINE int kc__kgroups16(int wt) { return wt == KC_WQ2_K || wt == KC_WQ3_K || wt == KC_WQ6_K; }

KC_INLINE void kc__kmq_tile(const void *W, int wt, const kc_q8 *X, int ldx, float *Y, int ldy, int IN, int r, int t,
                            int NR, int NT, const float *bias, int accumulate) {
    const int NS = IN / 32, spb = kc__kspb(wt);
    const size_t bb = kc__kbytes(wt), rb = (size_t)(NS / spb) * bb;
    const kc_q8 *x0 = X + (size_t)t * (size_t)ldx;
    const uint8_t *w0 = (const uint8_t *)W + (size_t)r * rb;
    float out[KC_FRB > 4 ? KC_FRB : 4][KC_FTB > 4 ? KC_FTB : 4];
    float macc[KC_QRB][KC_QTB]; /* c0 * s_x of the one-scale types */
    KC_UNROLL for (int i = 0; i < NR; i++) KC_UNROLL for (int j = 0; j < NT; j++) macc[i][j] = 0.0f;
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
    __m256 acc[KC_QRB][KC_QTB];
    KC_UNROLL for (int i = 0; i < NR; i++) KC_UNROLL for (int j = 0; j < NT; j++) acc[i][j] = _mm256_setzero_ps();
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)kc__ktable_values(wt)));
    for (int s = 0; s < NS; s++) {
        __m256i xq[KC_QTB];
        __m256 xd[KC_QTB], xh[KC_QTB];
        KC_UNROLL for (int j = 0; j < NT; j++) {
            const kc_q8 *xb = &x0[(size_t)j * (size_t)ldx + (size_t)s];
            xq[j] = _mm256_loadu_si256((const __m256i *)(const void *)xb->qs);
            xd[j] = _mm256_set1_ps(xb->d);
            xh[j] = kc__kgroups16(wt) ? _mm256_cvtepi32_ps(kc__dot(_mm256_setzero_si256(), _mm256_set1_epi8(1), xq[j]))
                                      : _mm256_setzero_ps();
        }
        KC_UNROLL for (int i = 0; i < NR; i++) {
            const uint8_t *b = w0 + (size_t)i * rb + (size_t)(s / spb) * bb;
            const int g = s % spb;
            float d0, c0, d1, c1;
            kc__kscales(b, wt, g, &d0, &c0, &d1, &c1);
            __m256i u = kc__kcodes(b, wt, g), sw = u;
            if (kc__ktable(wt)) {
                sw = _mm256_shuffle_epi8(table, u); /* the signed values */
                u = _mm256_sign_epi8(sw, sw);
            }
            const __m256 dv = _mm256_setr_ps(d0, d0, d0, d0, d1, d1, d1, d1);
            const __m256 cv = _mm256_setr_ps(c0, c0, c0, c0, c1, c1, c1, c1);
            KC_UNROLL for (int j = 0; j < NT; j++) {
                const __m256i v = kc__ktable(wt) ? _mm256_sign_epi8(xq[j], sw) : xq[j];
                const __m256i p = kc__dot(_mm256_setzero_si256(), u, v);
                acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(dv, xd[j]), acc[i][j]);
                if (kc__kgroups16(wt))
                    acc[i][j] = _mm256_fmadd_ps(xh[j], _mm256_mul_ps(cv, xd[j]), acc[i][j]);
                else
                    macc[i][j] += c0 * x0[(size_t)j * (size_t)ldx + (size_t)s].s;
            }
        }
    }
    KC_UNROLL for (int i = 0; i < NR; i++) KC_UNROLL for (int j = 0; j < NT; j++)
        out[i][j] = kc__hsum8(acc[i][j]) + macc[i][j];
#else
    KC_UNROLL for (int i = 0; i < NR; i++) KC_UNROLL for (int j = 0; j < NT; j++) out[i][j] = 0.0f;
    for (int s = 0; s < NS; s++) {
        for (int i = 0; i < NR; i++) {
            const uint8_t *b = w0 + (size_t)i * rb + (size_t)(s / spb) * bb;
            const int g = s % spb;
            float d0, c0, d1, c1;
            uint8_t u[32];
            kc__kscales(b, wt, g, &d0, &c0, &d1, &c1);
            kc__kcodes(b, wt, g, u);
            for (int j = 0; j < NT; j++) {
                const kc_q8 *xb = &x0[(size_t)j * (size_t)ldx + (size_t)s];
                int p0 = 0, p1 = 0, h0 = 0, h1 = 0;
                for (int l = 0; l < 32; l++) {
                    const int w = kc__ktable(wt) ? kc__ktable_values(wt)[u[l]] : u[l];
                    if (l < 16) p0 += w * xb->qs[l], h0 += xb->qs[l];
                    else p1 += w * xb->qs[l], h1 += xb->qs[l];
                }
                out[i][j] += xb->d * (d0 * (float)p0 + d1 * (float)p1) + xb->d * (c0 * (float)h0 + c1 * (float)h1);
            }
        }
    }
    (void)macc;
#endif
    kc__store(Y, ldy, r, t, NR, NT, out, bias, accumulate);
}

KC_INLINE void kc__kmq(const void *W, int wt, const kc_q8 *X, int ldx, float *Y, int ldy, int T, int IN, int r0,
                       int r1, const float *bias, int accumulate) {
    for (int t0 = 0; t0 < T; t0 += KC_QTC) {
        const int t1 = T - t0 > KC_QTC ? t0 + KC_QTC : T;
        int r = r0;
        for (; r + KC_QRB <= r1; r += KC_QRB) {
            int t = t0;
            for (; t + KC_QTB <= t1; t += KC_QTB)
                kc__kmq_tile(W, wt, X, ldx, Y, ldy, IN, r, t, KC_QRB, KC_QTB, bias, accumulate);
            for (; t < t1; t++) kc__kmq_tile(W, wt, X, ldx, Y, ldy, IN, r, t, KC_QRB, 1, bias, accumulate);
        }
        for (; r < r1; r++) {
            int t = t0;
            for (; t + KC_QTB <= t1; t += KC_QTB)
                kc__kmq_tile(W, wt, X, ldx, Y, ldy, IN, r, t, 1, KC_QTB, bias, accumulate);
            for (; t < t1; t++) kc__kmq_tile(W, wt, X, ldx, Y, ldy, IN, r, t, 1, 1, bias, accumulate);
        }
    }
}

/* One entry point per type, the names the generator emits (kc_mmx_<dtype>
 * for f32 activations, kc_mm_<dtype> for kc_q8 activations). */
#define KC_KMM_ENTRY(name, block, wt)                                                                                 \
    static inline void kc_mmx_##name(const block *W, const float *X, int ldx, float *Y, int ldy, int T, int IN,      \
                                     int r0, int r1, const float *bias, int accumulate) {                            \
        kc__kmm(W, wt, X, ldx, Y, ldy, T, IN, r0, r1, bias, accumulate);                                              \
    }                                                                                                                 \
    static inline void kc_mm_##name(const block *W, const kc_q8 *X, int ldx_blocks, float *Y, int ldy, int T,       \
                                    int IN, int r0, int r1, const float *bias, int accumulate) {                     \
        kc__kmq(W, wt, X, ldx_blocks, Y, ldy, T, IN, r0, r1, bias, accumulate);                                       \
    }
KC_KMM_ENTRY(q5_0, block_q5_0, KC_WQ5_0)
KC_KMM_ENTRY(q5_1, block_q5_1, KC_WQ5_1)
KC_KMM_ENTRY(iq4_nl, block_iq4_nl, KC_WIQ4_NL)
KC_KMM_ENTRY(q2_k, block_q2_K, KC_WQ2_K)
KC_KMM_ENTRY(q3_k, block_q3_K, KC_WQ3_K)
KC_KMM_ENTRY(q4_k, block_q4_K, KC_WQ4_K)
KC_KMM_ENTRY(q5_k, block_q5_K, KC_WQ5_K)
KC_KMM_ENTRY(q6_k, block_q6_K, KC_WQ6_K)
KC_KMM_ENTRY(iq4_xs, block_iq4_xs, KC_WIQ4_XS)
KC_KMM_ENTRY(mxfp4, block_mxfp4, KC_WMXFP4)
#undef KC_KMM_ENTRY
/* The repacked GPTQ/AWQ/FP8 types take f32 activations only: their matmul
 * is the checkpoint's arithmetic (an int8 path would round the activations).
 * Q4_Z has Q4_1's block layout but for its zero point: kc_matmul.h's Q4 tiles
 * (vpermps table lookup on AVX-512) with c = -z*d. */
static inline void kc_mmx_q4_z(const block_q4_z *W, const float *X, int ldx, float *Y, int ldy, int T, int IN, int r0,
                               int r1, const float *bias, int accumulate) {
    kc__mmx(W, KC_WQ4_ZP, X, ldx, Y, ldy, T, IN, r0, r1, bias, accumulate);
}
#define KC_KMMX_ENTRY(name, block, wt)                                                                                \
    static inline void kc_mmx_##name(const block *W, const float *X, int ldx, float *Y, int ldy, int T, int IN,      \
                                     int r0, int r1, const float *bias, int accumulate) {                            \
        kc__kmm(W, wt, X, ldx, Y, ldy, T, IN, r0, r1, bias, accumulate);                                              \
    }
KC_KMMX_ENTRY(q8_z, block_q8_z, KC_WQ8_Z)
KC_KMMX_ENTRY(f8_b32, block_f8_b32, KC_WF8_B32)
#undef KC_KMMX_ENTRY

#endif
