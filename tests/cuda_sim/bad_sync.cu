// KNOWN-BAD: __syncthreads() in divergent code.
//   variant 0: only threads < 16 call it; the others run past and exit.
//   variant 1: the two halves of the block wait at two different barriers.
// cudasim reports both as barrier misuse.
#include "common.h"

__global__ void half_barrier(float* out) {
  __shared__ float s[64];
  s[threadIdx.x] = (float)threadIdx.x;
  if (threadIdx.x < 16) __syncthreads();  // BUG: not reached by all threads
  out[threadIdx.x] = s[63 - threadIdx.x];
}

__global__ void split_barrier(float* out) {
  __shared__ float s[64];
  s[threadIdx.x] = (float)threadIdx.x;
  if (threadIdx.x % 2 == 0) {
    __syncthreads();  // BUG: even threads wait here ...
    out[threadIdx.x] = s[63 - threadIdx.x];
  } else {
    __syncthreads();  // ... odd threads here
    out[threadIdx.x] = -s[63 - threadIdx.x];
  }
}

int main(int argc, char** argv) {
  const int variant = argc > 1 ? std::atoi(argv[1]) : 0;
  float* d;
  CHECK(cudaMalloc(&d, 64 * sizeof(float)));
  if (variant == 0)
    half_barrier<<<1, 64>>>(d);
  else
    split_barrier<<<1, 64>>>(d);
  CHECK(cudaDeviceSynchronize());
  std::printf("kernel completed\n");
  CHECK(cudaFree(d));
  return 0;
}
