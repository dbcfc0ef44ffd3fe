// Inclusive prefix sum per block: warp scans with __shfl_up_sync, warp totals
// through shared memory, a second warp scan, then block offsets (3 launches).
#include "common.h"

__device__ __forceinline__ int warp_inclusive_scan(int v) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int t = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += t;
  }
  return v;
}

__global__ void block_scan(const int* in, int* out, int* block_totals, int n) {
  __shared__ int warp_totals[32];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int v = i < n ? in[i] : 0;
  v = warp_inclusive_scan(v);
  if (lane == 31) warp_totals[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int nw = blockDim.x / 32;
    int t = lane < nw ? warp_totals[lane] : 0;
    t = warp_inclusive_scan(t);
    if (lane < nw) warp_totals[lane] = t;
  }
  __syncthreads();
  if (warp > 0) v += warp_totals[warp - 1];
  if (i < n) out[i] = v;
  if (threadIdx.x == blockDim.x - 1) block_totals[blockIdx.x] = v;
}

__global__ void scan_totals(int* totals, int nblocks) {  // one warp, nblocks <= 32
  const int lane = threadIdx.x;
  int v = lane < nblocks ? totals[lane] : 0;
  v = warp_inclusive_scan(v);
  if (lane < nblocks) totals[lane] = v;
}

__global__ void add_offsets(int* out, const int* totals, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (blockIdx.x > 0 && i < n) out[i] += totals[blockIdx.x - 1];
}

int main() {
  const int n = 3000, block = 256, grid = (n + block - 1) / block;
  std::vector<int> h(n);
  for (int i = 0; i < n; i++) h[i] = (i * 7919) % 13 - 6;
  int *d_in, *d_out, *d_tot;
  CHECK(cudaMalloc(&d_in, n * sizeof(int)));
  CHECK(cudaMalloc(&d_out, n * sizeof(int)));
  CHECK(cudaMalloc(&d_tot, grid * sizeof(int)));
  CHECK(cudaMemcpy(d_in, h.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  block_scan<<<grid, block>>>(d_in, d_out, d_tot, n);
  scan_totals<<<1, 32>>>(d_tot, grid);
  add_offsets<<<grid, block>>>(d_out, d_tot, n);
  CHECK(cudaDeviceSynchronize());
  std::vector<int> got(n), want(n);
  CHECK(cudaMemcpy(got.data(), d_out, n * sizeof(int), cudaMemcpyDeviceToHost));
  int acc = 0;
  for (int i = 0; i < n; i++) want[i] = acc += h[i];
  expect_eq_int("inclusive scan", got.data(), want.data(), n);
  std::printf("CHECKSUM %llx\n", checksum(got.data(), n * sizeof(int)));
  CHECK(cudaFree(d_in));
  CHECK(cudaFree(d_out));
  CHECK(cudaFree(d_tot));
  return finish();
}
