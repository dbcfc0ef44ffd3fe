// norm.cuh — the norms per row, or per group of GS elements (per-head q/k norms):
//   RMSNorm   out = x / rms(x) * (w + weight_offset)
//   LayerNorm out = (x - mean) / sqrt(var + eps) * w + b (the biased variance, two passes; b may be null)
//
// rmsnorm_kernel<N, GS = N, NT = 256> (layernorm_kernel alike): grid = rows (tokens), block = NT threads.
//   GS == N: one row per block, sum of squares by warp shuffles + shared memory across warps.
//   GS <  N: the row is N/GS groups (e.g. heads of head_dim GS), one warp per group at a time,
//            warp-shuffle reduction only; the weight has GS entries, shared by the groups.
// x row r at x + r*ldx, out row r at out + r*ldo; out may alias x (in place). Sums in f32.
#pragma once
#include "common.cuh"

// One row x[0..N) -> y (in place allowed), by the calling block of NT threads: RMSNorm over the
// whole row (GS = N; scratch = __shared__ float[32]) or per group of GS (a warp per group), the
// weight shared by the groups or, PER_HEAD, one per group (w has N values).
// Contains __syncthreads when GS == N: every thread of the block must call it.
template <int N, int GS, int NT, bool PER_HEAD = false>
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
      const float* wg = PER_HEAD ? w + g * GS : w;
      float* og = orow + g * GS;
      float ss = 0.0f;
      for (int i = lane; i < GS; i += 32) ss += xg[i] * xg[i];
      ss = ig_warp_sum(ss);
      const float r = rsqrtf(ss / (float)GS + eps);
      __syncwarp(); // every lane has read the group before any lane overwrites it (in place)
      for (int i = lane; i < GS; i += 32) og[i] = (xg[i] * r) * (wg[i] + weight_offset);
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

// One row x[0..N) -> y (in place allowed) by the calling block, as ig_row_rmsnorm; PER_HEAD: each
// group its own GS values of w and b (w and b hold N), else the GS values are shared by the groups.
template <int N, int GS, int NT, bool PER_HEAD>
__device__ __forceinline__ void ig_row_layernorm(const float* xr, const float* __restrict__ w,
                                                 const float* __restrict__ b, float* orow, float eps, float* scratch) {
  static_assert(N % GS == 0, "groups tile the row");
  static_assert(NT % 32 == 0 && NT <= 1024, "block size");
  if constexpr (GS == N) {
    float s = 0.0f;
    for (int i = threadIdx.x; i < N; i += NT) s += xr[i];
    const float mean = ig_block_sum<NT>(s, scratch) / (float)N; // (ends in a barrier: scratch reusable)
    float ss = 0.0f;
    for (int i = threadIdx.x; i < N; i += NT) ss += (xr[i] - mean) * (xr[i] - mean);
    const float r = rsqrtf(ig_block_sum<NT>(ss, scratch) / (float)N + eps);
    for (int i = threadIdx.x; i < N; i += NT) {
      const float y = ((xr[i] - mean) * r) * w[i];
      orow[i] = b ? y + b[i] : y;
    }
  } else {
    const int lane = threadIdx.x & 31;
    for (int g = threadIdx.x >> 5; g < N / GS; g += NT / 32) {
      const float* xg = xr + g * GS;
      float* og = orow + g * GS;
      const float* wg = PER_HEAD ? w + g * GS : w;
      const float* bg = b && PER_HEAD ? b + g * GS : b;
      float s = 0.0f;
      for (int i = lane; i < GS; i += 32) s += xg[i];
      const float mean = ig_warp_sum(s) / (float)GS;
      float ss = 0.0f;
      for (int i = lane; i < GS; i += 32) ss += (xg[i] - mean) * (xg[i] - mean);
      const float r = rsqrtf(ig_warp_sum(ss) / (float)GS + eps);
      __syncwarp(); // every lane has read the group before any lane overwrites it (in place)
      for (int i = lane; i < GS; i += 32) {
        const float y = ((xg[i] - mean) * r) * wg[i];
        og[i] = bg ? y + bg[i] : y;
      }
    }
  }
}

template <int N, int GS = N, int NT = 256, bool PER_HEAD = false>
__global__ void __launch_bounds__(NT)
layernorm_kernel(const float* x, int ldx, const float* __restrict__ w, const float* __restrict__ b, float* out,
                 int ldo, float eps) {
  __shared__ float scratch[32];
  ig_row_layernorm<N, GS, NT, PER_HEAD>(x + (long long)blockIdx.x * ldx, w, b, out + (long long)blockIdx.x * ldo,
                                        eps, scratch);
}
