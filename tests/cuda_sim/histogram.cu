// Histogram with per-block shared bins (atomicAdd on shared and global), plus
// atomicMax / atomicMin / atomicCAS / atomicExch / float atomicAdd.
#include "common.h"

#define NBINS 64

__global__ void histogram(const unsigned char* data, int n, unsigned* bins) {
  __shared__ unsigned local[NBINS];
  for (int b = threadIdx.x; b < NBINS; b += blockDim.x) local[b] = 0;
  __syncthreads();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
    atomicAdd(&local[data[i] % NBINS], 1u);
  __syncthreads();
  for (int b = threadIdx.x; b < NBINS; b += blockDim.x)
    if (local[b]) atomicAdd(&bins[b], local[b]);
}

__global__ void misc_atomics(const int* v, int n, int* mx, int* mn, float* fsum, int* first_neg, int* last) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  atomicMax(mx, v[i]);
  atomicMin(mn, v[i]);
  atomicAdd(fsum, 0.5f * (float)v[i]);
  if (v[i] < 0) atomicCAS(first_neg, -1, 0);  // flag: set once
  atomicExch(last, 1);
}

int main() {
  const int n = 4000;
  std::vector<unsigned char> h(n);
  for (int i = 0; i < n; i++) h[i] = (unsigned char)((i * 131 + (i >> 3)) & 0xff);
  unsigned char* dd;
  unsigned* db;
  CHECK(cudaMalloc(&dd, n));
  CHECK(cudaMalloc(&db, NBINS * sizeof(unsigned)));
  CHECK(cudaMemcpy(dd, h.data(), n, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(db, 0, NBINS * sizeof(unsigned)));
  histogram<<<6, 128>>>(dd, n, db);
  std::vector<unsigned> bins(NBINS);
  CHECK(cudaMemcpy(bins.data(), db, NBINS * sizeof(unsigned), cudaMemcpyDeviceToHost));
  std::vector<int> got(NBINS), want(NBINS, 0);
  for (int i = 0; i < n; i++) want[h[i] % NBINS]++;
  for (int b = 0; b < NBINS; b++) got[b] = (int)bins[b];
  expect_eq_int("histogram", got.data(), want.data(), NBINS);

  const int m = 300;
  std::vector<int> v(m);
  for (int i = 0; i < m; i++) v[i] = (i * 7717) % 1001 - 400;
  int *dv, *dmx, *dmn, *dneg, *dlast;
  float* dfs;
  CHECK(cudaMalloc(&dv, m * sizeof(int)));
  CHECK(cudaMalloc(&dmx, sizeof(int)));
  CHECK(cudaMalloc(&dmn, sizeof(int)));
  CHECK(cudaMalloc(&dneg, sizeof(int)));
  CHECK(cudaMalloc(&dlast, sizeof(int)));
  CHECK(cudaMalloc(&dfs, sizeof(float)));
  const int init[4] = {-1000000, 1000000, -1, 0};
  CHECK(cudaMemcpy(dv, v.data(), m * sizeof(int), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dmx, &init[0], sizeof(int), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dmn, &init[1], sizeof(int), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dneg, &init[2], sizeof(int), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dlast, &init[3], sizeof(int), cudaMemcpyHostToDevice));
  CHECK(cudaMemset(dfs, 0, sizeof(float)));
  misc_atomics<<<(m + 127) / 128, 128>>>(dv, m, dmx, dmn, dfs, dneg, dlast);
  int r[4];
  float fs;
  CHECK(cudaMemcpy(&r[0], dmx, sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&r[1], dmn, sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&r[2], dneg, sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&r[3], dlast, sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&fs, dfs, sizeof(float), cudaMemcpyDeviceToHost));
  int w[4] = {-1000000, 1000000, -1, 1};
  double ws = 0;
  for (int i = 0; i < m; i++) {
    w[0] = std::max(w[0], v[i]);
    w[1] = std::min(w[1], v[i]);
    if (v[i] < 0) w[2] = 0;
    ws += 0.5 * v[i];
  }
  float wsf = (float)ws;
  expect_eq_int("atomicMax/Min/CAS/Exch", r, w, 4);
  expect_close("float atomicAdd", &fs, &wsf, 1, 1e-5f);
  std::printf("CHECKSUM %llx\n", checksum(bins.data(), NBINS * sizeof(unsigned)));
  CHECK(cudaFree(dd));
  CHECK(cudaFree(db));
  CHECK(cudaFree(dv));
  CHECK(cudaFree(dmx));
  CHECK(cudaFree(dmn));
  CHECK(cudaFree(dneg));
  CHECK(cudaFree(dlast));
  CHECK(cudaFree(dfs));
  return finish();
}
