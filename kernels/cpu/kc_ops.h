/* kc_ops.h — the non-GEMM CPU kernels a generated model composes: norms, RoPE,
 * activations, paged KV store and paged attention.
 *
 * All are static inline and take their shapes as arguments: the generated
 * code passes literal constants, so each call site is specialized. Every
 * routine works on one token's row (or one token × head); parallelism is the
 * caller's (the generated kernel's parallel_for over tokens or heads).
 */
#ifndef INGOT_KC_OPS_H
#define INGOT_KC_OPS_H

#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "kc_half.h"

/* The KV cache's element: f32, f16 in a model built with --kv-dtype f16
 * (which defines KC_KV_F16 1 before including this file), or q8_0 with
 * --kv-dtype q8_0 (KC_KV_Q8 1). f16 halves the bytes attention streams at
 * long contexts; K and V are rounded to nearest even once, when stored, and
 * widened back to f32 (exactly) when read, so every computation stays f32.
 * q8_0 takes 34 bytes per 32 values (0.53x f16): each 32 values of a row
 * share an f16 scale d = max|x| / 127 and are stored as round(x / d) in
 * int8, llama.cpp's Q8_0 block (its -ctk/-ctv q8_0); read back as d * q,
 * then f32 as before. A cached row of n values is KC_KV_ROW(n) elements of
 * kc_kv_t (n a multiple of 32 for q8_0: the generator checks). */
#ifndef KC_KV_F16
#define KC_KV_F16 0
#endif
#ifndef KC_KV_Q8
#define KC_KV_Q8 0
#endif
#if KC_KV_Q8
typedef uint8_t kc_kv_t;
#define KC_KV_ROW(n) ((size_t)(n) / 32 * 34)
#elif KC_KV_F16
typedef uint16_t kc_kv_t;
#define KC_KV_ROW(n) ((size_t)(n))
#else
typedef float kc_kv_t;
#define KC_KV_ROW(n) ((size_t)(n))
#endif
#define KC_KV_MAX_HEAD_DIM 1024 /* rows widened through a stack buffer (scalar paths) */

/* One cached row of n values as f32: the row itself, or widened into tmp. */
static inline const float *kc__kv_row(const kc_kv_t *p, int n, float *tmp) {
#if KC_KV_Q8
    for (int b = 0; b < n / 32; b++) {
        const uint8_t *blk = p + (size_t)b * 34;
        const float d = kc_fp16_to_f32((uint16_t)(blk[0] | blk[1] << 8));
        for (int i = 0; i < 32; i++) tmp[32 * b + i] = d * (float)(int8_t)blk[2 + i];
    }
    return tmp;
#elif KC_KV_F16
    for (int i = 0; i < n; i++) tmp[i] = kc_fp16_to_f32(p[i]);
    return tmp;
#else
    (void)n, (void)tmp;
    return p;
#endif
}
#if defined(__AVX512F__)
/* Values [16 i, 16 i + 16) of a cached row as f32 (vcvtph2ps for f16; for
 * q8_0 half a block: 16 int8 widened and times the block's scale). */
static inline __m512 kc__kv_load16(const kc_kv_t *row, int i) {
#if KC_KV_Q8
    const uint8_t *blk = row + (size_t)(i >> 1) * 34;
    const float d = kc_fp16_to_f32((uint16_t)(blk[0] | blk[1] << 8));
    const __m128i q = _mm_loadu_si128((const __m128i *)(const void *)(blk + 2 + 16 * (i & 1)));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), _mm512_set1_ps(d));
#elif KC_KV_F16
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(row + 16 * i)));
#else
    return _mm512_loadu_ps(row + 16 * i);
#endif
}
#endif

/* out = x / rms(x) * (w + weight_offset). Sum of squares in double: the
 * references (transformers f32) are more accurate than a naive f32 sum over
 * long rows, and this costs nothing next to the matmuls. */
/* y[i] = x[perm[i]], i < n: the activations in the input order of a weight
 * whose columns were reordered at load (act-order GPTQ). */
static inline void kc_gather(const float *x, const int32_t *perm, int n, float *y) {
    for (int i = 0; i < n; i++) y[i] = x[perm[i]];
}

static inline void kc_rmsnorm(const float *x, const float *w, float *out, int n, float eps,
                              float weight_offset) {
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    const float r = (float)(1.0 / sqrt(ss / n + (double)eps));
    for (int i = 0; i < n; i++) out[i] = (x[i] * r) * (w[i] + weight_offset);
}

/* Rotates one token's `heads` heads of head_dim in place by position pos.
 * cos_sin: the model's table, [max_ctx][rot_dim/2][2] (cos, sin).
 * adjacent_pairs = 1: pairs (2i, 2i+1) (GGUF llama layout, whose Q/K rows were
 * permuted at conversion); 0: pairs (i, i + rot_dim/2) (Hugging Face layout). */
static inline void kc_rope(float *x, int heads, int head_dim, int rot_dim, const float *cos_sin,
                           int pos, int adjacent_pairs) {
    const float *cs = cos_sin + (size_t)pos * rot_dim;
    const int half = rot_dim / 2;
    for (int h = 0; h < heads; h++) {
        float *v = x + (size_t)h * head_dim;
        for (int i = 0; i < half; i++) {
            const float c = cs[2 * i], s = cs[2 * i + 1];
            const int a = adjacent_pairs ? 2 * i : i, b = adjacent_pairs ? 2 * i + 1 : i + half;
            const float x0 = v[a], x1 = v[b];
            v[a] = x0 * c - x1 * s;
            v[b] = x0 * s + x1 * c;
        }
    }
}

/* Fills the RoPE table the way the Hugging Face reference computes it in f32:
 * inv_freq = 1 / theta^(2i/rot_dim), angle = f32(pos) * inv_freq. */
static inline void kc_rope_table(float *cos_sin, int max_ctx, int rot_dim, double theta) {
    const int half = rot_dim / 2;
    for (int i = 0; i < half; i++) {
        const float expo = (float)(2 * i) / (float)rot_dim;
        const float inv_freq = 1.0f / powf((float)theta, expo);
        for (int p = 0; p < max_ctx; p++) {
            const float ang = (float)p * inv_freq;
            cos_sin[(size_t)p * rot_dim + 2 * i] = (float)cos((double)ang);
            cos_sin[(size_t)p * rot_dim + 2 * i + 1] = (float)sin((double)ang);
        }
    }
}

static inline float kc_silu(float x) { return x / (1.0f + expf(-x)); }

static inline float kc_gelu_tanh(float x) {
    const float k = 0.7978845608028654f; /* sqrt(2/pi) */
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

/* Paged KV layout, per layer: [block][kv_head][slot][row of head_dim
 * values], K then V for all layers in two separate halves of the pool:
 *   K(layer, block, h, slot) at row ((layer * n_blocks + block) * kv_heads + h) * BLOCK + slot
 * and V at the same row + layers * n_blocks * kv_heads * BLOCK; a row is
 * KC_KV_ROW(head_dim) elements of kc_kv_t. kc_kv_row_index gives the row,
 * kc_kv_offset its first element. */
static inline size_t kc_kv_row_index(int layer, int n_blocks, int kv_heads, int block_size, int block, int h,
                                     int slot) {
    return (((size_t)layer * n_blocks + block) * kv_heads + h) * block_size + slot;
}
static inline size_t kc_kv_offset(int layer, int n_blocks, int kv_heads, int block_size,
                                  int head_dim, int block, int h, int slot) {
    return kc_kv_row_index(layer, n_blocks, kv_heads, block_size, block, h, slot) * KC_KV_ROW(head_dim);
}

/* n values (a multiple of 32 for q8_0) into the cache's element type. */
static inline void kc__kv_put(kc_kv_t *dst, const float *src, int n) {
#if KC_KV_Q8
    for (int b = 0; b < n / 32; b++) {
        const float *x = src + 32 * b;
        uint8_t *blk = dst + (size_t)b * 34;
        float amax = 0.0f;
        for (int i = 0; i < 32; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
        const float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
        const uint16_t dh = kc_f32_to_fp16(d);
        blk[0] = (uint8_t)dh, blk[1] = (uint8_t)(dh >> 8);
        for (int i = 0; i < 32; i++) blk[2 + i] = (uint8_t)(int8_t)lrintf(x[i] * id);
    }
#elif KC_KV_F16
    int i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(void *)(dst + i), _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#endif
    for (; i < n; i++) dst[i] = kc_f32_to_fp16(src[i]);
#else
    memcpy(dst, src, sizeof(float) * (size_t)n);
#endif
}

/* Writes one token's K and V rows (kv_heads × head_dim each) at position pos;
 * v NULL: the keys are the whole cached row (values shared with them). */
static inline void kc_kv_store(kc_kv_t *kv, int n_layers, int layer, int n_blocks, int kv_heads,
                               int block_size, int head_dim, const int32_t *block_table, int pos,
                               const float *k, const float *v) {
    const size_t v_base = (size_t)n_layers * n_blocks * kv_heads * block_size * KC_KV_ROW(head_dim);
    const int block = block_table[pos / block_size], slot = pos % block_size;
    for (int h = 0; h < kv_heads; h++) {
        const size_t off =
            kc_kv_offset(layer, n_blocks, kv_heads, block_size, head_dim, block, h, slot);
        kc__kv_put(kv + off, k + (size_t)h * head_dim, head_dim);
        if (v) kc__kv_put(kv + v_base + off, v + (size_t)h * head_dim, head_dim);
    }
}

/* Dot product and y += a*x over n floats, vectorized where n allows it.
 * head_dim is a literal at every call site, so the branches fold away. */
static inline float kc_dot(const float *a, const float *b, int n) {
    int i = 0;
    float s = 0.0f;
#if defined(__AVX512F__)
    if (n % 16 == 0) {
        __m512 acc = _mm512_setzero_ps();
        for (; i < n; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
        return _mm512_reduce_add_ps(acc);
    }
#endif
#if defined(__AVX2__) && defined(__FMA__)
    if (n % 8 == 0) {
        __m256 acc = _mm256_setzero_ps();
        for (; i < n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
        __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
        h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        h = _mm_add_ss(h, _mm_movehdup_ps(h));
        return _mm_cvtss_f32(h);
    }
#endif
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

static inline void kc_axpy(float a, const float *x, float *y, int n) {
    int i = 0;
#if defined(__AVX512F__)
    if (n % 16 == 0) {
        const __m512 va = _mm512_set1_ps(a);
        for (; i < n; i += 16)
            _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
        return;
    }
#endif
#if defined(__AVX2__) && defined(__FMA__)
    if (n % 8 == 0) {
        const __m256 va = _mm256_set1_ps(a);
        for (; i < n; i += 8)
            _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
        return;
    }
#endif
    for (; i < n; i++) y[i] += a * x[i];
}

/* Full unrolling of the fixed-count register-tile loops below (so that the
 * accumulator arrays live in registers), and kc_attend inlined into its one
 * call site so that head_dim and group are constants there. */
#if defined(__clang__)
#define KC_OPS_UNROLL _Pragma("unroll")
#define KC_OPS_INLINE static inline __attribute__((always_inline))
#elif defined(__GNUC__)
#define KC_OPS_UNROLL _Pragma("GCC unroll 16")
#define KC_OPS_INLINE static inline __attribute__((always_inline))
#else
#define KC_OPS_UNROLL
#define KC_OPS_INLINE static inline
#endif

#if defined(__AVX512F__)
/* Horizontal sums of 16 vectors at once: lane j of the result is the sum of
 * v[j]'s 16 lanes. Four halving rounds, each pairing vectors with a shuffle
 * and adding (30 shuffles + 15 adds for 16 sums, instead of ~8 operations
 * per sum with one reduction each):
 *   unpack lo/hi: pairs (2i, 2i+1) -> per 128-bit lane [a b a b] partials,
 *   shuffle_ps 0x44/0xee: quads -> per 128-bit lane [v0 v1 v2 v3] partials,
 *   shuffle_f32x4 0x88/0xdd twice: the four 128-bit lanes summed into place. */
KC_OPS_INLINE __m512 kc__hsum16x16(__m512 v[16]) {
    __m512 a[8], b[4], c[2];
    KC_OPS_UNROLL for (int i = 0; i < 8; i++)
        a[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
    KC_OPS_UNROLL for (int i = 0; i < 4; i++)
        b[i] = _mm512_add_ps(_mm512_shuffle_ps(a[2 * i], a[2 * i + 1], 0x44),
                             _mm512_shuffle_ps(a[2 * i], a[2 * i + 1], 0xee));
    KC_OPS_UNROLL for (int i = 0; i < 2; i++)
        c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0xdd));
    return _mm512_add_ps(_mm512_shuffle_f32x4(c[0], c[1], 0x88), _mm512_shuffle_f32x4(c[0], c[1], 0xdd));
}
#endif

#if defined(__AVX512F__)
/* exp of 16 floats, within ~1 ulp of expf (the softmax needs 1e-5): x =
 * n*ln2 + r with n = round(x/ln2) and a two-part ln2 (r exact to ~1 ulp),
 * |r| <= ln2/2; e^r by its degree-7 Taylor polynomial (truncation error
 * < 6e-9 relative); scalef applies 2^n (underflows cleanly to 0). */
KC_OPS_INLINE __m512 kc__exp16(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}
#endif

/* Causal attention of the `group` query heads that share one KV head, for
 * one token at position pos, over positions [first, pos] of its sequence
 * (first > 0 only for a sliding window). Each K and V row is loaded once for
 * the whole group (GQA). q: the group's heads, contiguous [group][head_dim];
 * out likewise. scores: scratch of group * (pos - first + 1) floats.
 * softcap > 0 applies tanh soft-capping to the scaled scores. Softmax is
 * max-subtracted, in f32.
 *
 * With AVX-512 and head_dim a multiple of 16 (64 for most models):
 *  - scores: 16 positions at a time; their K rows are located once (block
 *    table lookups) and, per query head, 16 dot-product accumulators are
 *    reduced together by kc__hsum16x16 into one vector of 16 scores;
 *  - output: sum_p e_p * V_p is accumulated in registers for up to 4 heads
 *    x 64 dims (16 accumulators): each V row is loaded once per 4 heads and
 *    the output is written once, then scaled by 1/sum (instead of an axpy
 *    per (position, head) that loads and stores the output every time).
 * Other shapes use the plain loops (kc_dot / kc_axpy).
 *
 * kc_attend_kv generalizes the values: value_dim columns each (out is
 * [group][value_dim]), read from the V half of the pool, or, with
 * shared_value, from the first value_dim columns of the key rows themselves
 * (the pool then has no V half: MLA's cached latent is both). */
KC_OPS_INLINE void kc_attend_kv(const kc_kv_t *kv, int n_layers, int layer, int n_blocks, int kv_heads,
                                int block_size, int head_dim, int value_dim, int shared_value,
                                const int32_t *block_table, int kv_head, int group, int first, int pos,
                                const float *q, float scale, float softcap, float *scores, float *out) {
    const size_t v_base = shared_value ? 0 : (size_t)n_layers * n_blocks * kv_heads * block_size * KC_KV_ROW(head_dim);
    const int n = pos - first + 1;
#define KC_KROW(p)                                                                                          \
    (kv + kc_kv_offset(layer, n_blocks, kv_heads, block_size, head_dim, block_table[(p) / block_size], kv_head, \
                       (p) % block_size))
#if defined(__AVX512F__)
    if (head_dim % 16 == 0 && value_dim % 16 == 0) {
        const int HK = head_dim / 16, HV = value_dim / 16;
        int p = first;
        for (; p + 16 <= pos + 1; p += 16) {
            const kc_kv_t *kr[16];
            KC_OPS_UNROLL for (int j = 0; j < 16; j++) kr[j] = KC_KROW(p + j);
            for (int g = 0; g < group; g++) {
                const float *qg = q + (size_t)g * head_dim;
                __m512 acc[16];
                KC_OPS_UNROLL for (int j = 0; j < 16; j++) acc[j] = _mm512_setzero_ps();
                for (int d = 0; d < HK; d++) {
                    const __m512 qv = _mm512_loadu_ps(qg + 16 * d);
                    KC_OPS_UNROLL for (int j = 0; j < 16; j++) acc[j] = _mm512_fmadd_ps(qv, kc__kv_load16(kr[j], d), acc[j]);
                }
                _mm512_storeu_ps(scores + (size_t)g * n + (p - first),
                                 _mm512_mul_ps(kc__hsum16x16(acc), _mm512_set1_ps(scale)));
            }
        }
        for (; p <= pos; p++) {
            float tmp[KC_KV_MAX_HEAD_DIM];
            const float *k = kc__kv_row(KC_KROW(p), head_dim, tmp);
            for (int g = 0; g < group; g++)
                scores[(size_t)g * n + (p - first)] = kc_dot(q + (size_t)g * head_dim, k, head_dim) * scale;
        }
        float inv[64]; /* 1/sum per head (heads beyond 64 are normalized in place) */
        for (int g = 0; g < group; g++) {
            float *sc = scores + (size_t)g * n;
            if (softcap > 0.0f)
                for (int i = 0; i < n; i++) sc[i] = softcap * tanhf(sc[i] / softcap);
            __m512 mv = _mm512_set1_ps(-INFINITY);
            int i = 0;
            for (; i + 16 <= n; i += 16) mv = _mm512_max_ps(mv, _mm512_loadu_ps(sc + i));
            float maxv = _mm512_reduce_max_ps(mv);
            for (; i < n; i++) maxv = sc[i] > maxv ? sc[i] : maxv;
            __m512 sv = _mm512_setzero_ps();
            const __m512 mxv = _mm512_set1_ps(maxv);
            for (i = 0; i + 16 <= n; i += 16) {
                const __m512 e = kc__exp16(_mm512_sub_ps(_mm512_loadu_ps(sc + i), mxv));
                _mm512_storeu_ps(sc + i, e);
                sv = _mm512_add_ps(sv, e);
            }
            float sum = _mm512_reduce_add_ps(sv);
            for (; i < n; i++) {
                sc[i] = expf(sc[i] - maxv);
                sum += sc[i];
            }
            if (g < 64) inv[g] = 1.0f / sum;
            else
                for (i = 0; i < n; i++) sc[i] /= sum;
        }
        /* out[g] = sum_p sc[g][p] * V_p, for heads in chunks of 4 and head
         * dims in chunks of 64 (DV vectors) */
        for (int g0 = 0; g0 < group; g0 += 4) {
            const int G = group - g0 < 4 ? group - g0 : 4;
            for (int d0 = 0; d0 < HV; d0 += 4) {
                const int DV = HV - d0 < 4 ? HV - d0 : 4;
                __m512 acc[4][4];
                KC_OPS_UNROLL for (int g = 0; g < 4; g++) KC_OPS_UNROLL for (int d = 0; d < 4; d++) acc[g][d] =
                    _mm512_setzero_ps();
                for (int pp = first; pp <= pos; pp++) {
                    const kc_kv_t *v = v_base + KC_KROW(pp);
                    __m512 vv[4];
                    KC_OPS_UNROLL for (int d = 0; d < 4; d++) vv[d] = d < DV ? kc__kv_load16(v, d0 + d) : _mm512_setzero_ps();
                    KC_OPS_UNROLL for (int g = 0; g < 4; g++) {
                        if (g >= G) break;
                        const __m512 s = _mm512_set1_ps(scores[(size_t)(g0 + g) * n + (pp - first)]);
                        KC_OPS_UNROLL for (int d = 0; d < 4; d++) if (d < DV) acc[g][d] = _mm512_fmadd_ps(s, vv[d], acc[g][d]);
                    }
                }
                KC_OPS_UNROLL for (int g = 0; g < 4; g++) {
                    if (g >= G) break;
                    const __m512 sc = _mm512_set1_ps(g0 + g < 64 ? inv[g0 + g] : 1.0f);
                    KC_OPS_UNROLL for (int d = 0; d < 4; d++) if (d < DV)
                        _mm512_storeu_ps(out + (size_t)(g0 + g) * value_dim + 16 * (d0 + d), _mm512_mul_ps(acc[g][d], sc));
                }
            }
        }
        return;
    }
#endif
    float tmp[KC_KV_MAX_HEAD_DIM];
    for (int p = first; p <= pos; p++) {
        const float *k = kc__kv_row(KC_KROW(p), head_dim, tmp);
        for (int g = 0; g < group; g++) {
            float s = kc_dot(q + (size_t)g * head_dim, k, head_dim) * scale;
            if (softcap > 0.0f) s = softcap * tanhf(s / softcap);
            scores[(size_t)g * n + (p - first)] = s;
        }
    }
    for (int g = 0; g < group; g++) {
        float *sc = scores + (size_t)g * n;
        float maxv = -INFINITY;
        for (int i = 0; i < n; i++) maxv = sc[i] > maxv ? sc[i] : maxv;
        float sum = 0.0f;
        for (int i = 0; i < n; i++) {
            sc[i] = expf(sc[i] - maxv);
            sum += sc[i];
        }
        const float inv = 1.0f / sum;
        for (int i = 0; i < n; i++) sc[i] *= inv;
        memset(out + (size_t)g * value_dim, 0, sizeof(float) * value_dim);
    }
    for (int p = first; p <= pos; p++) {
        const float *v = kc__kv_row(v_base + KC_KROW(p), value_dim, tmp);
        for (int g = 0; g < group; g++)
            kc_axpy(scores[(size_t)g * n + (p - first)], v, out + (size_t)g * value_dim, value_dim);
    }
#undef KC_KROW
}

/* Attention with separate K and V rows of head_dim each (every family but MLA). */
KC_OPS_INLINE void kc_attend(const kc_kv_t *kv, int n_layers, int layer, int n_blocks, int kv_heads,
                             int block_size, int head_dim, const int32_t *block_table, int kv_head,
                             int group, int first, int pos, const float *q, float scale,
                             float softcap, float *scores, float *out) {
    kc_attend_kv(kv, n_layers, layer, n_blocks, kv_heads, block_size, head_dim, head_dim, 0, block_table, kv_head,
                 group, first, pos, q, scale, softcap, scores, out);
}

#endif
