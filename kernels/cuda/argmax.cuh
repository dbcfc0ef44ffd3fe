// argmax.cuh — greedy sampling on the device: out[r] = index of the largest logit of row r (lowest index on ties).
//
// argmax_kernel<V, NT = 1024>: grid = rows, block = NT threads; thread i scans i, i+NT, ... (coalesced),
// then (value, index) pairs are reduced by warp shuffles and across warps in shared memory.
// NaN logits are never selected (unless the whole row is NaN: index 0).
#pragma once
#include "common.cuh"

// (v, i) better than (bv, bi): larger value, or equal value and smaller index.
__device__ __forceinline__ bool ig_argmax_better(float v, int i, float bv, int bi) {
  return v > bv || (v == bv && i < bi);
}

template <int V, int NT = 1024>
__global__ void __launch_bounds__(NT) argmax_kernel(const float* __restrict__ logits, int ld, int* __restrict__ out) {
  static_assert(NT % 32 == 0 && NT <= 1024, "block size");
  const float* row = logits + (long long)blockIdx.x * ld;
  float bv = ig_neg_inf();
  int bi = 0x7fffffff;
  for (int i = threadIdx.x; i < V; i += NT) {
    const float v = row[i];
    if (ig_argmax_better(v, i, bv, bi)) bv = v, bi = i;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (ig_argmax_better(ov, oi, bv, bi)) bv = ov, bi = oi;
  }
  constexpr int NW = NT / 32;
  __shared__ float sv[NW];
  __shared__ int si[NW];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) sv[warp] = bv, si[warp] = bi;
  __syncthreads();
  if (warp == 0) {
    bv = lane < NW ? sv[lane] : ig_neg_inf();
    bi = lane < NW ? si[lane] : 0x7fffffff;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (ig_argmax_better(ov, oi, bv, bi)) bv = ov, bi = oi;
    }
    if (lane == 0) out[blockIdx.x] = bi == 0x7fffffff ? 0 : bi;
  }
}
