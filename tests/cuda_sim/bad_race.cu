// KNOWN-BAD: reverses each block's slice through shared memory but forgets the
// __syncthreads() between the shared write and the read of another thread's
// element.  cudasim: race builds report the race; fuzzed schedules
// (CUDASIM_SEED) give different outputs.
#include "common.h"

__global__ void reverse_block(const float* in, float* out) {
  __shared__ float s[128];
  const int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  s[t] = in[i];
  // BUG: __syncthreads() missing here
  out[i] = s[blockDim.x - 1 - t];
}

// Same bug through dynamic shared memory.
__global__ void reverse_block_dyn(const float* in, float* out) {
  extern __shared__ float sd[];
  const int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  sd[t] = in[i];
  // BUG: __syncthreads() missing here
  out[i] = sd[blockDim.x - 1 - t];
}

// Warp-synchronous exchange within each warp, missing the __syncwarp() that
// the correct version (warp_reduce.cu: rotate_lanes) has.
__global__ void rotate_lanes_racy(const float* in, float* out) {
  __shared__ float s[128];
  const int t = threadIdx.x, lane = t & 31, i = blockIdx.x * blockDim.x + t;
  s[t] = in[i];
  // BUG: __syncwarp() missing here
  out[i] = s[(t & ~31) + ((lane + 1) & 31)];
}

int main(int argc, char** argv) {
  const int variant = argc > 1 ? std::atoi(argv[1]) : 0;
  const int n = 256;
  std::vector<float> h = random_floats(n, 5), got(n), want(n);
  float *din, *dout;
  CHECK(cudaMalloc(&din, n * sizeof(float)));
  CHECK(cudaMalloc(&dout, n * sizeof(float)));
  CHECK(cudaMemcpy(din, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  if (variant == 0) reverse_block<<<n / 128, 128>>>(din, dout);
  if (variant == 1) reverse_block_dyn<<<n / 128, 128, 128 * sizeof(float)>>>(din, dout);
  if (variant == 2) rotate_lanes_racy<<<n / 128, 128>>>(din, dout);
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(got.data(), dout, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; i++)
    want[i] = variant == 2 ? h[(i & ~31) + ((i + 1) & 31)] : h[(i / 128) * 128 + 127 - i % 128];
  expect_close("reverse", got.data(), want.data(), n, 0.0f);
  std::printf("CHECKSUM %llx\n", checksum(got.data(), n * sizeof(float)));
  CHECK(cudaFree(din));
  CHECK(cudaFree(dout));
  return finish();
}
