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

/* Causal attention of one query head at position pos over positions
 * [first, pos] of its sequence (first > 0 only for a sliding window).
 * scores: scratch of at least pos+1 floats. softcap > 0 applies
 * tanh soft-capping to the scaled scores. Two passes (scores, then the
 * weighted sum of V) with a max-subtracted softmax in f32. */
static inline void kc_attend(const float *kv, int n_layers, int layer, int n_blocks, int kv_heads,
                             int block_size, int head_dim, const int32_t *block_table,
                             int kv_head, int first, int pos, const float *q, float scale,
                             float softcap, float *scores, float *out) {
    const size_t v_base = (size_t)n_layers * n_blocks * kv_heads * block_size * head_dim;
    float maxv = -INFINITY;
    for (int p = first; p <= pos; p++) {
        const float *k = kv + kc_kv_offset(layer, n_blocks, kv_heads, block_size, head_dim,
                                           block_table[p / block_size], kv_head, p % block_size);
        float s = 0.0f;
        for (int i = 0; i < head_dim; i++) s += q[i] * k[i];
        s *= scale;
        if (softcap > 0.0f) s = softcap * tanhf(s / softcap);
        scores[p - first] = s;
        if (s > maxv) maxv = s;
    }
    float sum = 0.0f;
    for (int p = first; p <= pos; p++) {
        const float e = expf(scores[p - first] - maxv);
        scores[p - first] = e;
        sum += e;
    }
    const float inv = 1.0f / sum;
    for (int i = 0; i < head_dim; i++) out[i] = 0.0f;
    for (int p = first; p <= pos; p++) {
        const float *v = kv + v_base +
                         kc_kv_offset(layer, n_blocks, kv_heads, block_size, head_dim,
                                      block_table[p / block_size], kv_head, p % block_size);
        const float a = scores[p - first] * inv;
        for (int i = 0; i < head_dim; i++) out[i] += a * v[i];
    }
}

#endif
