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
 * rows are one contiguous stream (30 GB/s on that machine). A step of
 * several tokens widens each weight vector once for up to 6 of them, and
 * broadcasts each activation once for 4 groups.
 *
 * Group g (rows 16g..16g+15) of an [OUT][IN] matrix is IN columns of 16
 * values at element offset g * IN * 16: column k of the group, lane i = row
 * 16g+i. The generator chooses it at build time for float matrices whose
 * rows come in groups of 16 and whose columns in tiles of 32 (the x16 tile
 * width, so the loader's group-by-group rewrite is the same as for the
 * block types); it takes exactly the bytes of the row-major rows.
 *
 * Arithmetic, the same for every token whatever the step size (so a
 * sequence's logits do not depend on what it is batched with): one f32
 * chain of fused multiply-adds per output, in column order, then the bias,
 * then the value already in Y when accumulating. */

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

/* A tile is NG groups (up to KC_X16F_NG: 64 rows) by NT tokens (up to
 * KC_X16F_NT). Per column it loads NG weight vectors and broadcasts each of
 * its NT activations once for NG FMAs: NG x NT accumulators, NG weight
 * vectors and a broadcast fit 32 zmm registers at 4 x 6 (16 ymm at 2 x 2
 * with two halves per group). Broadcasts compete with the FMAs: a batched
 * step of 16 tokens ran at 77 GFLOP/s a core with one group per tile and
 * two chains per output, 100 with four groups and one chain (the FMA peak
 * is 117). A step of one or two tokens is bound by the weight stream
 * instead, and takes one group at a time: this CPU's prefetcher
 * follows one stream best (two or four streams at once, groups apart, read
 * an F16 matrix of 576 columns at 17-21 GB/s where one reads 23-30). One
 * token's single chain then waits on the FMA latency: 16 weights per 4
 * cycles, about DRAM's speed on one core. Steps of KC_X16F_WIDE tokens or
 * more take the wide tiles (GEMV of 576 columns, GB/s of F16 weights, one
 * thread: 1 token 25-30, the row-major kernel 15-19; 2 tokens 26-27 against
 * 21-23; 3 tokens 15 against 18; 4 tokens 18 against 22; 16 tokens 100
 * GFLOP/s against 95-101). */
#define KC_X16F_WIDE 3
#if defined(__AVX512F__)
#define KC_X16F_NG 4
#define KC_X16F_NT 6
#elif defined(__AVX2__) && defined(__FMA__)
#define KC_X16F_NG 2
#define KC_X16F_NT 2
#elif defined(__ARM_NEON)
#define KC_X16F_NG 1
#define KC_X16F_NT 4 /* 16 accumulators (4 quarters x 4 tokens), 4 weight vectors, a broadcast: of 32 */
#elif defined(__wasm_simd128__)
#define KC_X16F_NG 1
#define KC_X16F_NT 2 /* 8 accumulators, 4 weight vectors, a broadcast: within x86's 16 vector registers,
                        which a browser's compiler maps SIMD128 to */
#else
#define KC_X16F_NG 1
#define KC_X16F_NT 4
#endif
/* No software prefetch: each group is one contiguous stream, which the
 * hardware prefetcher follows. On the 2-core AMD EPYC, prefetching each
 * cache line 2 KB ahead into L1 and 8 KB ahead into L2 (kc_matmul.h's
 * distances) took a 67 MB F16 GEMV from 30-33 down to 23-25 GB/s; 1 KB / 4
 * KB ahead gave 22, one line in two 24-30. */

#if defined(__AVX512F__)
/* NG groups from G (rows r..r+16 NG), NT tokens from t; gb: bytes per group. */
KC_INLINE void kc__x16f_tile(const void *G, size_t gb, int wt, const float *X, int ldx, float *Y, int ldy, int IN,
                             int r, int t, int NG, int NT, const float *bias, int accumulate) {
    __m512 acc[KC_X16F_NG][KC_X16F_NT];
    KC_UNROLL for (int g = 0; g < NG; g++) KC_UNROLL for (int j = 0; j < NT; j++) acc[g][j] = _mm512_setzero_ps();
    const float *x = X + (size_t)t * (size_t)ldx;
    for (int k = 0; k < IN; k++) {
        __m512 w[KC_X16F_NG];
        KC_UNROLL for (int g = 0; g < NG; g++) w[g] = kc__ldw((const char *)G + (size_t)g * gb, wt, (size_t)k * 16); /* column k */
        KC_UNROLL for (int j = 0; j < NT; j++) {
            const __m512 xv = _mm512_set1_ps(x[(size_t)j * (size_t)ldx + (size_t)k]);
            KC_UNROLL for (int g = 0; g < NG; g++) acc[g][j] = _mm512_fmadd_ps(xv, w[g], acc[g][j]);
        }
    }
    KC_UNROLL for (int g = 0; g < NG; g++) KC_UNROLL for (int j = 0; j < NT; j++) {
        float *y = Y + (size_t)(t + j) * (size_t)ldy + r + 16 * g;
        __m512 v = acc[g][j];
        if (bias) v = _mm512_add_ps(v, _mm512_loadu_ps(bias + r + 16 * g));
        if (accumulate) v = _mm512_add_ps(v, _mm512_loadu_ps(y));
        _mm512_storeu_ps(y, v);
    }
}
#elif defined(__AVX2__) && defined(__FMA__)
KC_INLINE void kc__x16f_tile(const void *G, size_t gb, int wt, const float *X, int ldx, float *Y, int ldy, int IN,
                             int r, int t, int NG, int NT, const float *bias, int accumulate) {
    __m256 acc[KC_X16F_NG][2][KC_X16F_NT];
    KC_UNROLL for (int g = 0; g < NG; g++) KC_UNROLL for (int h = 0; h < 2; h++) KC_UNROLL for (int j = 0; j < NT; j++)
        acc[g][h][j] = _mm256_setzero_ps();
    const float *x = X + (size_t)t * (size_t)ldx;
    for (int k = 0; k < IN; k++) {
        __m256 w[KC_X16F_NG][2];
        KC_UNROLL for (int g = 0; g < NG; g++) KC_UNROLL for (int h = 0; h < 2; h++)
            w[g][h] = kc__ldw((const char *)G + (size_t)g * gb, wt, (size_t)k * 16 + 8 * (size_t)h); /* half h of column k */
        KC_UNROLL for (int j = 0; j < NT; j++) {
            const __m256 xv = _mm256_set1_ps(x[(size_t)j * (size_t)ldx + (size_t)k]);
            KC_UNROLL for (int g = 0; g < NG; g++) KC_UNROLL for (int h = 0; h < 2; h++)
                acc[g][h][j] = _mm256_fmadd_ps(xv, w[g][h], acc[g][h][j]);
        }
    }
    KC_UNROLL for (int g = 0; g < NG; g++) KC_UNROLL for (int h = 0; h < 2; h++) KC_UNROLL for (int j = 0; j < NT; j++) {
        float *y = Y + (size_t)(t + j) * (size_t)ldy + r + 16 * g + 8 * h;
        __m256 v = acc[g][h][j];
        if (bias) v = _mm256_add_ps(v, _mm256_loadu_ps(bias + r + 16 * g + 8 * h));
        if (accumulate) v = _mm256_add_ps(v, _mm256_loadu_ps(y));
        _mm256_storeu_ps(y, v);
    }
}
#elif defined(__ARM_NEON)
/* 4 weights of any float type from element i of W, as floats */
KC_INLINE float32x4_t kc__x16f_ld4(const void *W, int wt, size_t i) {
    if (wt == KC_WF32) return vld1q_f32((const float *)W + i);
    const uint16x4_t h = vld1_u16((const uint16_t *)W + i);
    if (wt == KC_WF16) return vcvt_f32_f16(vreinterpret_f16_u16(h));
    return vreinterpretq_f32_u32(vshll_n_u16(h, 16));
}
/* NEON: each column's 16 rows as four quarters of 4 lanes */
KC_INLINE void kc__x16f_tile(const void *G, size_t gb, int wt, const float *X, int ldx, float *Y, int ldy, int IN,
                             int r, int t, int NG, int NT, const float *bias, int accumulate) {
    float32x4_t acc[KC_X16F_NG][4][KC_X16F_NT];
    KC_UNROLL for (int g = 0; g < NG; g++) KC_UNROLL for (int q = 0; q < 4; q++) KC_UNROLL for (int j = 0; j < NT; j++)
        acc[g][q][j] = vdupq_n_f32(0.0f);
    const float *x = X + (size_t)t * (size_t)ldx;
    for (int k = 0; k < IN; k++) {
        float32x4_t w[KC_X16F_NG][4];
        KC_UNROLL for (int g = 0; g < NG; g++) KC_UNROLL for (int q = 0; q < 4; q++)
            w[g][q] = kc__x16f_ld4((const char *)G + (size_t)g * gb, wt, (size_t)k * 16 + 4 * (size_t)q);
        KC_UNROLL for (int j = 0; j < NT; j++) {
            const float xv = x[(size_t)j * (size_t)ldx + (size_t)k];
            KC_UNROLL for (int g = 0; g < NG; g++) KC_UNROLL for (int q = 0; q < 4; q++)
                acc[g][q][j] = vfmaq_n_f32(acc[g][q][j], w[g][q], xv);
        }
    }
    KC_UNROLL for (int g = 0; g < NG; g++) KC_UNROLL for (int q = 0; q < 4; q++) {
        const float *bq = bias ? bias + r + 16 * g + 4 * q : NULL;
        KC_UNROLL for (int j = 0; j < NT; j++) { /* sum + bias, then + Y when accumulating */
            float *y = Y + (size_t)(t + j) * (size_t)ldy + r + 16 * g + 4 * q;
            const float32x4_t v = bq ? vaddq_f32(acc[g][q][j], vld1q_f32(bq)) : acc[g][q][j];
            vst1q_f32(y, accumulate ? vaddq_f32(v, vld1q_f32(y)) : v);
        }
    }
}
#elif defined(__wasm_simd128__)
/* SIMD128: each column's 16 rows as four quarters of 4 lanes, as NEON's (kc__ldw: kc_matmul.h) */
KC_INLINE void kc__x16f_tile(const void *G, size_t gb, int wt, const float *X, int ldx, float *Y, int ldy, int IN,
                             int r, int t, int NG, int NT, const float *bias, int accumulate) {
    v128_t acc[KC_X16F_NG][4][KC_X16F_NT];
    KC_UNROLL for (int g = 0; g < NG; g++) KC_UNROLL for (int q = 0; q < 4; q++) KC_UNROLL for (int j = 0; j < NT; j++)
        acc[g][q][j] = wasm_f32x4_splat(0.0f);
    const float *x = X + (size_t)t * (size_t)ldx;
    for (int k = 0; k < IN; k++) {
        v128_t w[KC_X16F_NG][4];
        KC_UNROLL for (int g = 0; g < NG; g++) KC_UNROLL for (int q = 0; q < 4; q++)
            w[g][q] = kc__ldw((const char *)G + (size_t)g * gb, wt, (size_t)k * 16 + 4 * (size_t)q);
        KC_UNROLL for (int j = 0; j < NT; j++) {
            const v128_t xv = wasm_f32x4_splat(x[(size_t)j * (size_t)ldx + (size_t)k]);
            KC_UNROLL for (int g = 0; g < NG; g++) KC_UNROLL for (int q = 0; q < 4; q++)
                acc[g][q][j] = wasm_f32x4_add(acc[g][q][j], wasm_f32x4_mul(w[g][q], xv));
        }
    }
    KC_UNROLL for (int g = 0; g < NG; g++) KC_UNROLL for (int q = 0; q < 4; q++) {
        const float *bq = bias ? bias + r + 16 * g + 4 * q : NULL;
        KC_UNROLL for (int j = 0; j < NT; j++) { /* sum + bias, then + Y when accumulating */
            float *y = Y + (size_t)(t + j) * (size_t)ldy + r + 16 * g + 4 * q;
            const v128_t v = bq ? wasm_f32x4_add(acc[g][q][j], wasm_v128_load(bq)) : acc[g][q][j];
            wasm_v128_store(y, accumulate ? wasm_f32x4_add(v, wasm_v128_load(y)) : v);
        }
    }
}
#else
KC_INLINE void kc__x16f_tile(const void *G, size_t gb, int wt, const float *X, int ldx, float *Y, int ldy, int IN,
                             int r, int t, int NG, int NT, const float *bias, int accumulate) {
    for (int g = 0; g < NG; g++)
        for (int j = 0; j < NT; j++) {
            const void *Gg = (const char *)G + (size_t)g * gb;
            const float *x = X + (size_t)(t + j) * (size_t)ldx;
            float *y = Y + (size_t)(t + j) * (size_t)ldy + r + 16 * g;
            for (int i = 0; i < KC_X16_ROWS; i++) {
                float a = 0.0f;
                for (int k = 0; k < IN; k++) a += x[k] * kc__ldw1(Gg, wt, (size_t)k * 16 + (size_t)i);
                if (bias) a += bias[r + 16 * g + i];
                if (accumulate) a += y[i];
                y[i] = a;
            }
        }
}
#endif

/* Y[t*ldy + r] = (accumulate ? Y : 0) + W[r] . X[t] (+ bias[r]) for rows
 * r0 <= r < r1 (multiples of 16) of an interleaved float matrix and T
 * tokens of f32 activations (token t at X + t*ldx). A tile's weights (up
 * to 64 x IN values) stay in L1/L2 while the token tiles pass over them, so
 * each weight byte comes from memory once per call. */
KC_INLINE void kc__mm16(const void *W, int wt, const float *X, int ldx, float *Y, int ldy, int T, int IN, int r0,
                        int r1, const float *bias, int accumulate) {
    const size_t gb = (size_t)IN * KC_X16_ROWS * kc_x16f_elem(wt);
    for (int r = r0; r < r1;) {
        const void *G = (const char *)W + (size_t)(r / KC_X16_ROWS) * gb;
        const int left = (r1 - r) / KC_X16_ROWS;
        int t = 0;
#define KC__X16F_STEP(t_, nt_) kc__x16f_tile(G, gb, wt, X, ldx, Y, ldy, IN, r, (t_), NG, (nt_), bias, accumulate)
        /* steps of fewer tokens than a tile are bound by the weight stream:
         * one group at a time. Wider ones take whole tiles of KC_X16F_NG
         * groups, then the groups left in one tile (a thread's share of rows
         * need not be a multiple of the tile). */
        const int wide = T >= KC_X16F_WIDE;
        if (wide && left >= KC_X16F_NG) {
            enum { NG = KC_X16F_NG };
            KC_X16_TOKEN_TILES(t, T, KC_X16F_NT, KC__X16F_STEP);
            r += NG * KC_X16_ROWS;
        } else if (wide && KC_X16F_NG > 3 && left == 3) {
            enum { NG = KC_X16F_NG > 3 ? 3 : 1 };
            KC_X16_TOKEN_TILES(t, T, KC_X16F_NT, KC__X16F_STEP);
            r += NG * KC_X16_ROWS;
        } else if (wide && KC_X16F_NG > 2 && left == 2) {
            enum { NG = KC_X16F_NG > 2 ? 2 : 1 };
            KC_X16_TOKEN_TILES(t, T, KC_X16F_NT, KC__X16F_STEP);
            r += NG * KC_X16_ROWS;
        } else {
            enum { NG = 1 };
            KC_X16_TOKEN_TILES(t, T, KC_X16F_NT, KC__X16F_STEP);
            r += KC_X16_ROWS;
        }
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
