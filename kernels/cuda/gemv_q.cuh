// gemv_q.cuh — weight-only GEMV / small-batch GEMM: Y[t][r] (+)= sum_k dequant(W[r][k]) * X[t][k] (+ bias[r]) for T <= 8 tokens, W in f32/f16/bf16/Q8_0/Q4_0/Q4_1.
//
// gemv_q_kernel<DT, IN, TMAX = 1, WARPS = 4>
//   grid  = ceil(OUT / WARPS), block = WARPS*32: one warp per output row r.
//   W     row-major [OUT][IN] in DT's layout (GGUF blocks for Q types, IN % 32 == 0; IN % 8 == 0 for floats),
//         16-byte aligned base for f32/f16/bf16.
//   X     n_tok <= TMAX rows of IN floats at X + t*ldx; 16-byte aligned rows (ldx % 4 == 0).
//   Y     Y[t*ldy + r] = (accumulate ? Y : 0) + dot + (bias ? bias[r] : 0).
// Work split: a row is IN/8 "slices" of 8 weights; lane l takes slices l, l+32, ... A slice of a
// quantized block is a quarter of it: Q8_0 bytes 8j..8j+7 (elements 8j..8j+7, four 2-byte loads:
// the 34-byte blocks are only 2-byte aligned), Q4_0/Q4_1 nibble bytes 4j..4j+3 (elements 4j..4j+3
// and 16+4j..16+4j+3; one 4-byte load for Q4_1, two 2-byte loads for Q4_0), plus the block's f16
// scale (and min). Consecutive lanes read consecutive slices, so a warp's loads cover contiguous
// bytes of the row (coalesced); f16/bf16 slices are one 16-byte load, f32 two. Weights are
// dequantized in registers, never stored; each is used for all n_tok tokens (X comes from L1/L2),
// and the per-token partial sums are reduced with warp shuffles at the end.
#pragma once
#include "common.cuh"

// The 8 weights of slice s of a row (row = the row's first byte) and the X offsets of its two
// groups of 4 consecutive elements (w[0..3] pair with X[x0..x0+3], w[4..7] with X[x1..x1+3]).
template <int DT>
__device__ __forceinline__ void ig_gemv_slice(const unsigned char* __restrict__ row, int s, float (&w)[8], int& x0,
                                              int& x1) {
  if constexpr (DT == IG_F32) {
    const ig_f4 a = reinterpret_cast<const ig_f4*>(row)[2 * s], b = reinterpret_cast<const ig_f4*>(row)[2 * s + 1];
    w[0] = a.x; w[1] = a.y; w[2] = a.z; w[3] = a.w; w[4] = b.x; w[5] = b.y; w[6] = b.z; w[7] = b.w;
    x0 = 8 * s, x1 = 8 * s + 4;
  } else if constexpr (DT == IG_F16 || DT == IG_BF16) {
    const ig_u4 v = reinterpret_cast<const ig_u4*>(row)[s];
    const unsigned u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
      if constexpr (DT == IG_F16) {
        w[2 * i] = ig_f16_to_f32((unsigned short)(u[i] & 0xffffu));
        w[2 * i + 1] = ig_f16_to_f32((unsigned short)(u[i] >> 16));
      } else {
        w[2 * i] = __uint_as_float(u[i] << 16);
        w[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
      }
    }
    x0 = 8 * s, x1 = 8 * s + 4;
  } else {
    const int b = s >> 2, j = s & 3;
    const unsigned char* blk = row + b * ig_dtype_info<DT>::bytes;
    const float d = ig_f16_to_f32(ig_ld_u16(blk));
    if constexpr (DT == IG_Q8_0) {
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const unsigned short q2 = ig_ld_u16(blk + 2 + 8 * j + 2 * i);
        w[2 * i] = d * (float)(signed char)(q2 & 0xffu);
        w[2 * i + 1] = d * (float)(signed char)(q2 >> 8);
      }
      x0 = 32 * b + 8 * j, x1 = x0 + 4;
    } else {
      unsigned q4; // 4 nibble bytes: elements 4j..4j+3 (low nibbles), 16+4j.. (high nibbles)
      float c;     // w = d*q + c
      if constexpr (DT == IG_Q4_0) {
        q4 = (unsigned)ig_ld_u16(blk + 2 + 4 * j) | ((unsigned)ig_ld_u16(blk + 4 + 4 * j) << 16);
        c = -8.0f * d;
      } else {
        q4 = ig_ld_u32(blk + 4 + 4 * j);
        c = ig_f16_to_f32(ig_ld_u16(blk + 2));
      }
#pragma unroll
      for (int i = 0; i < 4; i++) {
        w[i] = fmaf((float)((q4 >> (8 * i)) & 15u), d, c);
        w[4 + i] = fmaf((float)((q4 >> (8 * i + 4)) & 15u), d, c);
      }
      x0 = 32 * b + 4 * j, x1 = x0 + 16;
    }
  }
}

// One warp computes output row r for n_tok (<= TMAX) tokens:
//   Y[t*ldy + r] = (accumulate ? Y : 0) + scale[t] * sum_k dequant(W[r][k]) * g[k] * X[xrow(t)][k] + bias[r]
// xrow(t) = rows ? rows[t] : t (gathered rows, e.g. the logit rows); g[k] = norm[k] + norm_offset
// when norm is given (an RMSNorm prologue folded into the weights: scale[t] is then the token's
// 1/rms, from ig_rms_scales), else 1; scale NULL means 1. Lanes take slices l, l+32, ...
template <int DT, int IN, int TMAX>
__device__ __forceinline__ void ig_gemv_warp(const void* __restrict__ W, int r, const float* __restrict__ X, int ldx,
                                             const int* __restrict__ rows, int n_tok,
                                             const float* __restrict__ norm, float norm_offset,
                                             const float* scale, float* Y, int ldy,
                                             const float* __restrict__ bias, int accumulate) {
  static_assert(TMAX >= 1 && TMAX <= 8 && (TMAX & (TMAX - 1)) == 0, "small batch only, a power of two");
  static_assert(IN % (ig_dtype_info<DT>::elems == 1 ? 8 : 32) == 0, "row length");
  constexpr int NS = IN / 8; // slices per row
  const int lane = threadIdx.x & 31;
  const unsigned char* row = static_cast<const unsigned char*>(W) + (long long)r * ig_row_bytes<DT>(IN);
  float acc[TMAX];
#pragma unroll
  for (int t = 0; t < TMAX; t++) acc[t] = 0.0f;
#pragma unroll 2
  for (int s = lane; s < NS; s += 32) {
    float w[8];
    int x0, x1;
    ig_gemv_slice<DT>(row, s, w, x0, x1);
    if (norm) {
      float ga[4], gb[4];
      ig_load_f<4>(norm + x0, ga);
      ig_load_f<4>(norm + x1, gb);
#pragma unroll
      for (int i = 0; i < 4; i++) w[i] *= ga[i] + norm_offset, w[4 + i] *= gb[i] + norm_offset;
    }
#pragma unroll
    for (int t = 0; t < TMAX; t++) {
      if (t < n_tok) {
        const float* xr = X + (long long)(rows ? rows[t] : t) * ldx;
        float xa[4], xb[4];
        ig_load_f<4>(xr + x0, xa);
        ig_load_f<4>(xr + x1, xb);
        float a = acc[t];
#pragma unroll
        for (int i = 0; i < 4; i++) a = fmaf(w[i], xa[i], a);
#pragma unroll
        for (int i = 0; i < 4; i++) a = fmaf(w[4 + i], xb[i], a);
        acc[t] = a;
      }
    }
  }
  const float b = bias ? bias[r] : 0.0f;
  if (TMAX > 2 && n_tok > 2) {
    // Several tokens: a transposed reduction (9 shuffles for 8 sums instead of 40): at each of
    // the first log2(TMAX) steps lanes trade half of their partial sums with the lane `off` away
    // and keep the other half, so lane l ends up with token ig_gemv_lane_token(l)'s sum over the
    // lanes of its group; two more butterflies finish it.
    int off = 16;
#pragma unroll
    for (int h = TMAX / 2; h >= 1; h /= 2, off /= 2) {
      const bool upper = lane & off;
#pragma unroll
      for (int i = 0; i < h; i++) {
        const float send = upper ? acc[i] : acc[i + h], keep = upper ? acc[i + h] : acc[i];
        acc[i] = keep + __shfl_xor_sync(0xffffffffu, send, off);
      }
    }
#pragma unroll
    for (; off >= 1; off /= 2) acc[0] += __shfl_xor_sync(0xffffffffu, acc[0], off);
    int t = 0; // the token whose sum this lane holds: bits 4, 3, ... of the lane, high to low
#pragma unroll
    for (int h = TMAX / 2, o = 16; h >= 1; h /= 2, o /= 2) t += (lane & o) ? h : 0;
    if ((lane & (32 / TMAX - 1)) == 0 && t < n_tok) {
      float* y = Y + (long long)t * ldy + r;
      *y = (accumulate ? *y : 0.0f) + acc[0] * (scale ? scale[t] : 1.0f) + b;
    }
    return;
  }
#pragma unroll
  for (int t = 0; t < TMAX; t++)
    if (t < n_tok) acc[t] = ig_warp_sum(acc[t]); // n_tok is the same for the whole warp
  if (lane == 0) {
#pragma unroll
    for (int t = 0; t < TMAX; t++) {
      if (t < n_tok) {
        float* y = Y + (long long)t * ldy + r;
        *y = (accumulate ? *y : 0.0f) + acc[t] * (scale ? scale[t] : 1.0f) + b;
      }
    }
  }
}

// scale[t] = 1/rms of row xrow(t) of X (IN floats) for the n_tok tokens, into the caller's
// __shared__ float[>= n_tok]: the RMSNorm prologue of a fused matmul, recomputed by every block
// (IN floats per token, from L2) so that no block waits for another. All NT threads must call it.
template <int IN, int NT>
__device__ __forceinline__ void ig_rms_scales(const float* __restrict__ X, int ldx, const int* __restrict__ rows,
                                              int n_tok, float eps, float* scale, float* scratch) {
  for (int t = 0; t < n_tok; t++) {
    const float* xr = X + (long long)(rows ? rows[t] : t) * ldx;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < IN; i += NT) ss += xr[i] * xr[i];
    ss = ig_block_sum<NT>(ss, scratch);
    if (threadIdx.x == 0) scale[t] = rsqrtf(ss / (float)IN + eps);
  }
  __syncthreads();
}

template <int DT, int IN, int TMAX = 1, int WARPS = 4>
__global__ void __launch_bounds__(WARPS * 32, 1) // min 1 block/SM: TMAX accumulators stay in registers (sm_86/89 spill otherwise)
gemv_q_kernel(const void* __restrict__ W, const float* __restrict__ X, int ldx, float* Y, int ldy, int OUT, int n_tok,
              const float* __restrict__ bias, int accumulate) {
  const int r = blockIdx.x * WARPS + (threadIdx.x >> 5);
  if (r >= OUT) return; // whole warp: no block-level synchronization below
  ig_gemv_warp<DT, IN, TMAX>(W, r, X, ldx, nullptr, n_tok, nullptr, 0.0f, nullptr, Y, ldy, bias, accumulate);
}
