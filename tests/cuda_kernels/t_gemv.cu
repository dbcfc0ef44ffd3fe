// t_gemv.cu — gemv_q_kernel against kernels/cpu kc_mm_* / kc_mmx_* for every weight dtype, T = 1 and T > 1, bias, accumulate.
#include "harness.h"
#include "gemv_q.cuh"

template <int DT, int IN, int TMAX, int WARPS>
static void run_case(const char* name, int OUT, int n_tok, bool with_bias, bool accumulate, unsigned seed) {
  const std::vector<unsigned char> W = rnd_matrix(DT, OUT, IN, seed);
  const int ldx = IN + 4, ldy = OUT + 3; // padded rows: leading dimensions are honoured
  const std::vector<float> X = rnd((size_t)n_tok * ldx, seed + 1), bias = rnd(OUT, seed + 2);
  std::vector<float> Y0 = rnd((size_t)n_tok * ldy, seed + 3), want = Y0;
  const float* b = with_bias ? bias.data() : nullptr;
  const int acc = accumulate ? 1 : 0;
  switch (DT) {
    case IG_F32: kc_mm_f32((const float*)W.data(), X.data(), ldx, want.data(), ldy, n_tok, IN, 0, OUT, b, acc); break;
    case IG_F16: kc_mm_f16((const uint16_t*)W.data(), X.data(), ldx, want.data(), ldy, n_tok, IN, 0, OUT, b, acc); break;
    case IG_BF16: kc_mm_bf16((const uint16_t*)W.data(), X.data(), ldx, want.data(), ldy, n_tok, IN, 0, OUT, b, acc); break;
    case IG_Q8_0: kc_mmx_q8_0((const block_q8_0*)W.data(), X.data(), ldx, want.data(), ldy, n_tok, IN, 0, OUT, b, acc); break;
    case IG_Q4_0: kc_mmx_q4_0((const block_q4_0*)W.data(), X.data(), ldx, want.data(), ldy, n_tok, IN, 0, OUT, b, acc); break;
    case IG_Q4_1: kc_mmx_q4_1((const block_q4_1*)W.data(), X.data(), ldx, want.data(), ldy, n_tok, IN, 0, OUT, b, acc); break;
  }
  unsigned char* dW = to_dev(W);
  float *dX = to_dev(X), *dY = to_dev(Y0), *dB = to_dev(bias);
  gemv_q_kernel<DT, IN, TMAX, WARPS><<<(OUT + WARPS - 1) / WARPS, WARPS * 32>>>(dW, dX, ldx, dY, ldy, OUT, n_tok,
                                                                                 with_bias ? dB : nullptr, acc);
  CHECK(cudaGetLastError());
  const std::vector<float> got = from_dev(dY, Y0.size());
  expect_close(name, got.data(), want.data(), got.size(), 1e-4f);
  cudaFree(dW), cudaFree(dX), cudaFree(dY), cudaFree(dB);
}

int main() {
  // IN = 256: 32 slices (one per lane); IN = 96: 12 slices (lanes idle); IN = 320: 40 slices (two rounds).
  run_case<IG_F32, 256, 1, 4>("gemv f32 IN256 T1", 37, 1, false, false, 1);
  run_case<IG_F16, 96, 8, 4>("gemv f16 IN96 T5/8 bias", 21, 5, true, false, 2);
  run_case<IG_BF16, 320, 2, 2>("gemv bf16 IN320 T2 acc", 19, 2, false, true, 3);
  run_case<IG_Q8_0, 256, 1, 4>("gemv q8_0 IN256 T1", 37, 1, false, false, 4);
  run_case<IG_Q8_0, 96, 8, 4>("gemv q8_0 IN96 T8 bias+acc", 13, 8, true, true, 5);
  run_case<IG_Q4_0, 320, 1, 4>("gemv q4_0 IN320 T1 bias", 29, 1, true, false, 6);
  run_case<IG_Q4_0, 256, 4, 1>("gemv q4_0 IN256 T3/4 acc", 11, 3, false, true, 7);
  run_case<IG_Q4_1, 256, 1, 4>("gemv q4_1 IN256 T1", 37, 1, false, false, 8);
  run_case<IG_Q4_1, 96, 8, 4>("gemv q4_1 IN96 T7/8 bias+acc", 17, 7, true, true, 9);
  return finish();
}
