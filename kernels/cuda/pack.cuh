// pack.cuh — the input of a cuBLASLt GEMM: one activation row, optionally gathered through a row
// map and RMS-normalized (the matmul group's prologue), written in the GEMM's input type
// (f32, or f16 / bf16 rounded to nearest even: the BF16/F16-in, F32-accumulate GEMMs).
//
// ig_row_pack<N, NT, DT>: called by every thread of a block of NT threads for one row of N floats;
// norm == nullptr: a plain conversion. scratch: __shared__ float[32] (block reduction).
#pragma once
#include "common.cuh"

// binary32 -> bfloat16 bits, round to nearest even (one cvt on the GPU); ig_f32_to_f16 is in common.cuh.
__device__ __forceinline__ unsigned short ig_f32_to_bf16(float f) {
#if defined(__CUDA_ARCH__)
  unsigned short h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
#else
  const unsigned x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x >> 16) | 0x40u); // NaN stays NaN
  return (unsigned short)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
#endif
}

// One value in the GEMM input type DT (IG_F32, IG_F16, IG_BF16) at element i of out.
template <int DT> __device__ __forceinline__ void ig_store_as(void* out, int i, float v) {
  if constexpr (DT == IG_F32) static_cast<float*>(out)[i] = v;
  else if constexpr (DT == IG_F16) static_cast<unsigned short*>(out)[i] = ig_f32_to_f16(v);
  else static_cast<unsigned short*>(out)[i] = ig_f32_to_bf16(v);
}

template <int N, int NT, int DT>
__device__ __forceinline__ void ig_row_pack(const float* __restrict__ x, const float* __restrict__ norm, float norm_offset,
                                            float eps, void* out, float* scratch) {
  static_assert(DT == IG_F32 || DT == IG_F16 || DT == IG_BF16, "a dense GEMM input type");
  float r = 1.0f;
  if (norm) { // the same arithmetic as ig_row_rmsnorm: (x * 1/rms) * (w + offset)
    float ss = 0.0f;
    for (int i = threadIdx.x; i < N; i += NT) ss += x[i] * x[i];
    ss = ig_block_sum<NT>(ss, scratch);
    r = rsqrtf(ss / (float)N + eps);
  }
  for (int i = threadIdx.x; i < N; i += NT) ig_store_as<DT>(out, i, norm ? (x[i] * r) * (norm[i] + norm_offset) : x[i]);
}

// Rows of x (row r at x + r*ldx) packed to out[r][N] in DT: grid = rows, block = NT threads.
template <int N, int DT, int NT = 256>
__global__ void __launch_bounds__(NT)
pack_kernel(const float* __restrict__ x, int ldx, const float* __restrict__ norm, float norm_offset, float eps,
            void* out) {
  __shared__ float scratch[32];
  ig_row_pack<N, NT, DT>(x + (long long)blockIdx.x * ldx, norm, norm_offset, eps,
                         static_cast<unsigned char*>(out) + (long long)blockIdx.x * N * ig_dtype_info<DT>::bytes,
                         scratch);
}
