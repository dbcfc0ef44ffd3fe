// t_pointwise.cu — embed, norm, elementwise and argmax kernels against kernels/cpu (kc_embed_row, kc_rmsnorm,
// kc_layernorm, kc_silu, kc_gelu_tanh, kc_gelu) and plain loops.
#include "harness.h"
#include "argmax.cuh"
#include "elementwise.cuh"
#include "embed.cuh"
#include "norm.cuh"

template <int DT, int N> static void embed_case(const char* name, int vocab, unsigned seed) {
  const std::vector<unsigned char> table = rnd_matrix(DT, vocab, N, seed);
  const std::vector<int> ids = {3, 0, vocab - 1, 3, 7};
  const int T = (int)ids.size(), ldo = N + 8;
  std::vector<float> want((size_t)T * ldo, 0.0f), out0 = want;
  for (int t = 0; t < T; t++) kc_embed_row((ingot_dtype)DT, table.data(), ids[t], N, want.data() + (size_t)t * ldo);
  unsigned char* dT = to_dev(table);
  int* dI = to_dev(ids);
  float* dO = to_dev(out0);
  embed_kernel<DT, N><<<T, 64>>>(dT, dI, dO, ldo);
  CHECK(cudaGetLastError());
  const std::vector<float> got = from_dev(dO, want.size());
  // exact under cudasim (same f32 products); 1e-6 leaves room for FMA contraction of d*q+m on a GPU
  expect_close(name, got.data(), want.data(), got.size(), 1e-6f);
  cudaFree(dT), cudaFree(dI), cudaFree(dO);
}

template <int N, int GS, int NT> static void rmsnorm_case(const char* name, int T, float offset, bool in_place) {
  const int ldx = N + 4;
  const std::vector<float> x = rnd((size_t)T * ldx, 11 + N, -2.0f, 2.0f), w = rnd(GS, 12 + GS);
  std::vector<float> want = x;
  for (int t = 0; t < T; t++)
    for (int g = 0; g < N / GS; g++)
      kc_rmsnorm(x.data() + (size_t)t * ldx + g * GS, w.data(), want.data() + (size_t)t * ldx + g * GS, GS, 1e-6f,
                 offset);
  float *dX = to_dev(x), *dW = to_dev(w), *dO = in_place ? dX : to_dev(x);
  rmsnorm_kernel<N, GS, NT><<<T, NT>>>(dX, ldx, dW, dO, ldx, 1e-6f, offset);
  CHECK(cudaGetLastError());
  const std::vector<float> got = from_dev(dO, x.size());
  // f32 tree sum of squares vs the reference's double sum: ~1e-6 relative
  expect_close(name, got.data(), want.data(), got.size(), 1e-5f);
  cudaFree(dX), cudaFree(dW);
  if (!in_place) cudaFree(dO);
}

// GS < N: groups (heads) of GS, the weight and bias one per group (PER_HEAD) or shared. The rows
// have a mean far from 0 (the second pass's reason). BIAS false: no bias (nullptr).
template <int N, int GS, int NT, bool PER_HEAD, bool BIAS> static void layernorm_case(const char* name, int T, bool in_place) {
  const int ldx = N + 4, WN = PER_HEAD ? N : GS;
  std::vector<float> x = rnd((size_t)T * ldx, 31 + N, -2.0f, 2.0f);
  for (float& v : x) v += 5.0f;
  const std::vector<float> w = rnd(WN, 32 + GS), b = rnd(WN, 33 + GS, -0.5f, 0.5f);
  std::vector<float> want = x;
  for (int t = 0; t < T; t++)
    for (int g = 0; g < N / GS; g++) {
      const int at = PER_HEAD ? g * GS : 0;
      kc_layernorm(x.data() + (size_t)t * ldx + g * GS, w.data() + at, BIAS ? b.data() + at : nullptr,
                   want.data() + (size_t)t * ldx + g * GS, GS, 1e-5f);
    }
  float *dX = to_dev(x), *dW = to_dev(w), *dB = BIAS ? to_dev(b) : nullptr, *dO = in_place ? dX : to_dev(x);
  layernorm_kernel<N, GS, NT, PER_HEAD><<<T, NT>>>(dX, ldx, dW, dB, dO, ldx, 1e-5f);
  CHECK(cudaGetLastError());
  const std::vector<float> got = from_dev(dO, x.size());
  // f32 tree sums vs the reference's double sums: ~1e-6 relative of values up to ~5
  expect_close(name, got.data(), want.data(), got.size(), 2e-5f);
  cudaFree(dX), cudaFree(dW);
  if (BIAS) cudaFree(dB);
  if (!in_place) cudaFree(dO);
}

// ig_gelu (exact, through erfc) against kc_gelu, in a one-thread-per-element loop
__global__ void gelu_kernel(const float* x, float* y, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = ig_gelu(x[i]);
}

static void gelu_case() {
  const int n = 1000;
  const std::vector<float> x = rnd(n, 41, -12.0f, 12.0f);
  std::vector<float> want(n);
  for (int i = 0; i < n; i++) want[i] = kc_gelu(x[i]);
  float *dX = to_dev(x), *dY = to_dev(std::vector<float>(n));
  gelu_kernel<<<2, 128>>>(dX, dY, n);
  CHECK(cudaGetLastError());
  const std::vector<float> got = from_dev(dY, n);
  // the same erfcf under cudasim; CUDA's erfcf is within 4 ulps
  expect_close("gelu (erf)", got.data(), want.data(), n, 1e-6f);
  cudaFree(dX), cudaFree(dY);
}

static void elementwise_cases() {
  constexpr int N = 100;
  const int T = 3, ld = 2 * N + 5; // fused gate|up rows
  const std::vector<float> gu = rnd((size_t)T * ld, 21, -4.0f, 4.0f);
  std::vector<float> w_silu((size_t)T * N), w_gelu((size_t)T * N);
  for (int t = 0; t < T; t++)
    for (int i = 0; i < N; i++) {
      w_silu[(size_t)t * N + i] = kc_silu(gu[(size_t)t * ld + i]) * gu[(size_t)t * ld + N + i];
      w_gelu[(size_t)t * N + i] = kc_gelu_tanh(gu[(size_t)t * ld + i]) * gu[(size_t)t * ld + N + i];
    }
  float* dGU = to_dev(gu);
  float* dO = to_dev(std::vector<float>((size_t)T * N));
  silu_mul_kernel<N><<<2, 64>>>(dGU, ld, dGU + N, ld, dO, N, T); // 2 blocks x 64 < T*N: grid-stride
  CHECK(cudaGetLastError());
  std::vector<float> got = from_dev(dO, (size_t)T * N);
  expect_close("silu_mul N100 T3", got.data(), w_silu.data(), got.size(), 1e-5f);
  gelu_tanh_mul_kernel<N><<<3, 128>>>(dGU, ld, dGU + N, ld, dO, N, T);
  CHECK(cudaGetLastError());
  got = from_dev(dO, (size_t)T * N);
  expect_close("gelu_tanh_mul N100 T3", got.data(), w_gelu.data(), got.size(), 1e-5f);

  // residual add, softcap, scale: in place on a padded [T][N] buffer
  const int ldy = N + 2;
  const std::vector<float> y0 = rnd((size_t)T * ldy, 22, -40.0f, 40.0f), x = rnd((size_t)T * N, 23);
  std::vector<float> want = y0;
  for (int t = 0; t < T; t++)
    for (int i = 0; i < N; i++) {
      float& v = want[(size_t)t * ldy + i];
      v += x[(size_t)t * N + i];
      v = 30.0f * tanhf(v / 30.0f);
      v *= 0.125f;
    }
  float *dY = to_dev(y0), *dXs = to_dev(x);
  add_kernel<N><<<4, 32>>>(dY, ldy, dXs, N, T);
  softcap_kernel<N><<<1, 256>>>(dY, ldy, T, 30.0f);
  scale_kernel<N><<<2, 96>>>(dY, ldy, T, 0.125f);
  CHECK(cudaGetLastError());
  got = from_dev(dY, y0.size());
  expect_close("add+softcap+scale N100 T3", got.data(), want.data(), got.size(), 1e-6f);
  cudaFree(dGU), cudaFree(dO), cudaFree(dY), cudaFree(dXs);
}

template <int V, int NT> static void argmax_case(const char* name, int rows) {
  const int ld = V + 1;
  std::vector<float> l = rnd((size_t)rows * ld, 31 + V, -10.0f, 10.0f);
  // ties: row 1 has its maximum twice (the lower index wins), row 2 at the last element
  if (rows > 1) l[ld + 5] = l[ld + V - 2] = 50.0f;
  if (rows > 2) l[2 * ld + V - 1] = 60.0f;
  std::vector<int> want(rows);
  for (int r = 0; r < rows; r++) {
    int bi = 0;
    for (int i = 1; i < V; i++)
      if (l[(size_t)r * ld + i] > l[(size_t)r * ld + bi]) bi = i;
    want[r] = bi;
  }
  float* dL = to_dev(l);
  int* dO = to_dev(std::vector<int>(rows, -1));
  argmax_kernel<V, NT><<<rows, NT>>>(dL, ld, dO);
  CHECK(cudaGetLastError());
  const std::vector<int> got = from_dev(dO, rows);
  expect_eq(name, got.data(), want.data(), rows);
  cudaFree(dL), cudaFree(dO);
}

int main() {
  embed_case<IG_F32, 72>("embed f32", 9, 1);
  embed_case<IG_F16, 72>("embed f16", 9, 2);
  embed_case<IG_BF16, 40>("embed bf16", 9, 3);
  embed_case<IG_Q8_0, 96>("embed q8_0", 9, 4);
  embed_case<IG_Q4_0, 64>("embed q4_0", 9, 5);
  embed_case<IG_Q4_1, 96>("embed q4_1", 9, 6);
  embed_case<IG_Q5_0, 64>("embed q5_0", 9, 21);
  embed_case<IG_Q5_1, 96>("embed q5_1", 9, 22);
  embed_case<IG_IQ4_NL, 64>("embed iq4_nl", 9, 23);
  embed_case<IG_Q2_K, 256>("embed q2_k", 9, 24);
  embed_case<IG_Q3_K, 512>("embed q3_k", 9, 25);
  embed_case<IG_Q4_K, 256>("embed q4_k", 9, 26);
  embed_case<IG_Q5_K, 512>("embed q5_k", 9, 27);
  embed_case<IG_Q6_K, 256>("embed q6_k", 9, 28);
  embed_case<IG_IQ4_XS, 256>("embed iq4_xs", 9, 29);
  rmsnorm_case<200, 200, 128>("rmsnorm N200 offset0", 3, 0.0f, false);
  rmsnorm_case<576, 576, 256>("rmsnorm N576 offset1 in-place", 2, 1.0f, true);
  rmsnorm_case<96, 96, 32>("rmsnorm N96 one warp", 2, 0.0f, false);
  rmsnorm_case<192, 64, 64>("rmsnorm per-head 3x64 (2 warps)", 3, 0.0f, true);
  rmsnorm_case<256, 32, 128>("rmsnorm per-head 8x32 offset1", 2, 1.0f, false);
  layernorm_case<200, 200, 128, false, true>("layernorm N200 bias", 3, false);
  layernorm_case<576, 576, 256, false, false>("layernorm N576 no bias in-place", 2, true);
  layernorm_case<96, 96, 32, false, true>("layernorm N96 one warp", 2, false);
  layernorm_case<192, 64, 64, false, true>("layernorm per-head 3x64 shared weight", 3, true);
  layernorm_case<256, 32, 128, true, true>("layernorm per-head 8x32, a weight and bias per head", 2, false);
  layernorm_case<72, 12, 64, true, false>("layernorm per-head 6x12, a weight per head, no bias", 2, false);
  gelu_case();
  elementwise_cases();
  argmax_case<1000, 256>("argmax V1000", 3);
  argmax_case<50, 64>("argmax V50 (idle threads)", 3);
  return finish();
}
