/* kc_delta.h — the gated delta rule (Qwen3-Next's Gated DeltaNet), one value head of one sequence
 * over its tokens of a step, in the recurrent form (transformers' chunked form computes the same
 * state with the sums grouped otherwise; both in f32).
 *
 * Per token, for value head j and its key head: q and k are l2-normalized (rsqrt(sum + 1e-6)) and
 * q divided by sqrt(k_dim); g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b); the state
 * S [k_dim][v_dim] decays by exp(g); kv = S^T k; S += k (beta (v - kv))^T; the output is S^T q.
 * The state is the sequence's (its slot); a step starting the sequence at position 0 starts it
 * from zeros. */
#ifndef INGOT_KC_DELTA_H
#define INGOT_KC_DELTA_H

#include <math.h>
#include <string.h>

#include "kc_ssm.h" /* kc_softplus */

/* Tokens t0 .. t0 + count - 1 of one sequence, value head j whose key head is kh: q and k rows of
 * qk_stride floats (the key head's k_dim at kh * k_dim), v and y rows of v_stride (the value
 * head's v_dim at j * v_dim), a and b rows of ab_stride (the head's value at j). kv and qn:
 * scratch of v_dim and k_dim floats. neg_a: the head's A = -exp(A_log), negative. */
static inline void kc_delta_scan_head(const float *q, const float *k, int qk_stride, const float *v, float *y,
                                      int v_stride, const float *a, const float *b, int ab_stride, int t0, int count,
                                      int j, int kh, int k_dim, int v_dim, float neg_a, float dt_bias, int fresh,
                                      float *state, float *kv, float *qn, float *kn) {
    if (fresh) memset(state, 0, sizeof(float) * (size_t)k_dim * v_dim);
    const float q_scale = sqrtf((float)k_dim);
    for (int t = t0; t < t0 + count; t++) {
        const float *qr = q + (size_t)t * qk_stride + (size_t)kh * k_dim, *kr = k + (size_t)t * qk_stride + (size_t)kh * k_dim;
        const float *vr = v + (size_t)t * v_stride + (size_t)j * v_dim;
        float *yr = y + (size_t)t * v_stride + (size_t)j * v_dim;
        float qq = 0.0f, kk = 0.0f;
        for (int i = 0; i < k_dim; i++) qq += qr[i] * qr[i], kk += kr[i] * kr[i];
        const float qi = 1.0f / sqrtf(qq + 1e-6f), ki = 1.0f / sqrtf(kk + 1e-6f);
        for (int i = 0; i < k_dim; i++) qn[i] = qr[i] * qi / q_scale, kn[i] = kr[i] * ki;
        const float decay = expf(neg_a * kc_softplus(a[(size_t)t * ab_stride + j] + dt_bias));
        const float beta = 1.0f / (1.0f + expf(-b[(size_t)t * ab_stride + j]));
        for (size_t e = 0; e < (size_t)k_dim * v_dim; e++) state[e] *= decay;
        for (int c = 0; c < v_dim; c++) kv[c] = 0.0f;
        for (int i = 0; i < k_dim; i++)
            for (int c = 0; c < v_dim; c++) kv[c] += state[(size_t)i * v_dim + c] * kn[i];
        for (int c = 0; c < v_dim; c++) kv[c] = (vr[c] - kv[c]) * beta; /* the delta */
        for (int i = 0; i < k_dim; i++)
            for (int c = 0; c < v_dim; c++) state[(size_t)i * v_dim + c] += kn[i] * kv[c];
        for (int c = 0; c < v_dim; c++) yr[c] = 0.0f;
        for (int i = 0; i < k_dim; i++)
            for (int c = 0; c < v_dim; c++) yr[c] += state[(size_t)i * v_dim + c] * qn[i];
    }
}

#endif
