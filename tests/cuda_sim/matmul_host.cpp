// Simulation host driver for matmul.cu: calls the kernel through the direct
// cudasim API (no <<<>>> rewrite involved).
#include <cmath>
#include <cstdio>
#include <vector>

#include "common.h"

__global__ void matmul_tiled(const float* A, const float* B, float* C, int M, int N, int K);

int main() {
  const int M = 45, N = 38, K = 51;
  std::vector<float> a = random_floats((size_t)M * K, 3), b = random_floats((size_t)K * N, 4);
  float* dA = static_cast<float*>(cudasim::malloc(a.size() * sizeof(float)));
  float* dB = static_cast<float*>(cudasim::malloc(b.size() * sizeof(float)));
  float* dC = static_cast<float*>(cudasim::malloc((size_t)M * N * sizeof(float)));
  CHECK(cudaMemcpy(dA, a.data(), a.size() * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dB, b.data(), b.size() * sizeof(float), cudaMemcpyHostToDevice));
  dim3 block(16, 16), grid((N + 15) / 16, (M + 15) / 16);
  CHECK((cudaError_t)CUDASIM_LAUNCH(matmul_tiled, grid, block, 0, dA, dB, dC, M, N, K));
  std::vector<float> c((size_t)M * N), want((size_t)M * N);
  CHECK(cudaMemcpy(c.data(), dC, c.size() * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double s = 0;
      for (int k = 0; k < K; k++) s += (double)a[(size_t)i * K + k] * b[(size_t)k * N + j];
      want[(size_t)i * N + j] = (float)s;
    }
  expect_close("tiled matmul", c.data(), want.data(), c.size(), 1e-5f);
  std::printf("CHECKSUM %llx\n", checksum(c.data(), c.size() * sizeof(float)));
  cudasim::free(dA);
  cudasim::free(dB);
  cudasim::free(dC);
  return finish();
}
