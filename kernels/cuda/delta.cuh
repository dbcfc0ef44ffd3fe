// delta.cuh — the gated delta rule (Qwen3-Next's Gated DeltaNet): the CPU's kernels/cpu/kc_delta.h,
// one value head of one sequence by a block, a thread per value column of the head's state.
//
// Per token: q and k of the head's key head l2-normalized (rsqrt(sum + 1e-6)), q divided by
// sqrt(KD); the state S [KD][VD] decays by exp(-exp(A_log) softplus(a + dt_bias)); kv = S^T k;
// S += k (sigmoid(b) (v - kv))^T; y = S^T q. Each thread owns one column of S (no reduction
// across threads); the normalized q and k rows are shared. Products and sums rounded one by one
// in the CPU's order. The state is the sequence's slot (zeros when the step starts it at 0).
#pragma once
#include "common.cuh"
#include "ssm.cuh" // ig_softplus

// Tokens t0 .. t0 + count - 1 of one sequence, value head j: q and k rows of KH x KD, v and y rows
// of VH x VD, a and b rows of VH; neg_a is the head's A = -exp(A_log). Contains __syncthreads: every
// thread of the block calls it.
template <int KH, int VH, int KD, int VD>
__device__ __forceinline__ void ig_delta_scan_head(const float* q, const float* k, const float* v, const float* a,
                                                   const float* b, float* y, int t0, int count, int j, float neg_a,
                                                   float dt_bias, bool fresh, float* state) {
  static_assert(VH % KH == 0, "value heads per key head");
  __shared__ float qn[KD], kn[KD];
  const int kh = j / (VH / KH);
  const float q_scale = sqrtf((float)KD);
  for (int c = threadIdx.x; c < VD; c += blockDim.x)
    if (fresh)
      for (int i = 0; i < KD; i++) state[(long long)i * VD + c] = 0.0f;
  for (int t = t0; t < t0 + count; t++) {
    const float* qr = q + (long long)t * KH * KD + kh * KD;
    const float* kr = k + (long long)t * KH * KD + kh * KD;
    float qq = 0.0f, kk = 0.0f;
    for (int i = 0; i < KD; i++) qq = __fadd_rn(qq, __fmul_rn(qr[i], qr[i])), kk = __fadd_rn(kk, __fmul_rn(kr[i], kr[i]));
    const float qi = 1.0f / sqrtf(qq + 1e-6f), ki = 1.0f / sqrtf(kk + 1e-6f);
    __syncthreads(); // the previous token's rows are read by every thread
    for (int i = threadIdx.x; i < KD; i += blockDim.x) qn[i] = __fdiv_rn(__fmul_rn(qr[i], qi), q_scale), kn[i] = __fmul_rn(kr[i], ki);
    __syncthreads();
    const float decay = expf(__fmul_rn(neg_a, ig_softplus(a[(long long)t * VH + j] + dt_bias)));
    const float beta = 1.0f / (1.0f + expf(-b[(long long)t * VH + j]));
    for (int c = threadIdx.x; c < VD; c += blockDim.x) {
      float* s = state + c;
      float kv = 0.0f;
      for (int i = 0; i < KD; i++) {
        s[(long long)i * VD] = __fmul_rn(s[(long long)i * VD], decay);
        kv = __fadd_rn(kv, __fmul_rn(s[(long long)i * VD], kn[i]));
      }
      const float delta = __fmul_rn(v[(long long)t * VH * VD + j * VD + c] - kv, beta);
      float out = 0.0f;
      for (int i = 0; i < KD; i++) {
        s[(long long)i * VD] = __fadd_rn(s[(long long)i * VD], __fmul_rn(kn[i], delta));
        out = __fadd_rn(out, __fmul_rn(s[(long long)i * VD], qn[i]));
      }
      y[(long long)t * VH * VD + j * VD + c] = out;
    }
  }
}

// The rule over a step, for a caller with the step's arrays at hand (generated models emit their
// own): grid = (tokens, VH), block = 128; the blocks of a sequence's first token run its tokens.
template <int KH, int VH, int KD, int VD>
__global__ void delta_scan_kernel(const float* q, const float* k, const float* v, const float* a, const float* b, float* y,
                                  const int* seq, const int* pos, const int* slots, int n_tokens, float* states,
                                  long long state_floats, long long offset, const float* a_log, const float* dt_bias) {
  const int t = blockIdx.x, j = blockIdx.y;
  if (t > 0 && seq[t - 1] == seq[t]) return;
  int count = 1;
  while (t + count < n_tokens && seq[t + count] == seq[t]) count++;
  ig_delta_scan_head<KH, VH, KD, VD>(q, k, v, a, b, y, t, count, j, -expf(a_log[j]), dt_bias[j], pos[t] == 0,
                                     states + slots[seq[t]] * state_floats + offset + (long long)j * KD * VD);
}
