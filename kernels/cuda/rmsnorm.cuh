// rmsnorm.cuh — RMSNorm per row, or per group of GS elements (per-head q/k norm): out = x / rms(x) * (w + weight_offset).
//
// rmsnorm_kernel<N, GS = N, NT = 256>: grid = rows (tokens), block = NT threads.
//   GS == N: one row per block, sum of squares by warp shuffles + shared memory across warps.
//   GS <  N: the row is N/GS groups (e.g. heads of head_dim GS), one warp per group at a time,
//            warp-shuffle reduction only; the weight has GS entries, shared by the groups.
// x row r at x + r*ldx, out row r at out + r*ldo; out may alias x (in place). Sums in f32.
#pragma once
#include "common.cuh"

// One row x[0..N) -> y (in place allowed), by the calling block of NT threads: RMSNorm over the
// whole row (GS = N; scratch = __shared__ float[32]) or per group of GS (a warp per group).
// Contains __syncthreads when GS == N: every thread of the block must call it.
template <int N, int GS, int NT>
__device__ __forceinline__ void ig_row_rmsnorm(const float* xr, const float* __restrict__ w, float* orow, float eps,
                                               float weight_offset, float* scratch) {
  static_assert(N % GS == 0, "groups tile the row");
  static_assert(NT % 32 == 0 && NT <= 1024, "block size");
  if constexpr (GS == N) {
    float ss = 0.0f;
    for (int i = threadIdx.x; i < N; i += NT) ss += xr[i] * xr[i];
    ss = ig_block_sum<NT>(ss, scratch);
    const float r = rsqrtf(ss / (float)N + eps);
    for (int i = threadIdx.x; i < N; i += NT) orow[i] = (xr[i] * r) * (w[i] + weight_offset);
  } else {
    const int lane = threadIdx.x & 31;
    for (int g = threadIdx.x >> 5; g < N / GS; g += NT / 32) {
      const float* xg = xr + g * GS;
      float* og = orow + g * GS;
      float ss = 0.0f;
      for (int i = lane; i < GS; i += 32) ss += xg[i] * xg[i];
      ss = ig_warp_sum(ss);
      const float r = rsqrtf(ss / (float)GS + eps);
      __syncwarp(); // every lane has read the group before any lane overwrites it (in place)
      for (int i = lane; i < GS; i += 32) og[i] = (xg[i] * r) * (w[i] + weight_offset);
    }
  }
}

template <int N, int GS = N, int NT = 256>
__global__ void __launch_bounds__(NT)
rmsnorm_kernel(const float* x, int ldx, const float* __restrict__ w, float* out, int ldo, float eps,
               float weight_offset) {
  __shared__ float scratch[32];
  ig_row_rmsnorm<N, GS, NT>(x + (long long)blockIdx.x * ldx, w, out + (long long)blockIdx.x * ldo, eps, weight_offset,
                            scratch);
}
