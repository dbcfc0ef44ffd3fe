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
#elif defined(__ARM_NEON)
#include <arm_neon.h>
#elif defined(__wasm_simd128__)
#include "kc_wasm.h"
#endif

#include "kc_half.h"

/* Full unrolling of fixed-count register-tile loops (so that accumulator
 * arrays live in registers), and kernels inlined into their call sites so that
 * their shapes are constants there (kc_attend.h). */
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


/* The KV cache's element: f32, f16 in a model built with --kv-dtype f16
 * (which defines KC_KV_F16 1 before including this file), or q8_0 with
 * --kv-dtype q8_0 (KC_KV_Q8 1). f16 halves the bytes attention streams at
 * long contexts; K and V are rounded to nearest even once, when stored, and
 * widened back to f32 (exactly) when read, so every computation stays f32.
 * q8_0 takes 34 bytes per 32 values (0.53x f16): each 32 values of a row
 * share an f16 scale d = max|x| / 127 and are stored as round(x / d) in
 * int8, llama.cpp's Q8_0 block (its -ctk/-ctv q8_0); read back as d * q,
 * then f32 as before. q4 (--kv-dtype q4, KC_KV_Q4 1) takes 18 bytes per 32
 * values (0.28x f16), key rows rotated before they are quantized
 * (kc_kv_q4.h): they read back in the rotated basis, and attention rotates
 * its query to match (kc_attend.h). A cached row of n values is
 * KC_KV_ROW(n) elements of kc_kv_t (n a multiple of 32 for q8_0 and q4: the
 * generator checks). */
#ifndef KC_KV_F16
#define KC_KV_F16 0
#endif
#ifndef KC_KV_Q8
#define KC_KV_Q8 0
#endif
#ifndef KC_KV_Q4
#define KC_KV_Q4 0
#endif
#if KC_KV_Q4
#include "kc_kv_q4.h"
typedef uint8_t kc_kv_t;
#define KC_KV_ROW(n) ((size_t)(n) / 32 * KC_KV_Q4_BYTES)
#elif KC_KV_Q8
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

/* AVX2 with FMA and F16C (x86-64-v3): the 8-wide paths of the KV cache and
 * attention, for CPUs without AVX-512. */
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define KC_OPS_AVX2 1
#else
#define KC_OPS_AVX2 0
#endif
#if KC_OPS_AVX2
/* Values [8 i, 8 i + 8) of a cached row as f32, for AVX2 (kc__kv_row's
 * conversions, 8 at a time: the same values). */
static inline __m256 kc__kv_load8(const kc_kv_t *row, int i) {
#if KC_KV_Q4
    /* 8 nibbles, their codes by one byte shuffle, then as q8_0's int8 */
    const uint8_t *blk = row + (size_t)(i >> 2) * KC_KV_Q4_BYTES;
    const int j = i & 3;
    __m128i nib = _mm_loadl_epi64((const __m128i *)(const void *)(blk + 2 + 8 * (j & 1)));
    nib = _mm_and_si128(j < 2 ? nib : _mm_srli_epi16(nib, 4), _mm_set1_epi8(15));
    const __m128i code = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(const void *)kc_kv_q4_codes), nib);
    return _mm256_mul_ps(_mm256_set1_ps(kc_kv_q4_scale(blk)), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(code)));
#elif KC_KV_Q8
    const uint8_t *blk = row + (size_t)(i >> 2) * 34;
    const __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(blk + 2 + 8 * (i & 3)))));
    return _mm256_mul_ps(_mm256_set1_ps(kc_fp16_to_f32((uint16_t)(blk[0] | blk[1] << 8))), q);
#elif KC_KV_F16
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(row + 8 * i)));
#else
    return _mm256_loadu_ps(row + 8 * i);
#endif
}
#endif

/* One cached row of n values as f32: the row itself, or widened into tmp
 * (q4: a key row still in the rotated basis). */
static inline const float *kc__kv_row(const kc_kv_t *p, int n, float *tmp) {
#if (KC_KV_Q4 || KC_KV_Q8) && KC_OPS_AVX2
    for (int i = 0; i < n; i += 8) _mm256_storeu_ps(tmp + i, kc__kv_load8(p, i / 8)); /* n: whole blocks of 32 */
    return tmp;
#elif KC_KV_Q4
    for (int b = 0; b < n / 32; b++) kc_kv_q4_get_block(p + (size_t)b * KC_KV_Q4_BYTES, tmp + 32 * b);
    return tmp;
#elif KC_KV_Q8
    for (int b = 0; b < n / 32; b++) {
        const uint8_t *blk = p + (size_t)b * 34;
        const float d = kc_fp16_to_f32((uint16_t)(blk[0] | blk[1] << 8));
        for (int i = 0; i < 32; i++) tmp[32 * b + i] = d * (float)(int8_t)blk[2 + i];
    }
    return tmp;
#elif KC_KV_F16
    int i = 0;
#if KC_OPS_AVX2
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(tmp + i, kc__kv_load8(p, i / 8));
#elif defined(__wasm_simd128__)
    for (; i + 4 <= n; i += 4) wasm_v128_store(tmp + i, kc_wasm_f16x4(p + i)); /* the same values, 4 at a time */
#endif
    for (; i < n; i++) tmp[i] = kc_fp16_to_f32(p[i]);
    return tmp;
#else
    (void)n, (void)tmp;
    return p;
#endif
}
#if defined(__AVX512F__)
/* Values [16 i, 16 i + 16) of a cached row as f32 (vcvtph2ps for f16; for
 * q8_0 half a block: 16 int8 widened and times the block's scale; for q4 one
 * nibble of the block's 16 bytes, its codes looked up by one byte shuffle). */
static inline __m512 kc__kv_load16(const kc_kv_t *row, int i) {
#if KC_KV_Q4
    const uint8_t *blk = row + (size_t)(i >> 1) * KC_KV_Q4_BYTES;
    const float d = kc_kv_q4_scale(blk);
    __m128i nib = _mm_loadu_si128((const __m128i *)(const void *)(blk + 2));
    nib = _mm_and_si128((i & 1) ? _mm_srli_epi16(nib, 4) : nib, _mm_set1_epi8(15));
    const __m128i code = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(const void *)kc_kv_q4_codes), nib);
    return _mm512_mul_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(code)));
#elif KC_KV_Q8
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

/* y[i] = x[perm[i]], i < n: the activations in the input order of a weight
 * whose columns were reordered at load (act-order GPTQ). */
static inline void kc_gather(const float *x, const int32_t *perm, int n, float *y) {
    for (int i = 0; i < n; i++) y[i] = x[perm[i]];
}

/* 8 partial sums added in one fixed order (the norms' reductions). */
static inline double kc__sum8(const double part[8]) {
    return ((part[0] + part[4]) + (part[2] + part[6])) + ((part[1] + part[5]) + (part[3] + part[7]));
}

/* out = x / rms(x) * (w + weight_offset). Sum of squares in double: the
 * references (transformers f32) are more accurate than a naive f32 sum over
 * long rows. The sum runs in 8 interleaved partial sums (element i into sum
 * i % 8, then the 8 added in a fixed order): one chain of dependent double
 * additions took 4 cycles an element, 0.65 us for a row of 576, 3% of a
 * 16-sequence serving step. Each product of two floats is exact in double and
 * the order is the code's own, so every ISA path gets the same bits. */
static inline void kc_rmsnorm(const float *x, const float *w, float *out, int n, float eps,
                              float weight_offset) {
    double part[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) part[j] += (double)x[i + j] * x[i + j];
    for (int j = 0; j < 8 && i + j < n; j++) part[j] += (double)x[i + j] * x[i + j];
    const double ss = kc__sum8(part);
    const float r = (float)(1.0 / sqrt(ss / n + (double)eps));
    for (i = 0; i < n; i++) out[i] = (x[i] * r) * (w[i] + weight_offset);
}

/* LayerNorm: out = (x - mean) / sqrt(var + eps) * w + b (b may be NULL), var the mean of the
 * squared deviations (transformers' nn.LayerNorm, which is biased). Mean and variance in double
 * over two passes, in kc_rmsnorm's 8 interleaved partial sums (the same bits on every ISA path):
 * the one-pass E[x^2] - E[x]^2 cancels where the mean is large against the spread. */
static inline void kc_layernorm(const float *x, const float *w, const float *b, float *out, int n, float eps) {
    double part[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) part[j] += x[i + j];
    for (int j = 0; j < 8 && i + j < n; j++) part[j] += x[i + j];
    const double mean = kc__sum8(part) / n;
    for (int j = 0; j < 8; j++) part[j] = 0;
    for (i = 0; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) part[j] += (x[i + j] - mean) * (x[i + j] - mean);
    for (int j = 0; j < 8 && i + j < n; j++) part[j] += (x[i + j] - mean) * (x[i + j] - mean);
    const double r = 1.0 / sqrt(kc__sum8(part) / n + (double)eps);
    for (i = 0; i < n; i++) {
        const float y = (float)((x[i] - mean) * r) * w[i];
        out[i] = b ? y + b[i] : y;
    }
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

#if KC_OPS_AVX2 && !defined(__AVX512F__)
/* e^x for 8 floats, x <= 88 (AVX2): kc__exp16's reduction and polynomial,
 * with 2^n built in the exponent bits (x clamped at -87, where 2^n is still
 * a normal float). */
KC_OPS_INLINE __m256 kc__exp8(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187e-06f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}
#endif

/* y[i] = silu(x[i]) for a row of n (in place allowed). The AVX-512 path takes e^-x from
 * kc__exp16 (about 1 ulp from expf's), 16 at a time: libm's expf one element at a time cost
 * 3% of a single-stream decode step and 5% of a batched one (SmolLM2, perf). */
static inline void kc_silu_row(const float *x, float *y, int n) {
    int i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i);
        const __m512 e = kc__exp16(_mm512_sub_ps(_mm512_setzero_ps(), v));
        _mm512_storeu_ps(y + i, _mm512_div_ps(v, _mm512_add_ps(_mm512_set1_ps(1.0f), e)));
    }
#endif
    for (; i < n; i++) y[i] = kc_silu(x[i]);
}

/* GELU's tanh form, 0.5 x (1 + tanh u) with u = sqrt(2/pi) (x + 0.044715 x^3), computed as
 * x / (1 + e^-2u): the same function, without the cancellation of 1 + tanh u where tanh u nears
 * -1 (x below about -3: there 1 + tanhf lost up to a third of the result). */
static inline float kc_gelu_tanh(float x) {
    const float m2k = -2.0f * 0.7978845608028654f; /* -2 sqrt(2/pi) */
    return x / (1.0f + expf(m2k * fmaf(0.044715f * x, x * x, x)));
}

/* GELU exactly, x Phi(x) = x/2 (1 + erf(x / sqrt 2)), written with erfc: the same function
 * without 1 + erf's cancellation for negative x (transformers' "gelu"). */
static inline float kc_gelu(float x) { return 0.5f * x * erfcf(-x * 0.70710678118654752f); }

static inline void kc_gelu_row(const float *x, float *y, int n) {
    for (int i = 0; i < n; i++) y[i] = kc_gelu(x[i]);
}

/* gpt-oss's gated activation, in place over the gate row g of n: with the gate clamped to
 * <= limit and up to [-limit, limit] (limit <= 0: not clamped), g[i] = g sigmoid(alpha g) (up +
 * up_offset), the order of transformers' GptOssExperts. alpha 1, limit 0, up_offset 0 is
 * silu(g) up. */
static inline void kc_swiglu_row(float *g, const float *up, int n, float alpha, float limit, float up_offset) {
    for (int i = 0; i < n; i++) {
        float x = g[i], u = up[i];
        if (limit > 0.0f) {
            x = x < limit ? x : limit;
            u = u < -limit ? -limit : (u > limit ? limit : u);
        }
        g[i] = x / (1.0f + expf(-alpha * x)) * (u + up_offset);
    }
}

/* y[i] = gelu_tanh(x[i]) for a row of n (in place allowed); the AVX-512 path 16 at a time on
 * kc__exp16. */
static inline void kc_gelu_tanh_row(const float *x, float *y, int n) {
    int i = 0;
#if defined(__AVX512F__)
    const __m512 m2k = _mm512_set1_ps(-2.0f * 0.7978845608028654f), c = _mm512_set1_ps(0.044715f);
    for (; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i);
        const __m512 u = _mm512_fmadd_ps(_mm512_mul_ps(c, v), _mm512_mul_ps(v, v), v); /* x + 0.044715 x^3 */
        const __m512 e = kc__exp16(_mm512_mul_ps(m2k, u));
        _mm512_storeu_ps(y + i, _mm512_div_ps(v, _mm512_add_ps(_mm512_set1_ps(1.0f), e)));
    }
#endif
    for (; i < n; i++) y[i] = kc_gelu_tanh(x[i]);
}

/* Paged KV layout, per layer: [kv_head][block][slot][row of head_dim
 * values], K then V for all layers in two separate halves of the pool:
 *   K(layer, block, h, slot) at row ((layer * kv_heads + h) * n_blocks + block) * BLOCK + slot
 * and V at the same row + layers * n_blocks * kv_heads * BLOCK; a row is
 * KC_KV_ROW(head_dim) elements of kc_kv_t. kc_kv_row_index gives the row,
 * kc_kv_offset its first element.
 *
 * Head-major, because attention reads one KV head at a time: a sequence
 * whose blocks have consecutive ids (the free list starts in id order, so a
 * prompt in a fresh pool; later ones as far as frees left runs of ids) is
 * then one contiguous run per head, where block-major storage broke it into
 * one block's rows (2 KiB at 16 f16 rows of 64) every kv_heads blocks' worth
 * of bytes. attn_bench, SmolLM2's cache at 4000 positions (92 MB, 2
 * threads): 5.5 ms a token block-major, 3.7 head-major. Scattered blocks
 * read no worse than before. The CUDA pool has the same layout
 * (kernels/cuda/common.cuh's ig_kv_row). */
static inline size_t kc_kv_row_index(int layer, int n_blocks, int kv_heads, int block_size, int block, int h,
                                     int slot) {
    return (((size_t)layer * kv_heads + h) * n_blocks + block) * block_size + slot;
}
static inline size_t kc_kv_offset(int layer, int n_blocks, int kv_heads, int block_size,
                                  int head_dim, int block, int h, int slot) {
    return kc_kv_row_index(layer, n_blocks, kv_heads, block_size, block, h, slot) * KC_KV_ROW(head_dim);
}

/* n values of a key row (a multiple of 32 for q8_0 and q4) into the cache's
 * element type; kc__kv_put_values: of a value row (q4: not rotated). */
static inline void kc__kv_put_row(kc_kv_t *dst, const float *src, int n, int is_key) {
#if KC_KV_Q4
    for (int b = 0; b < n / 32; b++) kc_kv_q4_put_block(dst + (size_t)b * KC_KV_Q4_BYTES, src + 32 * b, is_key);
#elif KC_KV_Q8
    (void)is_key;
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
    (void)is_key;
    int i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(void *)(dst + i), _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#endif
    for (; i < n; i++) dst[i] = kc_f32_to_fp16(src[i]);
#else
    (void)is_key;
    memcpy(dst, src, sizeof(float) * (size_t)n);
#endif
}
static inline void kc__kv_put(kc_kv_t *dst, const float *src, int n) { kc__kv_put_row(dst, src, n, 1); }
static inline void kc__kv_put_values(kc_kv_t *dst, const float *src, int n) { kc__kv_put_row(dst, src, n, 0); }

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
        if (v) kc__kv_put_values(kv + v_base + off, v + (size_t)h * head_dim, head_dim);
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
#if defined(__ARM_NEON)
    if (n % 4 == 0) {
        float32x4_t acc = vdupq_n_f32(0.0f);
        for (; i < n; i += 4) acc = vfmaq_f32(acc, vld1q_f32(a + i), vld1q_f32(b + i));
        return vaddvq_f32(acc);
    }
#endif
#if defined(__wasm_simd128__)
    if (n % 4 == 0) {
        v128_t acc = wasm_f32x4_splat(0.0f);
        for (; i < n; i += 4) acc = wasm_f32x4_add(acc, wasm_f32x4_mul(wasm_v128_load(a + i), wasm_v128_load(b + i)));
        return kc_wasm_sum4(acc);
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
#if defined(__ARM_NEON)
    if (n % 4 == 0) {
        for (; i < n; i += 4) vst1q_f32(y + i, vfmaq_n_f32(vld1q_f32(y + i), vld1q_f32(x + i), a));
        return;
    }
#endif
#if defined(__wasm_simd128__)
    if (n % 4 == 0) {
        const v128_t va = wasm_f32x4_splat(a);
        for (; i < n; i += 4) wasm_v128_store(y + i, wasm_f32x4_add(wasm_v128_load(y + i), wasm_f32x4_mul(va, wasm_v128_load(x + i))));
        return;
    }
#endif
    for (; i < n; i++) y[i] += a * x[i];
}

#include "kc_attend.h" /* paged attention, on the helpers above */

#endif
