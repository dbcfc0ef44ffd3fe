// t_gemv.cu — gemv_q_kernel against kernels/cpu kc_mm_* / kc_mmx_* for every weight dtype, T = 1 and T > 1, bias,
// accumulate; gemm_q_kernel (prefill tiles) for the block types whose slices are not Q4_0's own.
#include "harness.h"
#include "gemm_q.cuh"
#include "gemv_q.cuh"

// The CPU reference: Y (+)= W·X (+bias) over n_tok rows with kernels/cpu's f32-activation matmul of DT.
static void cpu_matmul(int DT, const std::vector<unsigned char>& W, const std::vector<float>& X, int ldx,
                       std::vector<float>& want, int ldy, int n_tok, int IN, int OUT, const float* b, int acc) {
  switch (DT) {
    case IG_F32: kc_mm_f32((const float*)W.data(), X.data(), ldx, want.data(), ldy, n_tok, IN, 0, OUT, b, acc); break;
    case IG_F16: kc_mm_f16((const uint16_t*)W.data(), X.data(), ldx, want.data(), ldy, n_tok, IN, 0, OUT, b, acc); break;
    case IG_BF16: kc_mm_bf16((const uint16_t*)W.data(), X.data(), ldx, want.data(), ldy, n_tok, IN, 0, OUT, b, acc); break;
#define KQ(ID, name, block)                                                                                          \
  case ID: kc_mmx_##name((const block*)W.data(), X.data(), ldx, want.data(), ldy, n_tok, IN, 0, OUT, b, acc); break;
    KQ(IG_Q8_0, q8_0, block_q8_0) KQ(IG_Q4_0, q4_0, block_q4_0) KQ(IG_Q4_1, q4_1, block_q4_1)
    KQ(IG_Q5_0, q5_0, block_q5_0) KQ(IG_Q5_1, q5_1, block_q5_1) KQ(IG_IQ4_NL, iq4_nl, block_iq4_nl)
    KQ(IG_Q2_K, q2_k, block_q2_K) KQ(IG_Q3_K, q3_k, block_q3_K) KQ(IG_Q4_K, q4_k, block_q4_K)
    KQ(IG_Q5_K, q5_k, block_q5_K) KQ(IG_Q6_K, q6_k, block_q6_K) KQ(IG_IQ4_XS, iq4_xs, block_iq4_xs)
    KQ(IG_Q4_Z, q4_z, block_q4_z) KQ(IG_Q8_Z, q8_z, block_q8_z) KQ(IG_F8_B32, f8_b32, block_f8_b32)
    KQ(IG_MXFP4, mxfp4, block_mxfp4)
#undef KQ
    default: std::fprintf(stderr, "cpu_matmul: dtype %d\n", DT); std::exit(2);
  }
}

// gemm_q_kernel over n_tok tokens (two token tiles when n_tok > 64), bias.
template <int DT, int IN> static void gemm_case(const char* name, int OUT, int n_tok, unsigned seed) {
  const std::vector<unsigned char> W = rnd_matrix(DT, OUT, IN, seed);
  const int ldx = IN + 4, ldy = OUT + 3;
  const std::vector<float> X = rnd((size_t)n_tok * ldx, seed + 1), bias = rnd(OUT, seed + 2);
  std::vector<float> Y0((size_t)n_tok * ldy, 0.0f), want = Y0;
  cpu_matmul(DT, W, X, ldx, want, ldy, n_tok, IN, OUT, bias.data(), 0);
  unsigned char* dW = to_dev(W);
  float *dX = to_dev(X), *dY = to_dev(Y0), *dB = to_dev(bias);
  gemm_q_kernel<DT, IN><<<dim3((OUT + 63) / 64, (n_tok + 63) / 64), 256>>>(dW, dX, ldx, dY, ldy, OUT, n_tok, dB);
  CHECK(cudaGetLastError());
  const std::vector<float> got = from_dev(dY, Y0.size());
  expect_close(name, got.data(), want.data(), got.size(), 1e-4f);
  cudaFree(dW), cudaFree(dX), cudaFree(dY), cudaFree(dB);
}

template <int DT, int IN, int TMAX, int WARPS>
static void run_case(const char* name, int OUT, int n_tok, bool with_bias, bool accumulate, unsigned seed) {
  const std::vector<unsigned char> W = rnd_matrix(DT, OUT, IN, seed);
  const int ldx = IN + 4, ldy = OUT + 3; // padded rows: leading dimensions are honoured
  const std::vector<float> X = rnd((size_t)n_tok * ldx, seed + 1), bias = rnd(OUT, seed + 2);
  std::vector<float> Y0 = rnd((size_t)n_tok * ldy, seed + 3), want = Y0;
  const float* b = with_bias ? bias.data() : nullptr;
  const int acc = accumulate ? 1 : 0;
  cpu_matmul(DT, W, X, ldx, want, ldy, n_tok, IN, OUT, b, acc);
  unsigned char* dW = to_dev(W);
  float *dX = to_dev(X), *dY = to_dev(Y0), *dB = to_dev(bias);
  gemv_q_kernel<DT, IN, TMAX, WARPS><<<(OUT + WARPS - 1) / WARPS, WARPS * 32>>>(dW, dX, ldx, dY, ldy, OUT, n_tok,
                                                                                 with_bias ? dB : nullptr, acc);
  CHECK(cudaGetLastError());
  const std::vector<float> got = from_dev(dY, Y0.size());
  expect_close(name, got.data(), want.data(), got.size(), 1e-4f);
  cudaFree(dW), cudaFree(dX), cudaFree(dY), cudaFree(dB);
}

// Act-order weights (columns in the order perm, inputs reordered at load): a GEMV (TMAX tokens)
// or GEMM tile reads X[perm[k]] and the folded norm weight g[perm[k]] for column k. Reference:
// the CPU matmul on X gathered and scaled on the host.
template <int DT, int IN, int TMAX>
__global__ void perm_gemv_kernel(const void* W, const float* X, int ldx, float* Y, int ldy, int OUT, int n_tok,
                                 const float* norm, const int* perm) {
  const int r = blockIdx.x * 4 + (threadIdx.x >> 5);
  if (r < OUT) ig_gemv_warp<DT, IN, TMAX, true>(W, r, X, ldx, nullptr, n_tok, norm, 1.0f, nullptr, Y, ldy, nullptr, 0, perm);
}
template <int DT, int IN>
__global__ void perm_gemm_kernel(const void* W, const float* X, int ldx, float* Y, int ldy, int OUT, int n_tok,
                                 const float* norm, const int* perm) {
  const int tb = blockIdx.y * IG_GEMM_BM;
  ig_gemm_tile<DT, IN, true>(W, blockIdx.x * IG_GEMM_BN, OUT, X, ldx, nullptr, tb, min(IG_GEMM_BM, n_tok - tb), norm,
                             1.0f, nullptr, Y + (long long)tb * ldy, ldy, nullptr, perm);
}
template <int DT, int IN, int TMAX>
static void perm_case(const char* name, int OUT, int n_tok, bool gemm, unsigned seed) {
  const std::vector<unsigned char> W = rnd_matrix(DT, OUT, IN, seed);
  const int ldx = IN + 4, ldy = OUT + 3;
  const std::vector<float> X = rnd((size_t)n_tok * ldx, seed + 1), g = rnd(IN, seed + 2);
  std::vector<int> perm(IN);
  for (int k = 0; k < IN; k++) perm[k] = k;
  unsigned s = seed;
  for (int k = IN - 1; k > 0; k--) std::swap(perm[k], perm[rnd_u32(s) % (unsigned)(k + 1)]);
  std::vector<float> Xp((size_t)n_tok * ldx, 0.0f);
  for (int t = 0; t < n_tok; t++)
    for (int k = 0; k < IN; k++) Xp[(size_t)t * ldx + k] = X[(size_t)t * ldx + perm[k]] * (g[perm[k]] + 1.0f);
  std::vector<float> Y0((size_t)n_tok * ldy, 0.0f), want = Y0;
  cpu_matmul(DT, W, Xp, ldx, want, ldy, n_tok, IN, OUT, nullptr, 0);
  unsigned char* dW = to_dev(W);
  float *dX = to_dev(X), *dY = to_dev(Y0), *dG = to_dev(g);
  int* dP = nullptr;
  CHECK(cudaMalloc((void**)&dP, sizeof(int) * IN));
  CHECK(cudaMemcpy(dP, perm.data(), sizeof(int) * IN, cudaMemcpyHostToDevice));
  if (gemm)
    perm_gemm_kernel<DT, IN><<<dim3((OUT + 63) / 64, (n_tok + 63) / 64), 256>>>(dW, dX, ldx, dY, ldy, OUT, n_tok, dG, dP);
  else
    perm_gemv_kernel<DT, IN, TMAX><<<(OUT + 3) / 4, 128>>>(dW, dX, ldx, dY, ldy, OUT, n_tok, dG, dP);
  CHECK(cudaGetLastError());
  const std::vector<float> got = from_dev(dY, Y0.size());
  expect_close(name, got.data(), want.data(), got.size(), 1e-4f);
  cudaFree(dW), cudaFree(dX), cudaFree(dY), cudaFree(dG), cudaFree(dP);
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
  // The types of GGUF's later presets: 32-blocks at IN = 96 (3 blocks: lanes idle) and 320 (two
  // rounds); super-blocks at IN = 256 (one: every lane one slice) and 768 (three rounds).
  run_case<IG_Q5_0, 320, 1, 4>("gemv q5_0 IN320 T1 bias", 29, 1, true, false, 10);
  run_case<IG_Q5_0, 96, 8, 4>("gemv q5_0 IN96 T6/8 acc", 13, 6, false, true, 11);
  run_case<IG_Q5_1, 320, 4, 4>("gemv q5_1 IN320 T4", 21, 4, false, false, 12);
  run_case<IG_IQ4_NL, 96, 2, 4>("gemv iq4_nl IN96 T2 bias", 17, 2, true, false, 13);
  run_case<IG_Q2_K, 256, 1, 4>("gemv q2_k IN256 T1", 37, 1, false, false, 14);
  run_case<IG_Q3_K, 768, 8, 4>("gemv q3_k IN768 T5/8 bias+acc", 13, 5, true, true, 15);
  run_case<IG_Q4_K, 256, 1, 4>("gemv q4_k IN256 T1", 37, 1, false, false, 16);
  run_case<IG_Q4_K, 768, 8, 2>("gemv q4_k IN768 T8 bias", 11, 8, true, false, 17);
  run_case<IG_Q5_K, 768, 2, 4>("gemv q5_k IN768 T2 acc", 19, 2, false, true, 18);
  run_case<IG_Q6_K, 256, 4, 4>("gemv q6_k IN256 T3/4", 23, 3, false, false, 19);
  run_case<IG_Q6_K, 768, 1, 4>("gemv q6_k IN768 T1 bias", 29, 1, true, false, 20);
  run_case<IG_IQ4_XS, 512, 8, 4>("gemv iq4_xs IN512 T7/8", 17, 7, false, false, 21);
  // The GPTQ/AWQ/FP8 repacked types: 32-blocks with a zero point or an f32 scale.
  run_case<IG_Q4_Z, 320, 1, 4>("gemv q4_z IN320 T1 bias", 29, 1, true, false, 40);
  run_case<IG_Q4_Z, 96, 8, 4>("gemv q4_z IN96 T7/8 acc", 13, 7, false, true, 41);
  run_case<IG_Q8_Z, 256, 4, 4>("gemv q8_z IN256 T3/4 bias+acc", 21, 3, true, true, 42);
  run_case<IG_Q8_Z, 320, 1, 2>("gemv q8_z IN320 T1", 19, 1, false, false, 43);
  run_case<IG_F8_B32, 320, 8, 4>("gemv f8_b32 IN320 T8 bias", 17, 8, true, false, 44);
  run_case<IG_F8_B32, 96, 2, 4>("gemv f8_b32 IN96 T2 acc", 23, 2, false, true, 45);
  gemm_case<IG_Q4_Z, 96>("gemm q4_z IN96 T70", 70, 70, 46);
  gemm_case<IG_Q8_Z, 64>("gemm q8_z IN64 T20", 37, 20, 47);
  gemm_case<IG_F8_B32, 128>("gemm f8_b32 IN128 T33", 65, 33, 48);
  perm_case<IG_Q4_Z, 320, 8>("gemv q4_z act-order IN320 T5/8 norm", 21, 5, false, 49);
  perm_case<IG_Q8_Z, 96, 1>("gemv q8_z act-order IN96 T1 norm", 13, 1, false, 50);
  perm_case<IG_Q4_Z, 128, 1>("gemm q4_z act-order IN128 T70 norm", 67, 70, true, 51);
  gemm_case<IG_Q4_0, 96>("gemm q4_0 IN96 T70", 70, 70, 30);
  gemm_case<IG_Q5_1, 64>("gemm q5_1 IN64 T20", 37, 20, 31);
  gemm_case<IG_Q3_K, 256>("gemm q3_k IN256 T70", 67, 70, 32);
  gemm_case<IG_Q4_K, 512>("gemm q4_k IN512 T33", 40, 33, 33);
  gemm_case<IG_Q6_K, 256>("gemm q6_k IN256 T17", 65, 17, 34);
  gemm_case<IG_IQ4_XS, 256>("gemm iq4_xs IN256 T9", 30, 9, 35);
  // MXFP4 (gpt-oss's experts): 17-byte blocks, so every row and block starts at any byte
  run_case<IG_MXFP4, 96, 2, 4>("gemv mxfp4 IN96 T2 bias", 17, 2, true, false, 60);
  run_case<IG_MXFP4, 320, 8, 4>("gemv mxfp4 IN320 T7/8 acc", 13, 7, false, true, 61);
  gemm_case<IG_MXFP4, 96>("gemm mxfp4 IN96 T70", 70, 70, 62);
  return finish();
}
