// gemv_q.cuh — weight-only GEMV / small-batch GEMM: Y[t][r] (+)= sum_k dequant(W[r][k]) * X[t][k] (+ bias[r]) for T <= 8 tokens, W in f32/f16/bf16, Q8_0/Q4_0/Q4_1/Q5_0/Q5_1, the K-quants Q2_K..Q6_K, IQ4_NL/IQ4_XS, MXFP4, and the repacked GPTQ/AWQ/FP8 types Q4_Z/Q8_Z/F8_B32.
//
// gemv_q_kernel<DT, IN, TMAX = 1, WARPS = 4>
//   grid  = ceil(OUT / WARPS), block = WARPS*32: one warp per output row r.
//   W     row-major [OUT][IN] in DT's layout (GGUF blocks for Q types, IN a multiple of the block: 32, or 256
//         for the K-quants and IQ4_XS; IN % 8 == 0 for floats),
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

// The 8 weights of slice s of a row of the types added to GGUF after Q4_1 (Q5_0, Q5_1, IQ4_NL and
// the 256-element super-blocks). Every type uses Q4_0's slice pattern: slice s covers elements
// 4q..4q+3 and 16+4q..16+4q+3 of the row's 32-element group m = s/4 (q = s%4), so four consecutive
// slices cover one whole group (what ig_gemm_tile stages per k-step) and consecutive lanes read
// consecutive bytes of it. A super-block holds 8 groups; its scales are decoded per slice in
// registers (a few integer ops per 8 weights: the GEMV is bound by the weight bytes, not by them).
template <int DT>
__device__ __forceinline__ void ig_gemv_slice_k(const unsigned char* __restrict__ row, int s, float (&w)[8]) {
  constexpr int BYTES = ig_dtype_info<DT>::bytes;
  constexpr int ALIGN = BYTES % 4 == 0 ? 4 : 2;
  const int m = s >> 2, q = s & 3, l = 4 * q; // group m of the row; elements l.. and 16+l.. of the group
  float dl, ml, dh, mh;                         // w = dl*code + ml (elements l..), dh*code + mh (16+l..)
  unsigned lo, hi;                              // the 4 codes of each half, one per byte
  if constexpr (DT == IG_MXFP4) { // 17-byte blocks: every field byte-aligned, read a byte at a time
    const unsigned char* blk = row + m * BYTES;
    const float d = ig_e8m0_half(blk[0]);
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const unsigned b = blk[1 + l + i];
      w[i] = ig_mxfp4_value(b & 15u) * d;
      w[4 + i] = ig_mxfp4_value(b >> 4) * d;
    }
    return;
  } else if constexpr (ig_dtype_info<DT>::elems == 32) {
    const unsigned char* blk = row + m * BYTES;
    const float d = ig_f16_to_f32(ig_ld_u16(blk));
    if constexpr (DT == IG_IQ4_NL) {
      const unsigned n = ig_ld4<ALIGN>(blk + 2 + l);
      lo = n & 0x0f0f0f0fu, hi = (n >> 4) & 0x0f0f0f0fu;
      dl = dh = d, ml = mh = 0.0f;
    } else if constexpr (DT == IG_Q4_Z) { // f16 d, u16 zero z, Q4_0's nibbles: w = q*d - z*d (exact)
      const unsigned n = ig_ld4<4>(blk + 4 + l);
      lo = n & 0x0f0f0f0fu, hi = (n >> 4) & 0x0f0f0f0fu;
      dl = dh = d, ml = mh = -((float)ig_ld_u16(blk + 2) * d);
    } else if constexpr (DT == IG_Q8_Z || DT == IG_F8_B32) { // 32 code bytes at 4: elements l.. and 16+l..
      lo = ig_ld4<4>(blk + 4 + l), hi = ig_ld4<4>(blk + 20 + l);
      if constexpr (DT == IG_Q8_Z) dl = dh = d, ml = mh = -((float)ig_ld_u16(blk + 2) * d);
      else dl = dh = __uint_as_float(ig_ld_u32(blk)), ml = mh = 0.0f; // the f32 scale (d above is unused)
    } else {
      constexpr int QH = DT == IG_Q5_0 ? 2 : 4; // byte offset of qh; the nibbles follow it
      const unsigned qh = ig_ld4<ALIGN>(blk + QH), n = ig_ld4<ALIGN>(blk + QH + 4 + l);
      lo = hi = 0;
#pragma unroll
      for (int i = 0; i < 4; i++) {
        lo |= (((n >> (8 * i)) & 15u) | (((qh >> (l + i)) & 1u) << 4)) << (8 * i);
        hi |= (((n >> (8 * i + 4)) & 15u) | (((qh >> (16 + l + i)) & 1u) << 4)) << (8 * i);
      }
      dl = dh = d;
      ml = mh = DT == IG_Q5_0 ? -16.0f * d : ig_f16_to_f32(ig_ld_u16(blk + 2));
    }
  } else {
    const unsigned char* blk = row + (m >> 3) * BYTES;
    const int g = m & 7; // the group within the super-block
    if constexpr (DT == IG_Q4_K || DT == IG_Q5_K) {
      const float d = ig_f16_to_f32(ig_ld_u16(blk)), dmin = ig_f16_to_f32(ig_ld_u16(blk + 2));
      const unsigned char* sc = blk + 4;
      int scale, mn; // 6-bit scale and min of group g (runtime/load/dtype.h's dtype_k4_scale_min)
      if (g < 4) scale = sc[g] & 63, mn = sc[g + 4] & 63;
      else scale = (sc[g + 4] & 15) | ((sc[g - 4] >> 6) << 4), mn = (sc[g + 4] >> 4) | ((sc[g] >> 6) << 4);
      constexpr int QS = DT == IG_Q4_K ? 16 : 48;
      const int sh = 4 * (g & 1);
      const unsigned char* qs = blk + QS + 32 * (g >> 1);
      lo = (ig_ld4<4>(qs + l) >> sh) & 0x0f0f0f0fu;
      hi = (ig_ld4<4>(qs + 16 + l) >> sh) & 0x0f0f0f0fu;
      if constexpr (DT == IG_Q5_K) {
        lo |= ((ig_ld4<4>(blk + 16 + l) >> g) & 0x01010101u) << 4;
        hi |= ((ig_ld4<4>(blk + 32 + l) >> g) & 0x01010101u) << 4;
      }
      dl = dh = d * (float)scale;
      ml = mh = -dmin * (float)mn;
    } else if constexpr (DT == IG_Q2_K || DT == IG_Q3_K) {
      constexpr int QS = DT == IG_Q2_K ? 16 : 32;
      const int sh = 2 * (g & 3);
      const unsigned char* qs = blk + QS + 32 * (g >> 2);
      lo = (ig_ld4<ALIGN>(qs + l) >> sh) & 0x03030303u;
      hi = (ig_ld4<ALIGN>(qs + 16 + l) >> sh) & 0x03030303u;
      if constexpr (DT == IG_Q2_K) { // scales[16] at 0: low nibble scale, high nibble min, per 16 elements
        const float d = ig_f16_to_f32(ig_ld_u16(blk + 80)), dmin = ig_f16_to_f32(ig_ld_u16(blk + 82));
        const unsigned sl = blk[2 * g], sh2 = blk[2 * g + 1];
        dl = d * (float)(sl & 15u), ml = -dmin * (float)(sl >> 4);
        dh = d * (float)(sh2 & 15u), mh = -dmin * (float)(sh2 >> 4);
      } else { // hmask[32] at 0 (bit g: the third bit, set = no -4), 12 bytes of 6-bit scales at 96
        lo |= ((ig_ld4<ALIGN>(blk + l) >> g) & 0x01010101u) << 2;
        hi |= ((ig_ld4<ALIGN>(blk + 16 + l) >> g) & 0x01010101u) << 2;
        const unsigned char* sc = blk + 96;
        const float d = ig_f16_to_f32(ig_ld_u16(blk + 108));
        int s6[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
          const int k = 2 * g + h;
          s6[h] = ((k < 8 ? sc[k] & 15 : sc[k - 8] >> 4) | (((sc[8 + (k & 3)] >> (2 * (k >> 2))) & 3) << 4)) - 32;
        }
        dl = d * (float)s6[0], dh = d * (float)s6[1];
        ml = -4.0f * dl, mh = -4.0f * dh;
      }
    } else if constexpr (DT == IG_Q6_K) { // ql[128] at 0, qh[64] at 128, int8 scales[16] at 192, d at 208
      const unsigned char* ql = blk + 64 * (g >> 2) + 32 * (g & 1);
      const unsigned char* qh = blk + 128 + 32 * (g >> 2);
      const int nsh = 4 * ((g & 3) >> 1), hsh = 2 * (g & 3);
      lo = ((ig_ld4<2>(ql + l) >> nsh) & 0x0f0f0f0fu) | (((ig_ld4<2>(qh + l) >> hsh) & 0x03030303u) << 4);
      hi = ((ig_ld4<2>(ql + 16 + l) >> nsh) & 0x0f0f0f0fu) | (((ig_ld4<2>(qh + 16 + l) >> hsh) & 0x03030303u) << 4);
      const float d = ig_f16_to_f32(ig_ld_u16(blk + 208));
      dl = d * (float)(signed char)blk[192 + 2 * g], dh = d * (float)(signed char)blk[193 + 2 * g];
      ml = -32.0f * dl, mh = -32.0f * dh;
    } else { // IQ4_XS: f16 d, u16 scales_h, scales_l[4], qs[128] (group g: bytes 16g.., as IQ4_NL)
      static_assert(DT == IG_IQ4_XS, "a weight type without a slice decoder");
      const float d = ig_f16_to_f32(ig_ld_u16(blk));
      const int ls = ((blk[4 + (g >> 1)] >> (4 * (g & 1))) & 15) | (((ig_ld_u16(blk + 2) >> (2 * g)) & 3) << 4);
      const unsigned n = ig_ld4<4>(blk + 8 + 16 * g + l);
      lo = n & 0x0f0f0f0fu, hi = (n >> 4) & 0x0f0f0f0fu;
      dl = dh = d * (float)(ls - 32), ml = mh = 0.0f;
    }
  }
  if constexpr (DT == IG_F8_B32) { // E4M3 codes: (value) * scale, one rounding as the CPU's
#pragma unroll
    for (int i = 0; i < 4; i++) {
      w[i] = ig_e4m3_to_f32((lo >> (8 * i)) & 0xffu) * dl;
      w[4 + i] = ig_e4m3_to_f32((hi >> (8 * i)) & 0xffu) * dh;
    }
  } else if constexpr (DT == IG_IQ4_NL || DT == IG_IQ4_XS) { // the codes index the non-linear table
#pragma unroll
    for (int i = 0; i < 4; i++) {
      w[i] = dl * ig_iq4_value((lo >> (8 * i)) & 15u);
      w[4 + i] = dh * ig_iq4_value((hi >> (8 * i)) & 15u);
    }
  } else { // affine codes: w = scale*code + offset
#pragma unroll
    for (int i = 0; i < 4; i++) {
      w[i] = fmaf((float)((lo >> (8 * i)) & 0xffu), dl, ml);
      w[4 + i] = fmaf((float)((hi >> (8 * i)) & 0xffu), dh, mh);
    }
  }
}

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
  } else if constexpr (DT >= IG_Q5_0) {
    ig_gemv_slice_k<DT>(row, s, w);
    x0 = 32 * (s >> 2) + 4 * (s & 3), x1 = x0 + 16;
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
// PERM: W's columns are the inputs in the order perm (an act-order GPTQ weight sorted by group
// at load): column k multiplies X[perm[k]] (and g[perm[k]]), loaded element by element.
template <int DT, int IN, int TMAX, bool PERM = false>
__device__ __forceinline__ void ig_gemv_warp(const void* __restrict__ W, int r, const float* __restrict__ X, int ldx,
                                             const int* __restrict__ rows, int n_tok,
                                             const float* __restrict__ norm, float norm_offset,
                                             const float* scale, float* Y, int ldy,
                                             const float* __restrict__ bias, int accumulate,
                                             const int* __restrict__ perm = nullptr) {
  static_assert(TMAX >= 1 && TMAX <= 8 && (TMAX & (TMAX - 1)) == 0, "small batch only, a power of two");
  static_assert(IN % ig_row_multiple<DT>() == 0, "row length");
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
    int pa[4], pb[4]; // the inputs of the slice's two runs
    if constexpr (PERM) {
#pragma unroll
      for (int i = 0; i < 4; i++) pa[i] = perm[x0 + i], pb[i] = perm[x1 + i];
    }
    if (norm) {
      float ga[4], gb[4];
      if constexpr (PERM) {
#pragma unroll
        for (int i = 0; i < 4; i++) ga[i] = norm[pa[i]], gb[i] = norm[pb[i]];
      } else {
        ig_load_f<4>(norm + x0, ga);
        ig_load_f<4>(norm + x1, gb);
      }
#pragma unroll
      for (int i = 0; i < 4; i++) w[i] *= ga[i] + norm_offset, w[4 + i] *= gb[i] + norm_offset;
    }
#pragma unroll
    for (int t = 0; t < TMAX; t++) {
      if (t < n_tok) {
        const float* xr = X + (long long)(rows ? rows[t] : t) * ldx;
        float xa[4], xb[4];
        if constexpr (PERM) {
#pragma unroll
          for (int i = 0; i < 4; i++) xa[i] = xr[pa[i]], xb[i] = xr[pb[i]];
        } else {
          ig_load_f<4>(xr + x0, xa);
          ig_load_f<4>(xr + x1, xb);
        }
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
// (IN floats per token, from L2) so that no block waits for another. A warp per token, the warps
// taking the tokens in turn, and one barrier at the end: a block-wide sum per token would put two
// barriers per token on every block's critical path (8 tokens: most of a decode GEMV's time).
// All NT threads must call it.
template <int IN, int NT>
__device__ __forceinline__ void ig_rms_scales(const float* __restrict__ X, int ldx, const int* __restrict__ rows,
                                              int n_tok, float eps, float* scale) {
  static_assert(NT % 32 == 0, "whole warps");
  const int lane = threadIdx.x & 31;
  for (int t = threadIdx.x >> 5; t < n_tok; t += NT / 32) {
    const float* xr = X + (long long)(rows ? rows[t] : t) * ldx;
    float ss = 0.0f;
    for (int i = lane; i < IN; i += 32) ss += xr[i] * xr[i];
    ss = ig_warp_sum(ss);
    if (lane == 0) scale[t] = rsqrtf(ss / (float)IN + eps);
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
