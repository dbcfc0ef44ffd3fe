/* kc_x16f.h — the 16-row interleaved layout of float weights (f32, f16, bf16) and its matmul against f32 activations. */
#ifndef INGOT_KC_X16F_H
#define INGOT_KC_X16F_H

#include "kc_x16.h"

/* Why a layout of its own. Row-major float weights leave the decode GEMV
 * (kc_matmul.h's kc__mmf) a horizontal sum per row and four row streams per
 * tile; on a 2-core AMD EPYC it read an F16 matrix from DRAM at 20 GB/s
 * where a plain read of the same bytes runs at 37 (one thread, 67 MB).
 * Interleaving 16 rows column by column makes one 512-bit register hold
 * column k of 16 rows: a token's 16 outputs are then one vector, summed by
 * broadcast-FMAs along k with no horizontal step, and the weights of 16
 * rows are one contiguous stream (30 GB/s on that machine). A prefill step
 * widens each weight vector once for up to 8 tokens.
 *
 * Group g (rows 16g..16g+15) of an [OUT][IN] matrix is IN columns of 16
 * values at element offset g * IN * 16: column k of the group, lane i = row
 * 16g+i. The generator chooses it at build time for float matrices whose
 * rows come in groups of 16 and whose columns in tiles of 32 (the x16 tile
 * width, so the loader's group-by-group rewrite is the same as for the
 * block types); it takes exactly the bytes of the row-major rows.
 *
 * Arithmetic, the same for every token whatever the step size (so a
 * sequence's logits do not depend on what it is batched with): two f32
 * accumulators per output, one over the even columns and one over the odd
 * ones, each a chain of fused multiply-adds in column order, then their
 * sum, then the bias, then the value already in Y when accumulating. Two
 * chains let one token's decode issue an FMA every other cycle, which is
 * more than DRAM feeds. */

#define KC_X16F_COLS 32 /* columns per tile (the loader's rewrite unit) */

KC_INLINE int kc_x16f_type(int wt) { return wt == KC_WF32 || wt == KC_WF16 || wt == KC_WBF16; }
KC_INLINE size_t kc_x16f_elem(int wt) { return wt == KC_WF32 ? 4 : 2; }
KC_INLINE size_t kc_x16f_tile_bytes(int wt) { return (size_t)KC_X16F_COLS * KC_X16_ROWS * kc_x16f_elem(wt); }

/* Rewrites rows [0, R) (R a multiple of 16) of a row-major [R][IN] float
 * matrix at src into groups at dst; src and dst do not overlap. Element
 * copies of a fixed width: with a memcpy of a run-time size per element an
 * F16 SmolLM2 took 0.39 s to load and answer one token, against 0.14 s now
 * and 0.11 s for its rows copied as they are (best of 5). */
static inline void kc_x16f_repack(int wt, const void *src, void *dst, int64_t R, int IN) {
    for (int64_t g = 0; g < R / KC_X16_ROWS; g++)
        for (int i = 0; i < KC_X16_ROWS; i++) {
            const size_t from = (size_t)(g * KC_X16_ROWS + i) * (size_t)IN, to = (size_t)g * (size_t)IN * KC_X16_ROWS + (size_t)i;
            if (kc_x16f_elem(wt) == 4) {
                const uint32_t *s = (const uint32_t *)src + from;
                uint32_t *d = (uint32_t *)dst + to;
                for (int k = 0; k < IN; k++) d[(size_t)k * KC_X16_ROWS] = s[k];
            } else {
                const uint16_t *s = (const uint16_t *)src + from;
                uint16_t *d = (uint16_t *)dst + to;
                for (int k = 0; k < IN; k++) d[(size_t)k * KC_X16_ROWS] = s[k];
            }
        }
}

/* Row `row` (IN values) of an interleaved matrix as f32: exactly the values
 * kc_embed_row reads from the row-major row. */
static inline void kc_x16f_row(int wt, const void *W, int IN, int64_t row, float *out) {
    const size_t first = ((size_t)(row / KC_X16_ROWS) * (size_t)IN) * KC_X16_ROWS + (size_t)(row % KC_X16_ROWS);
    for (int k = 0; k < IN; k++) out[k] = kc__ldw1(W, wt, first + (size_t)k * KC_X16_ROWS);
}

/* Tokens per tile: two accumulators per token and the two weight vectors in
 * use fit 32 zmm registers at 8 (the activations are broadcast from memory);
 * 16 ymm hold 2 tokens' four half-group accumulator pairs. */
#if defined(__AVX512F__)
#define KC_X16F_NT 8
#elif defined(__AVX2__) && defined(__FMA__)
#define KC_X16F_NT 2
#else
#define KC_X16F_NT 4
#endif
/* No software prefetch: a group is one contiguous stream, which the
 * hardware prefetcher follows. On the 2-core AMD EPYC, prefetching each
 * cache line 2 KB ahead into L1 and 8 KB ahead into L2 (kc_matmul.h's
 * distances) took a 67 MB F16 GEMV from 30-33 down to 23-25 GB/s; 1 KB / 4
 * KB ahead gave 22, one line in two 24-30. */

#if defined(__AVX512F__)
/* Column k of a group: 16 weights widened to f32. */
KC_INLINE __m512 kc__x16f_col(const void *G, int wt, int k) {
    if (wt == KC_WF32) return _mm512_loadu_ps((const float *)G + (size_t)k * 16);
    const __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)((const uint16_t *)G + (size_t)k * 16));
    if (wt == KC_WF16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* NT tokens from t of one group G (rows r..r+15). */
KC_INLINE void kc__x16f_tile(const void *G, int wt, const float *X, int ldx, float *Y, int ldy, int IN, int r, int t,
                             int NT, const float *bias, int accumulate) {
    __m512 ae[KC_X16F_NT], ao[KC_X16F_NT];
    KC_UNROLL for (int j = 0; j < NT; j++) ae[j] = _mm512_setzero_ps(), ao[j] = _mm512_setzero_ps();
    const float *x = X + (size_t)t * (size_t)ldx;
    for (int k = 0; k < IN; k += 2) {
        const __m512 we = kc__x16f_col(G, wt, k), wo = kc__x16f_col(G, wt, k + 1);
        KC_UNROLL for (int j = 0; j < NT; j++) {
            ae[j] = _mm512_fmadd_ps(_mm512_set1_ps(x[(size_t)j * (size_t)ldx + (size_t)k]), we, ae[j]);
            ao[j] = _mm512_fmadd_ps(_mm512_set1_ps(x[(size_t)j * (size_t)ldx + (size_t)k + 1]), wo, ao[j]);
        }
    }
    KC_UNROLL for (int j = 0; j < NT; j++) {
        float *y = Y + (size_t)(t + j) * (size_t)ldy + r;
        __m512 v = _mm512_add_ps(ae[j], ao[j]);
        if (bias) v = _mm512_add_ps(v, _mm512_loadu_ps(bias + r));
        if (accumulate) v = _mm512_add_ps(v, _mm512_loadu_ps(y));
        _mm512_storeu_ps(y, v);
    }
}
#elif defined(__AVX2__) && defined(__FMA__)
/* Half h (lanes 8h..8h+7) of column k, widened to f32. */
KC_INLINE __m256 kc__x16f_col(const void *G, int wt, int k, int h) {
    const size_t e = (size_t)k * 16 + 8 * (size_t)h;
    if (wt == KC_WF32) return _mm256_loadu_ps((const float *)G + e);
    const __m128i v = _mm_loadu_si128((const __m128i *)(const void *)((const uint16_t *)G + e));
    if (wt == KC_WF16) {
#if defined(__F16C__)
        return _mm256_cvtph_ps(v);
#else
        float f[8];
        for (int i = 0; i < 8; i++) f[i] = kc_fp16_to_f32(((const uint16_t *)G)[e + (size_t)i]);
        return _mm256_loadu_ps(f);
#endif
    }
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
}

KC_INLINE void kc__x16f_tile(const void *G, int wt, const float *X, int ldx, float *Y, int ldy, int IN, int r, int t,
                             int NT, const float *bias, int accumulate) {
    __m256 ae[KC_X16F_NT][2], ao[KC_X16F_NT][2];
    KC_UNROLL for (int j = 0; j < NT; j++) KC_UNROLL for (int h = 0; h < 2; h++) ae[j][h] = _mm256_setzero_ps(),
                                                                                  ao[j][h] = _mm256_setzero_ps();
    const float *x = X + (size_t)t * (size_t)ldx;
    for (int k = 0; k < IN; k += 2) {
        KC_UNROLL for (int h = 0; h < 2; h++) {
            const __m256 we = kc__x16f_col(G, wt, k, h), wo = kc__x16f_col(G, wt, k + 1, h);
            KC_UNROLL for (int j = 0; j < NT; j++) {
                ae[j][h] = _mm256_fmadd_ps(_mm256_set1_ps(x[(size_t)j * (size_t)ldx + (size_t)k]), we, ae[j][h]);
                ao[j][h] = _mm256_fmadd_ps(_mm256_set1_ps(x[(size_t)j * (size_t)ldx + (size_t)k + 1]), wo, ao[j][h]);
            }
        }
    }
    KC_UNROLL for (int j = 0; j < NT; j++) KC_UNROLL for (int h = 0; h < 2; h++) {
        float *y = Y + (size_t)(t + j) * (size_t)ldy + r + 8 * h;
        __m256 v = _mm256_add_ps(ae[j][h], ao[j][h]);
        if (bias) v = _mm256_add_ps(v, _mm256_loadu_ps(bias + r + 8 * h));
        if (accumulate) v = _mm256_add_ps(v, _mm256_loadu_ps(y));
        _mm256_storeu_ps(y, v);
    }
}
#else
KC_INLINE void kc__x16f_tile(const void *G, int wt, const float *X, int ldx, float *Y, int ldy, int IN, int r, int t,
                             int NT, const float *bias, int accumulate) {
    for (int j = 0; j < NT; j++) {
        const float *x = X + (size_t)(t + j) * (size_t)ldx;
        float *y = Y + (size_t)(t + j) * (size_t)ldy + r;
        for (int i = 0; i < KC_X16_ROWS; i++) {
            float ae = 0.0f, ao = 0.0f;
            for (int k = 0; k < IN; k += 2) {
                ae += x[k] * kc__ldw1(G, wt, (size_t)k * 16 + (size_t)i);
                ao += x[k + 1] * kc__ldw1(G, wt, (size_t)(k + 1) * 16 + (size_t)i);
            }
            float v = ae + ao;
            if (bias) v += bias[r + i];
            if (accumulate) v += y[i];
            y[i] = v;
        }
    }
}
#endif

/* Y[t*ldy + r] = (accumulate ? Y : 0) + W[r] . X[t] (+ bias[r]) for rows
 * r0 <= r < r1 (multiples of 16) of an interleaved float matrix and T
 * tokens of f32 activations (token t at X + t*ldx). A group's weights (16
 * x IN values, tens of KB) stay in L1/L2 while the token tiles pass over
 * them, so each weight byte comes from memory once per call. */
KC_INLINE void kc__mm16(const void *W, int wt, const float *X, int ldx, float *Y, int ldy, int T, int IN, int r0,
                        int r1, const float *bias, int accumulate) {
    const size_t gb = (size_t)IN * KC_X16_ROWS * kc_x16f_elem(wt);
    for (int r = r0; r < r1; r += KC_X16_ROWS) {
        const void *G = (const char *)W + (size_t)(r / KC_X16_ROWS) * gb;
        int t = 0;
#define KC__X16F_STEP(t_, nt_) kc__x16f_tile(G, wt, X, ldx, Y, ldy, IN, r, (t_), (nt_), bias, accumulate)
        KC_X16_TOKEN_TILES(t, T, KC_X16F_NT, KC__X16F_STEP);
#undef KC__X16F_STEP
    }
}

static inline void kc_mm16_f32(const void *W, const float *X, int ldx, float *Y, int ldy, int T, int IN, int r0,
                               int r1, const float *bias, int accumulate) {
    kc__mm16(W, KC_WF32, X, ldx, Y, ldy, T, IN, r0, r1, bias, accumulate);
}
static inline void kc_mm16_f16(const void *W, const float *X, int ldx, float *Y, int ldy, int T, int IN, int r0,
                               int r1, const float *bias, int accumulate) {
    kc__mm16(W, KC_WF16, X, ldx, Y, ldy, T, IN, r0, r1, bias, accumulate);
}
static inline void kc_mm16_bf16(const void *W, const float *X, int ldx, float *Y, int ldy, int T, int IN, int r0,
                                int r1, const float *bias, int accumulate) {
    kc__mm16(W, KC_WBF16, X, ldx, Y, ldy, T, IN, r0, r1, bias, accumulate);
}

#endif
