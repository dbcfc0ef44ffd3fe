// t_head_linear.cu — head_linear_kernel (MLA's per-head blocks of kv_b_proj, plain and transposed) against
// kernels/cpu kc_head_linear for f32, f16, bf16, Q8_0 and Q4_1 weights.
#include "harness.h"
extern "C++" {
#include "kc_head_linear.h"
}
#include "head_linear.cuh"

template <int DT, int HEADS, int STRIDE, int FIRST, int ROWS, int COLS, bool TR>
static void head_case(const char* name, unsigned seed) {
  constexpr int IN = TR ? ROWS : COLS, OUT = TR ? COLS : ROWS, T = 3;
  const std::vector<unsigned char> W = rnd_matrix(DT, HEADS * STRIDE, COLS, seed);
  const std::vector<float> X = rnd((size_t)T * HEADS * IN, seed + 1);
  std::vector<float> want((size_t)T * HEADS * OUT);
  for (int t = 0; t < T; t++)
    kc_head_linear((ingot_dtype)DT, W.data(), HEADS, STRIDE, FIRST, ROWS, COLS, TR ? 1 : 0, X.data() + (size_t)t * HEADS * IN,
                   want.data() + (size_t)t * HEADS * OUT);
  unsigned char* dW = to_dev(W);
  float *dX = to_dev(X), *dY = to_dev(std::vector<float>(want.size(), 0.0f));
  head_linear_kernel<DT, HEADS, STRIDE, FIRST, ROWS, COLS, TR><<<T, 256>>>(dW, dX, HEADS * IN, dY, HEADS * OUT);
  CHECK(cudaGetLastError());
  const std::vector<float> got = from_dev(dY, want.size());
  expect_close(name, got.data(), want.data(), got.size(), 1e-4f);
  cudaFree(dW), cudaFree(dX), cudaFree(dY);
}

int main() {
  // kv_b_proj of 4 heads of (nope 16 + v 24) rows over a latent of 32: W_UK^T (transposed) and W_UV
  head_case<IG_F32, 4, 40, 0, 16, 32, true>("head_linear f32 W_UK^T 4x16x32", 1);
  head_case<IG_F32, 4, 40, 16, 24, 32, false>("head_linear f32 W_UV 4x24x32", 2);
  head_case<IG_F16, 3, 28, 12, 16, 24, true>("head_linear f16 transposed 3x16x24", 3);
  head_case<IG_BF16, 3, 28, 12, 16, 24, false>("head_linear bf16 3x16x24", 4);
  head_case<IG_Q8_0, 2, 20, 4, 16, 64, true>("head_linear q8_0 transposed 2x16x64", 5);
  head_case<IG_Q4_1, 2, 20, 4, 16, 64, false>("head_linear q4_1 2x16x64", 6);
  return finish();
}
