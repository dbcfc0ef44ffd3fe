/* kc_ssm.h — Mamba-2's selective state-space scan, one head of one sequence over its tokens of a
 * step, in the recurrent form (transformers' chunked scan computes the same sums grouped
 * otherwise; both in f32).
 *
 * Per token: dt' = clamp(softplus(dt + dt_bias), dt_min, dt_max) (softplus as torch: x above 20
 * is kept), then for each of the head's head_dim channels p and state entries n
 *   state[p][n] = state[p][n] * exp(dt' A) + (dt' x[p]) B[n]
 *   y[p] = sum_n state[p][n] C[n] + D x[p]
 * The state is the sequence's (its slot): a sequence whose step starts at position 0 starts from
 * zeros instead of reading it. */
#ifndef INGOT_KC_SSM_H
#define INGOT_KC_SSM_H

#include <math.h>
#include <string.h>

static inline float kc_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* Tokens t0 .. t0 + count - 1 of one sequence (contiguous rows), head h: x rows of x_stride floats
 * (the head's head_dim at h * head_dim), dt rows of dt_stride (the head's at h), B and C rows of
 * bc_stride (the head's group's state values at bc_off), y rows of y_stride. a: the head's A (< 0). */
static inline void kc_ssm_scan_head(const float *x, int x_stride, const float *dt, int dt_stride, const float *B,
                                    const float *C, int bc_stride, int bc_off, float *y, int y_stride, int t0, int count,
                                    int h, int head_dim, int n_state, float a, float d, float dt_bias, float dt_min,
                                    float dt_max, int fresh, float *state) {
    if (fresh) memset(state, 0, sizeof(float) * (size_t)head_dim * n_state);
    for (int t = t0; t < t0 + count; t++) {
        float step = kc_softplus(dt[(size_t)t * dt_stride + h] + dt_bias);
        step = step < dt_min ? dt_min : step > dt_max ? dt_max : step;
        const float decay = expf(step * a);
        const float *xr = x + (size_t)t * x_stride + (size_t)h * head_dim;
        const float *br = B + (size_t)t * bc_stride + bc_off, *cr = C + (size_t)t * bc_stride + bc_off;
        float *yr = y + (size_t)t * y_stride + (size_t)h * head_dim;
        for (int p = 0; p < head_dim; p++) {
            float *s = state + (size_t)p * n_state;
            const float in = step * xr[p];
            float acc = 0.0f;
            for (int n = 0; n < n_state; n++) {
                s[n] = s[n] * decay + in * br[n];
                acc += s[n] * cr[n];
            }
            yr[p] = acc + d * xr[p];
        }
    }
}

#endif
