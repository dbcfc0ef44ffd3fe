// Block sum reduction: static and dynamic shared memory, __syncthreads tree,
// __syncthreads_count, a grid-stride load and a final atomicAdd.
#include "common.h"

template <int BLOCK>
__global__ void __launch_bounds__(BLOCK) reduce_static(const float* __restrict__ in, float* __restrict__ partial,
                                                       int n) {
  __shared__ float sdata[BLOCK];
  const int tid = threadIdx.x;
  float s = 0.0f;
  for (int i = blockIdx.x * BLOCK + tid; i < n; i += BLOCK * gridDim.x) s += __ldg(&in[i]);
  sdata[tid] = s;
  __syncthreads();
  for (int stride = BLOCK / 2; stride > 0; stride >>= 1) {
    if (tid < stride) sdata[tid] += sdata[tid + stride];
    __syncthreads();
  }
  if (tid == 0) partial[blockIdx.x] = sdata[0];
}

__global__ void reduce_dynamic(const float* in, float* total, int* positives, int n) {
  extern __shared__ float smem[];
  const int tid = threadIdx.x;
  const int i = blockIdx.x * blockDim.x + tid;
  const float v = i < n ? in[i] : 0.0f;
  smem[tid] = v;
  const int npos = __syncthreads_count(v > 0.0f);
  for (unsigned stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    if (tid < (int)stride) smem[tid] += smem[tid + stride];
    __syncthreads();
  }
  if (tid == 0) {
    atomicAdd(total, smem[0]);
    atomicAdd(positives, npos);
  }
}

int main() {
  const int n = 5000, block = 128, grid = 8;
  std::vector<float> h = random_floats(n, 1);
  float *d_in, *d_partial, *d_total;
  int* d_pos;
  CHECK(cudaMalloc(&d_in, n * sizeof(float)));
  CHECK(cudaMalloc(&d_partial, grid * sizeof(float)));
  CHECK(cudaMalloc(&d_total, sizeof(float)));
  CHECK(cudaMalloc(&d_pos, sizeof(int)));
  CHECK(cudaMemcpy(d_in, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemset(d_total, 0, sizeof(float)));
  CHECK(cudaMemset(d_pos, 0, sizeof(int)));

  reduce_static<block><<<grid, block>>>(d_in, d_partial, n);
  CHECK(cudaGetLastError());
  const int dgrid = (n + 255) / 256;
  reduce_dynamic<<<dgrid, 256, 256 * sizeof(float)>>>(d_in, d_total, d_pos, n);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());

  std::vector<float> partial(grid);
  float total;
  int pos;
  CHECK(cudaMemcpy(partial.data(), d_partial, grid * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&total, d_total, sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&pos, d_pos, sizeof(int), cudaMemcpyDeviceToHost));

  std::vector<float> want(grid, 0.0f);
  double all = 0;
  int wpos = 0;
  for (int i = 0; i < n; i++) {
    want[(i / block) % grid] += h[i];
    all += h[i];
    wpos += h[i] > 0.0f;
  }
  float wall = (float)all;
  expect_close("reduce_static", partial.data(), want.data(), grid, 1e-4f);
  expect_close("reduce_dynamic total", &total, &wall, 1, 1e-4f);
  expect_eq_int("syncthreads_count", &pos, &wpos, 1);
  std::printf("CHECKSUM %llx\n", checksum(partial.data(), grid * sizeof(float)));
  CHECK(cudaFree(d_in));
  CHECK(cudaFree(d_partial));
  CHECK(cudaFree(d_total));
  CHECK(cudaFree(d_pos));
  return finish();
}
