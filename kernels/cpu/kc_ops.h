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

/* out = x / rms(x) * (w + weight_offset). Sum of squares in double: the
 * references (transformers f32) are more accurate than a naive f32 sum over
 * long rows, and this costs nothing next to the matmuls. */
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

/* Paged KV layout, per layer: [block][kv_head][slot][head_dim], K then V
 * for all layers in two separate halves of the pool:
 *   K(layer, block, h, slot) at kv + ((layer * n_blocks + block) * kv_heads + h) * BLOCK * hd + slot * hd
 * and V at the same offset + layers * n_blocks * kv_heads * BLOCK * hd. */
static inline size_t kc_kv_offset(int layer, int n_blocks, int kv_heads, int block_size,
                                  int head_dim, int block, int h, int slot) {
    return ((((size_t)layer * n_blocks + block) * kv_heads + h) * block_size + slot) *
           (size_t)head_dim;
}

/* Writes one token's K and V rows (kv_heads × head_dim each) at position pos. */
static inline void kc_kv_store(float *kv, int n_layers, int layer, int n_blocks, int kv_heads,
                               int block_size, int head_dim, const int32_t *block_table, int pos,
                               const float *k, const float *v) {
    const size_t v_base = (size_t)n_layers * n_blocks * kv_heads * block_size * head_dim;
    const int block = block_table[pos / block_size], slot = pos % block_size;
    for (int h = 0; h < kv_heads; h++) {
        const size_t off =
            kc_kv_offset(layer, n_blocks, kv_heads, block_size, head_dim, block, h, slot);
        memcpy(kv + off, k + (size_t)h * head_dim, sizeof(float) * head_dim);
        memcpy(kv + v_base + off, v + (size_t)h * head_dim, sizeof(float) * head_dim);
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

/* Causal attention of the `group` query heads that share one KV head, for
 * one token at position pos, over positions [first, pos] of its sequence
 * (first > 0 only for a sliding window). Each K and V row is loaded once for
 * the whole group (GQA). q: the group's heads, contiguous [group][head_dim];
 * out likewise. scores: scratch of group * (pos - first + 1) floats.
 * softcap > 0 applies tanh soft-capping to the scaled scores. Softmax is
 * max-subtracted, in f32. */
static inline void kc_attend(const float *kv, int n_layers, int layer, int n_blocks, int kv_heads,
                             int block_size, int head_dim, const int32_t *block_table, int kv_head,
                             int group, int first, int pos, const float *q, float scale,
                             float softcap, float *scores, float *out) {
    const size_t v_base = (size_t)n_layers * n_blocks * kv_heads * block_size * head_dim;
    const int n = pos - first + 1;
    for (int p = first; p <= pos; p++) {
        const float *k = kv + kc_kv_offset(layer, n_blocks, kv_heads, block_size, head_dim,
                                           block_table[p / block_size], kv_head, p % block_size);
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
        memset(out + (size_t)g * head_dim, 0, sizeof(float) * head_dim);
    }
    for (int p = first; p <= pos; p++) {
        const float *v = kv + v_base +
                         kc_kv_offset(layer, n_blocks, kv_heads, block_size, head_dim,
                                      block_table[p / block_size], kv_head, p % block_size);
        for (int g = 0; g < group; g++)
            kc_axpy(scores[(size_t)g * n + (p - first)], v, out + (size_t)g * head_dim, head_dim);
    }
}

#endif
