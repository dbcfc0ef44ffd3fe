// KNOWN-BAD: the upper half-warp returns early, then the lower half shuffles
// with a full mask that still names the exited lanes.
#include "common.h"

__global__ void half_warp_sum(const float* in, float* out) {
  const int lane = threadIdx.x & 31;
  if (lane >= 16) return;
  float v = in[threadIdx.x];
  for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);  // BUG: should be 0x0000ffff
  if (lane == 0) out[threadIdx.x / 32] = v;
}

int main() {
  std::vector<float> h = random_floats(32, 9);
  float *din, *dout;
  CHECK(cudaMalloc(&din, 32 * sizeof(float)));
  CHECK(cudaMalloc(&dout, sizeof(float)));
  CHECK(cudaMemcpy(din, h.data(), 32 * sizeof(float), cudaMemcpyHostToDevice));
  half_warp_sum<<<1, 32>>>(din, dout);
  CHECK(cudaDeviceSynchronize());
  std::printf("kernel completed\n");
  CHECK(cudaFree(din));
  CHECK(cudaFree(dout));
  return 0;
}
