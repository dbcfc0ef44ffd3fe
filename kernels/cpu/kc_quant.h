/* kc_quant.h — quantizes f32 activations to 32-element int8 blocks (kc_q8) for the quantized matmuls. */
#ifndef INGOT_KC_QUANT_H
#define INGOT_KC_QUANT_H

#include <math.h>
#include <stdint.h>
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

/* One block of 32 activations: x[i] ~= d * qs[i], with d = amax/127 so that
 * qs is in [-127, 127] (never -128: the Q8_0 kernel relies on it). s = d *
 * sum(qs) is precomputed once per block because every Q4 weight row needs it
 * (Q4_0's -8 offset and Q4_1's min term are both "constant * sum(x)"). The
 * layout is 40 bytes, float-aligned; qs starts at byte 8. */
typedef struct {
    float d;
    float s;
    int8_t qs[32];
} kc_q8;

/* Quantizes n floats (n a multiple of 32) into n/32 blocks. Rounds to
 * nearest-even (x * (127/amax)) on every path so results do not depend on
 * the instruction set. */
static inline void kc_quantize_q8(const float *x, kc_q8 *out, int n) {
    for (int b = 0; b < n / 32; b++, x += 32) {
        kc_q8 *o = &out[b];
#if defined(__AVX512F__)
        __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
        float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        float id = amax > 0.0f ? 127.0f / amax : 0.0f;
        __m512 vid = _mm512_set1_ps(id);
        __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, vid));
        __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, vid));
        _mm_storeu_si128((__m128i *)(void *)o->qs, _mm512_cvtepi32_epi8(q0));
        _mm_storeu_si128((__m128i *)(void *)(o->qs + 16), _mm512_cvtepi32_epi8(q1));
        int sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
#elif defined(__AVX2__)
        __m256 v[4], m = _mm256_setzero_ps();
        const __m256 nosign = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
        for (int i = 0; i < 4; i++) {
            v[i] = _mm256_loadu_ps(x + 8 * i);
            m = _mm256_max_ps(m, _mm256_and_ps(v[i], nosign));
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        float amax = _mm_cvtss_f32(m4);
        float id = amax > 0.0f ? 127.0f / amax : 0.0f;
        __m256 vid = _mm256_set1_ps(id);
        __m256i q[4];
        for (int i = 0; i < 4; i++) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], vid));
        /* packs works per 128-bit lane, leaving 4-byte groups in order
         * 0,2,4,6,1,3,5,7; the permute puts them back. */
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(void *)o->qs, p);
        __m256i s8 = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
        int sum = _mm_cvtsi128_si32(s4);
#else
        float amax = 0.0f;
        for (int i = 0; i < 32; i++) {
            float a = fabsf(x[i]);
            if (a > amax) amax = a;
        }
        float id = amax > 0.0f ? 127.0f / amax : 0.0f;
        int sum = 0;
        for (int i = 0; i < 32; i++) {
            int q = (int)nearbyintf(x[i] * id);
            o->qs[i] = (int8_t)q;
            sum += q;
        }
#endif
        o->d = amax / 127.0f;
        o->s = o->d * (float)sum;
    }
}

#endif
