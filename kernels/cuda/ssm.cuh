// ssm.cuh — Mamba-2's selective state-space scan: the CPU's kernels/cpu/kc_ssm.h, one head of one
// sequence by a block, a thread per channel of the head (its state row of N entries in order).
//
// Per token: dt' = clamp(softplus(dt + dt_bias), dt_min, dt_max), the head's state decays by
// exp(dt' A) and takes (dt' x[p]) B[n], and y[p] = sum_n state[p][n] C[n] + D x[p]; the products
// and sums rounded one by one (__fmul_rn, __fadd_rn) in the CPU's order. The state is the
// sequence's slot (zeros when the step starts the sequence at position 0).
#pragma once
#include "common.cuh"

__device__ __forceinline__ float ig_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// Tokens t0 .. t0 + count - 1 of one sequence (contiguous rows), head h: x and y rows of H x P,
// dt rows of H, B and C rows of G x N (head h reads group h / (H / G)).
template <int H, int P, int N, int G>
__device__ __forceinline__ void ig_ssm_scan_head(const float* x, const float* dt, const float* B, const float* C, float* y,
                                                 int t0, int count, int h, float a, float d, float dt_bias, float dt_min,
                                                 float dt_max, bool fresh, float* state) {
  static_assert(H % G == 0, "groups of heads");
  const int bc = h / (H / G) * N;
  for (int p = threadIdx.x; p < P; p += blockDim.x) {
    float* s = state + (long long)p * N;
    if (fresh)
      for (int n = 0; n < N; n++) s[n] = 0.0f;
    for (int t = t0; t < t0 + count; t++) {
      float step = ig_softplus(dt[(long long)t * H + h] + dt_bias);
      step = step < dt_min ? dt_min : step > dt_max ? dt_max : step;
      const float decay = expf(__fmul_rn(step, a));
      const float xv = x[(long long)t * H * P + h * P + p];
      const float in = __fmul_rn(step, xv);
      const float* br = B + (long long)t * G * N + bc;
      const float* cr = C + (long long)t * G * N + bc;
      float acc = 0.0f;
      for (int n = 0; n < N; n++) {
        s[n] = __fadd_rn(__fmul_rn(s[n], decay), __fmul_rn(in, br[n]));
        acc = __fadd_rn(acc, __fmul_rn(s[n], cr[n]));
      }
      y[(long long)t * H * P + h * P + p] = __fadd_rn(acc, __fmul_rn(d, xv));
    }
  }
}

// The scan over a step, for a caller with the step's arrays at hand (generated models emit their
// own): grid = (tokens, H), block = 128; the blocks of a sequence's first token scan its tokens.
template <int H, int P, int N, int G>
__global__ void ssm_scan_kernel(const float* x, const float* dt, const float* B, const float* C, float* y, const int* seq,
                                const int* pos, const int* slots, int n_tokens, float* states, long long state_floats,
                                long long offset, const float* a_log, const float* d, const float* dt_bias, float dt_min,
                                float dt_max) {
  const int t = blockIdx.x, h = blockIdx.y;
  if (t > 0 && seq[t - 1] == seq[t]) return;
  int count = 1;
  while (t + count < n_tokens && seq[t + count] == seq[t]) count++;
  ig_ssm_scan_head<H, P, N, G>(x, dt, B, C, y, t, count, h, -expf(a_log[h]), d[h], dt_bias[h], dt_min, dt_max, pos[t] == 0,
                               states + slots[seq[t]] * state_floats + offset + (long long)h * P * N);
}
