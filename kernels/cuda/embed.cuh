// embed.cuh — embedding lookup: out[t][:] = dequantized row ids[t] of a [vocab][N] table (any weight dtype of common.cuh).
//
// embed_kernel<DT, N>: grid = T (one block per token), block = any multiple of 32 (256 suggested);
// thread i produces elements i, i + blockDim.x, ... of the row. out row t at out + t*ldo.
// Token ids must be valid (< vocab): the host checks them.
#pragma once
#include "common.cuh"
#include "gemv_q.cuh"

// Element i of row `row` (the row's first byte).
template <int DT> __device__ __forceinline__ float ig_dequant_elem(const unsigned char* row, int i) {
  if constexpr (DT == IG_F32) {
    return reinterpret_cast<const float*>(row)[i];
  } else if constexpr (DT == IG_F16) {
    return ig_f16_to_f32(reinterpret_cast<const unsigned short*>(row)[i]);
  } else if constexpr (DT == IG_BF16) {
    return ig_bf16_to_f32(reinterpret_cast<const unsigned short*>(row)[i]);
  } else if constexpr (DT >= IG_Q5_0) {
    // the slice of 8 that holds element i (gemv_q.cuh's decoder; an embedding reads one row per
    // token, so decoding 8 weights for one costs nothing that matters)
    float w[8];
    const int k = i & 31;
    ig_gemv_slice_k<DT>(row, (i >> 5) * 4 + ((k & 15) >> 2), w);
    return w[(k >= 16 ? 4 : 0) + (k & 3)];
  } else {
    const unsigned char* b = row + (i / 32) * ig_dtype_info<DT>::bytes;
    const int k = i % 32;
    const float d = ig_f16_to_f32(ig_ld_u16(b));
    if constexpr (DT == IG_Q8_0) {
      return d * (float)(signed char)b[2 + k];
    } else {
      const int off = DT == IG_Q4_0 ? 2 : 4;
      const unsigned byte = b[off + (k & 15)];
      const float q = (float)(k < 16 ? (byte & 15u) : (byte >> 4));
      if constexpr (DT == IG_Q4_0) return d * (q - 8.0f);
      else return d * q + ig_f16_to_f32(ig_ld_u16(b + 2));
    }
  }
}

// Row `id` of the table into o[0..N): the calling block's threads share the elements.
template <int DT, int N> __device__ __forceinline__ void ig_row_embed(const void* __restrict__ table, int id, float* o) {
  static_assert(N % ig_dtype_info<DT>::elems == 0, "quantized rows are whole blocks");
  const unsigned char* row = static_cast<const unsigned char*>(table) + (long long)id * ig_row_bytes<DT>(N);
  for (int i = threadIdx.x; i < N; i += blockDim.x) o[i] = ig_dequant_elem<DT>(row, i);
}

template <int DT, int N>
__global__ void embed_kernel(const void* __restrict__ table, const int* __restrict__ ids, float* __restrict__ out,
                             int ldo) {
  ig_row_embed<DT, N>(table, ids[blockIdx.x], out + (long long)blockIdx.x * ldo);
}
