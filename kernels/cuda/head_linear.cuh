// head_linear.cuh — a linear per head (models.lua head_linear): each head's group of the row times its own block of
// rows of one weight matrix, by the whole block of a rows kernel.
//
// ig_row_head_linear<DT, HEADS, STRIDE, FIRST, ROWS, COLS, TRANSPOSE>(w, x, o), and head_linear_kernel (a row per block)
//   W is [HEADS * STRIDE][COLS] of type DT; head h's block is rows [h*STRIDE + FIRST, + ROWS).
//   Plain: x [HEADS][COLS] -> o[h][r] = W_h[r] . x[h] (o [HEADS][ROWS]).
//   TRANSPOSE: x [HEADS][ROWS] -> o[h][c] = sum_r x[h][r] * W_h[r][c] (o [HEADS][COLS]): MLA's absorbed
//   query, each head taken into latent space through W_UK^T.
//   Thread i computes outputs i, i + blockDim.x, ...; elements are dequantized one at a time
//   (ig_dequant_elem), so every weight type of embed.cuh works. x and o must not overlap.
#pragma once
#include "common.cuh"
#include "embed.cuh"

template <int DT, int HEADS, int STRIDE, int FIRST, int ROWS, int COLS, bool TRANSPOSE>
__device__ __forceinline__ void ig_row_head_linear(const void* __restrict__ w, const float* x, float* o) {
  constexpr int IN = TRANSPOSE ? ROWS : COLS, OUT = TRANSPOSE ? COLS : ROWS;
  const unsigned char* base = static_cast<const unsigned char*>(w);
  for (int e = threadIdx.x; e < HEADS * OUT; e += blockDim.x) {
    const int h = e / OUT, j = e % OUT;
    const float* xh = x + h * IN;
    float acc = 0.0f;
    if constexpr (TRANSPOSE) {
      for (int r = 0; r < ROWS; r++)
        acc = fmaf(xh[r], ig_dequant_elem<DT>(base + (long long)(h * STRIDE + FIRST + r) * ig_row_bytes<DT>(COLS), j), acc);
    } else {
      const unsigned char* row = base + (long long)(h * STRIDE + FIRST + j) * ig_row_bytes<DT>(COLS);
      for (int c = 0; c < COLS; c++) acc = fmaf(ig_dequant_elem<DT>(row, c), xh[c], acc);
    }
    o[e] = acc;
  }
}

// The op launched on its own: grid = T (one block per row), x rows at x + t*ldx, o rows at o + t*ldo.
template <int DT, int HEADS, int STRIDE, int FIRST, int ROWS, int COLS, bool TRANSPOSE>
__global__ void __launch_bounds__(256) head_linear_kernel(const void* __restrict__ w, const float* __restrict__ x, int ldx,
                                                          float* __restrict__ o, int ldo) {
  ig_row_head_linear<DT, HEADS, STRIDE, FIRST, ROWS, COLS, TRANSPOSE>(w, x + (long long)blockIdx.x * ldx,
                                                                     o + (long long)blockIdx.x * ldo);
}
