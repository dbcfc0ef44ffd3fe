// KNOWN-BAD: off-by-one bound check writes out[n], one element past the
// buffer.  cudasim: the guard zone is found damaged after the launch (plain),
// the faulting store is reported (race build), ASan reports a
// heap-buffer-overflow (asan build).
#include "common.h"

__global__ void scale(const float* in, float* out, int n, float a) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i <= n) out[i] = a * (i < n ? in[i] : 1.0f);  // BUG: i <= n
}

int main() {
  const int n = 100;
  std::vector<float> h = random_floats(n, 2);
  float *din, *dout;
  CHECK(cudaMalloc(&din, n * sizeof(float)));
  CHECK(cudaMalloc(&dout, n * sizeof(float)));
  CHECK(cudaMemcpy(din, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  scale<<<(n + 63) / 64, 64>>>(din, dout, n, 2.0f);
  CHECK(cudaDeviceSynchronize());
  std::printf("kernel completed\n");
  CHECK(cudaFree(din));
  CHECK(cudaFree(dout));
  return 0;
}
