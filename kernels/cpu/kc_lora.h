/* kc_lora.h — the two small matmuls of a LoRA update, y += B (scale A x), for one token.
 *
 * A is [rank][in], B^T [out / 16][rank][16], both f32 (runtime/load/lora.h). The
 * down product takes four rows of A per pass over x, each with its own
 * accumulators (one chain per row would wait on its FMA latency); the up
 * product keeps a 16-column chunk of y in a register across every rank
 * (instead of loading and storing it once per rank) and reads that chunk's
 * B^T for every rank from one contiguous block. A token's result depends
 * only on its own x and the adapter: the same bits whichever thread or
 * batch computes it.
 */
#ifndef KC_LORA_H
#define KC_LORA_H

#include <stdint.h>
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

/* down[r] = scale * (A[r] . x) for r < rank. */
static inline void kc_lora_down(const float *a, int rank, int in, const float *x, float scale, float *down) {
    int r = 0;
#if defined(__AVX512F__)
    if (in % 16 == 0) {
        for (; r + 4 <= rank; r += 4) {
            const float *a0 = a + (size_t)r * in, *a1 = a0 + in, *a2 = a1 + in, *a3 = a2 + in;
            __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps(), s2 = _mm512_setzero_ps(), s3 = _mm512_setzero_ps();
            for (int i = 0; i < in; i += 16) {
                const __m512 v = _mm512_loadu_ps(x + i);
                s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a0 + i), v, s0);
                s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a1 + i), v, s1);
                s2 = _mm512_fmadd_ps(_mm512_loadu_ps(a2 + i), v, s2);
                s3 = _mm512_fmadd_ps(_mm512_loadu_ps(a3 + i), v, s3);
            }
            down[r] = scale * _mm512_reduce_add_ps(s0);
            down[r + 1] = scale * _mm512_reduce_add_ps(s1);
            down[r + 2] = scale * _mm512_reduce_add_ps(s2);
            down[r + 3] = scale * _mm512_reduce_add_ps(s3);
        }
    }
#elif defined(__AVX2__) && defined(__FMA__)
    if (in % 8 == 0) {
        for (; r + 4 <= rank; r += 4) {
            const float *a0 = a + (size_t)r * in, *a1 = a0 + in, *a2 = a1 + in, *a3 = a2 + in;
            __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
            for (int i = 0; i < in; i += 8) {
                const __m256 v = _mm256_loadu_ps(x + i);
                s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a0 + i), v, s0);
                s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a1 + i), v, s1);
                s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a2 + i), v, s2);
                s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a3 + i), v, s3);
            }
            __m256 s[4] = {s0, s1, s2, s3};
            for (int k = 0; k < 4; k++) {
                __m128 h = _mm_add_ps(_mm256_castps256_ps128(s[k]), _mm256_extractf128_ps(s[k], 1));
                h = _mm_add_ps(h, _mm_movehl_ps(h, h));
                h = _mm_add_ss(h, _mm_movehdup_ps(h));
                down[r + k] = scale * _mm_cvtss_f32(h);
            }
        }
    }
#endif
    for (; r < rank; r++) {
        const float *ar = a + (size_t)r * in;
        float s = 0.0f;
        for (int i = 0; i < in; i++) s += ar[i] * x[i];
        down[r] = scale * s;
    }
}

/* y[o] += sum_r down[r] * B[o][r] for o in [o0, o1), o0 a multiple of 16; bt is B^T in blocks of
 * 16 columns, [out / 16][rank][16] (runtime/load/lora.h, LORA_BLOCK), so one block's every rank is
 * 64 * rank contiguous bytes. */
static inline void kc_lora_up(const float *bt, int rank, int o0, int o1, const float *down, float *y) {
    for (int o = o0; o < o1; o += 16) {
        const float *blk = bt + (size_t)(o / 16) * (size_t)rank * 16;
        if (o + 16 <= o1) {
#if defined(__AVX512F__)
            __m512 acc = _mm512_loadu_ps(y + o);
            for (int r = 0; r < rank; r++) acc = _mm512_fmadd_ps(_mm512_set1_ps(down[r]), _mm512_loadu_ps(blk + r * 16), acc);
            _mm512_storeu_ps(y + o, acc);
            continue;
#elif defined(__AVX2__) && defined(__FMA__)
            __m256 lo = _mm256_loadu_ps(y + o), hi = _mm256_loadu_ps(y + o + 8);
            for (int r = 0; r < rank; r++) {
                const __m256 dr = _mm256_set1_ps(down[r]);
                lo = _mm256_fmadd_ps(dr, _mm256_loadu_ps(blk + r * 16), lo);
                hi = _mm256_fmadd_ps(dr, _mm256_loadu_ps(blk + r * 16 + 8), hi);
            }
            _mm256_storeu_ps(y + o, lo);
            _mm256_storeu_ps(y + o + 8, hi);
            continue;
#endif
        }
        for (int c = 0; c < 16 && o + c < o1; c++) {
            float acc = y[o + c];
            for (int r = 0; r < rank; r++) acc += down[r] * blk[r * 16 + c];
            y[o + c] = acc;
        }
    }
}

#endif
