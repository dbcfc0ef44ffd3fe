// conv.cuh — the causal depthwise convolution of recurrent layers (LFM2's short convolution) over
// the rows of one step, each sequence's last W - 1 inputs carried in its state slot: the CPU's
// kernels/cpu/kc_conv.h, one row by a whole block, a column per thread.
//
// Column i of row t (position pos) is bias[i] + sum_k w[i][k] x[p - (W-1) + k][i], positions
// before 0 reading zeros. A tap reads the same sequence's earlier row of the step (back of them
// precede t, counted up to W - 1) or, before the step, the sequence's state (W - 1 rows, oldest
// first). The taps are summed in order after the bias with separate roundings (__fmul_rn,
// __fadd_rn), as the CPU kernel sums them, so both backends give the same bits. Every output row
// only reads; ig_row_causal_conv_keep then rewrites a sequence's state, in a launch of its own.
#pragma once
#include "common.cuh"

template <int N, int W>
__device__ __forceinline__ void ig_row_causal_conv(const float* x, int t, int back, int pos, const float* state,
                                                   const float* __restrict__ w, const float* __restrict__ bias,
                                                   float* out) {
  static_assert(W >= 2, "a kernel of at least two taps");
  for (int i = threadIdx.x; i < N; i += blockDim.x) {
    float acc = bias ? bias[i] : 0.0f;
    for (int k = 0; k < W; k++) {
      const int d = W - 1 - k; // how far back this tap reads
      if (pos - d < 0) continue;
      const float v = d <= back ? x[(long long)(t - d) * N + i] : state[(long long)(W - 1 - (d - back)) * N + i];
      acc = __fadd_rn(acc, __fmul_rn(w[i * W + k], v));
    }
    out[i] = acc;
  }
}

// The state of the sequence whose last token of the step is t (count of its tokens in the step,
// up to W - 1): the inputs at positions pos - (W - 2) .. pos. Each thread moves its own column,
// rows in ascending order (row r takes old row r + count, read before it is overwritten).
template <int N, int W>
__device__ __forceinline__ void ig_row_causal_conv_keep(const float* x, int t, int count, int pos, float* state) {
  for (int i = threadIdx.x; i < N; i += blockDim.x)
    for (int r = 0; r < W - 1; r++) {
      const int d = W - 2 - r; // distance back from t
      const float v = pos - d < 0 ? 0.0f : d < count ? x[(long long)(t - d) * N + i] : state[(long long)(r + count) * N + i];
      state[(long long)r * N + i] = v;
    }
}

// The two launches over a step, for a caller with the step's arrays at hand (generated models emit
// their own, with their buffers and the state's offset folded in): grid = tokens, block = 256.
// states: n_slots x state_floats; offset: this convolution's place in a slot.
template <int N, int W>
__global__ void causal_conv_kernel(const float* x, const int* seq, const int* pos, const int* slots, const float* states,
                                   long long state_floats, long long offset, const float* __restrict__ w,
                                   const float* __restrict__ bias, float* out) {
  const int t = blockIdx.x;
  int back = 0;
  while (back < W - 1 && t - back > 0 && seq[t - back - 1] == seq[t]) back++;
  ig_row_causal_conv<N, W>(x, t, back, pos[t], states + slots[seq[t]] * state_floats + offset, w, bias,
                           out + (long long)t * N);
}

template <int N, int W>
__global__ void causal_conv_keep_kernel(const float* x, const int* seq, const int* pos, const int* slots, int n_tokens,
                                        float* states, long long state_floats, long long offset) {
  const int t = blockIdx.x;
  if (t + 1 < n_tokens && seq[t + 1] == seq[t]) return;
  int count = 1;
  while (count < W - 1 && t - count >= 0 && seq[t - count] == seq[t]) count++;
  ig_row_causal_conv_keep<N, W>(x, t, count, pos[t], states + slots[seq[t]] * state_floats + offset);
}
