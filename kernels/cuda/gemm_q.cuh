// gemm_q.cuh — tiled GEMM for prefill-sized batches: Y[t][r] = scale[t] * sum_k dequant(W[r][k]) * g[k] * X[xrow(t)][k] + bias[r], W in any weight dtype of common.cuh, f32 activations and accumulation.
//
// ig_gemm_tile<DT, IN>: one block of 256 threads computes a 64-token x 64-row tile. Per k-step of
// 32 columns the block stages X[64][32] (times the folded norm weight g) and W[64][32] (dequantized:
// each thread one 8-weight slice, the same slices ig_gemv_slice reads) in shared memory, then each
// thread accumulates a 4 x 4 sub-tile (tokens ty+16i, rows tx+16j: conflict-free reads). Every weight
// is read from global memory once per 64 tokens (the GEMV path: once per 8).
//   X rows: xrow(t) = rows ? rows[t] : t for t in [t0, t0 + n_tok) of the launch, at X + xrow*ldx.
//   W rows r0 .. r0+63 of a [OUT][IN] matrix (rows >= OUT skipped); Y[t*ldy + r].
//   scale: per-token factors for tokens t0.., e.g. 1/rms of a folded RMSNorm (NULL: 1).
// Limits: IN a multiple of the block (32, or 256 for the K-quants and IQ4_XS) for block-quantized W, IN % 8 == 0 otherwise; ldx % 4 == 0 (16-byte rows); 256 threads.
#pragma once
#include "common.cuh"
#include "gemv_q.cuh"

#define IG_GEMM_BM 64 // tokens per tile
#define IG_GEMM_BN 64 // weight rows per tile
#define IG_GEMM_BK 32 // columns per k-step

// PERM: W's columns are the inputs in the order perm (ig_gemv_warp's PERM): X and g staged from
// X[perm[k]], g[perm[k]].
template <int DT, int IN, bool PERM = false>
__device__ __forceinline__ void ig_gemm_tile(const void* __restrict__ W, int r0, int OUT, const float* __restrict__ X,
                                             int ldx, const int* __restrict__ rows, int t0, int n_tok,
                                             const float* __restrict__ norm, float norm_offset, const float* scale,
                                             float* Y, int ldy, const float* __restrict__ bias,
                                             const int* __restrict__ perm = nullptr) {
  static_assert(IN % ig_row_multiple<DT>() == 0, "row length"); // a last partial k-step is zero-padded
  __shared__ float xs[IG_GEMM_BK][IG_GEMM_BM + 1]; // [k][token], padded: conflict-free stores
  __shared__ float ws[IG_GEMM_BK][IG_GEMM_BN + 1]; // [k][row]
  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
  const unsigned char* wbase = static_cast<const unsigned char*>(W);
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
  for (int k0 = 0; k0 < IN; k0 += IG_GEMM_BK) {
    // X: 64 tokens x 32 columns, 8 floats per thread (two 4-vectors)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int e = tid + h * 256, t = e >> 3, c = (e & 7) * 4;
      float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      if (t < n_tok && k0 + c < IN) {
        const float* xr = X + (long long)(rows ? rows[t0 + t] : t0 + t) * ldx;
        if constexpr (PERM) {
#pragma unroll
          for (int i = 0; i < 4; i++) v[i] = xr[perm[k0 + c + i]];
        } else {
          ig_load_f<4>(xr + k0 + c, v);
        }
        if (norm) {
          float g[4];
          if constexpr (PERM) {
#pragma unroll
            for (int i = 0; i < 4; i++) g[i] = norm[perm[k0 + c + i]];
          } else {
            ig_load_f<4>(norm + k0 + c, g);
          }
#pragma unroll
          for (int i = 0; i < 4; i++) v[i] *= g[i] + norm_offset;
        }
      }
#pragma unroll
      for (int i = 0; i < 4; i++) xs[c + i][t] = v[i];
    }
    // W: 64 rows x 32 columns = 64 x 4 slices of 8 weights, one slice per thread
    {
      const int rr = tid >> 2, j = tid & 3, r = r0 + rr;
      float w[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
      int x0 = 8 * j, x1 = 8 * j + 4;
      if (r < OUT && k0 + 8 * j < IN) {
        ig_gemv_slice<DT>(wbase + (long long)r * ig_row_bytes<DT>(IN), k0 / 8 + j, w, x0, x1);
        x0 -= k0, x1 -= k0;
      }
#pragma unroll
      for (int i = 0; i < 4; i++) ws[x0 + i][rr] = w[i], ws[x1 + i][rr] = w[4 + i];
    }
    __syncthreads();
#pragma unroll 8
    for (int k = 0; k < IG_GEMM_BK; k++) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; i++) a[i] = xs[k][ty + 16 * i], b[i] = ws[k][tx + 16 * i];
#pragma unroll
      for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const int t = ty + 16 * i;
    if (t >= n_tok) continue;
    const float s = scale ? scale[t] : 1.0f;
#pragma unroll
    for (int j = 0; j < 4; j++) {
      const int r = r0 + tx + 16 * j;
      if (r < OUT) Y[(long long)t * ldy + r] = acc[i][j] * s + (bias ? bias[r] : 0.0f);
    }
  }
}

// Y (=) W·X (+bias) for n_tok tokens: grid (ceil(OUT/64), ceil(n_tok/64)), block 256.
template <int DT, int IN>
__global__ void __launch_bounds__(256)
gemm_q_kernel(const void* __restrict__ W, const float* __restrict__ X, int ldx, float* Y, int ldy, int OUT, int n_tok,
              const float* __restrict__ bias) {
  const int tb = blockIdx.y * IG_GEMM_BM;
  ig_gemm_tile<DT, IN>(W, blockIdx.x * IG_GEMM_BN, OUT, X, ldx, nullptr, tb, min(IG_GEMM_BM, n_tok - tb), nullptr, 0.0f,
                       nullptr, Y + (long long)tb * ldy, ldy, bias);
}
