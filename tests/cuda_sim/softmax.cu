// Row softmax, one block per row: half-precision input read as __half2 pairs,
// float4 loads of a bias, max and sum reductions (warp shuffles + shared
// memory across warps), __expf / __fdividef, bf16 output.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common.h"

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Block-wide reduction through shared memory; blockDim.x is a multiple of 32.
template <bool IS_MAX>
__device__ float block_reduce(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = IS_MAX ? warp_max(v) : warp_sum(v);
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float r = lane < nw ? red[lane] : (IS_MAX ? -INFINITY : 0.0f);
  r = IS_MAX ? warp_max(r) : warp_sum(r);
  __syncthreads();  // red[] is reused by the next reduction
  return r;
}

// cols is a multiple of 4; x: [rows, cols] half; bias: [cols] float; y: bf16.
__global__ void softmax_rows(const __half* __restrict__ x, const float* __restrict__ bias,
                             __nv_bfloat16* __restrict__ y, int cols, float scale) {
  __shared__ float red[32];
  extern __shared__ float row_buf[];  // cols floats
  const __half2* x2 = reinterpret_cast<const __half2*>(x + (size_t)blockIdx.x * cols);
  const float4* b4 = reinterpret_cast<const float4*>(bias);
  float m = -INFINITY;
  for (int q = threadIdx.x; q < cols / 4; q += blockDim.x) {
    const float2 lo = __half22float2(x2[2 * q]), hi = __half22float2(x2[2 * q + 1]);
    const float4 b = __ldg(&b4[q]);
    const float4 v = make_float4(lo.x * scale + b.x, lo.y * scale + b.y, hi.x * scale + b.z, hi.y * scale + b.w);
    reinterpret_cast<float4*>(row_buf)[q] = v;
    m = fmaxf(m, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));
  }
  m = block_reduce<true>(m, red);
  float s = 0.0f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    const float e = __expf(row_buf[c] - m);
    row_buf[c] = e;
    s += e;
  }
  s = block_reduce<false>(s, red);
  const float inv = __fdividef(1.0f, s);
  for (int c = threadIdx.x; c < cols; c += blockDim.x)
    y[(size_t)blockIdx.x * cols + c] = __float2bfloat16(row_buf[c] * inv);
}

int main() {
  const int rows = 6, cols = 200;
  const float scale = 0.7f;
  std::vector<float> xf = random_floats((size_t)rows * cols, 11, -4.0f, 4.0f), bias = random_floats(cols, 12);
  std::vector<__half> xh(xf.size());
  for (size_t i = 0; i < xf.size(); i++) {
    xh[i] = __float2half(xf[i]);
    xf[i] = __half2float(xh[i]);  // the reference sees the rounded input
  }
  __half* dx;
  float* db;
  __nv_bfloat16* dy;
  CHECK(cudaMalloc(&dx, xh.size() * sizeof(__half)));
  CHECK(cudaMalloc(&db, cols * sizeof(float)));
  CHECK(cudaMalloc(&dy, xh.size() * sizeof(__nv_bfloat16)));
  CHECK(cudaMemcpy(dx, xh.data(), xh.size() * sizeof(__half), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, bias.data(), cols * sizeof(float), cudaMemcpyHostToDevice));
  softmax_rows<<<rows, 64, cols * sizeof(float)>>>(dx, db, dy, cols, scale);
  CHECK(cudaGetLastError());
  std::vector<__nv_bfloat16> yb(xh.size());
  CHECK(cudaMemcpy(yb.data(), dy, yb.size() * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost));
  std::vector<float> got(yb.size()), want(yb.size());
  for (size_t i = 0; i < yb.size(); i++) got[i] = __bfloat162float(yb[i]);
  for (int r = 0; r < rows; r++) {
    double m = -1e30, s = 0;
    for (int c = 0; c < cols; c++) m = std::fmax(m, (double)xf[(size_t)r * cols + c] * scale + bias[c]);
    for (int c = 0; c < cols; c++) s += std::exp((double)xf[(size_t)r * cols + c] * scale + bias[c] - m);
    for (int c = 0; c < cols; c++)
      want[(size_t)r * cols + c] = (float)(std::exp((double)xf[(size_t)r * cols + c] * scale + bias[c] - m) / s);
  }
  expect_close("softmax (bf16 out)", got.data(), want.data(), got.size(), 8e-3f);
  std::printf("CHECKSUM %llx\n", checksum(yb.data(), yb.size() * sizeof(__nv_bfloat16)));
  CHECK(cudaFree(dx));
  CHECK(cudaFree(db));
  CHECK(cudaFree(dy));
  return finish();
}
