// Warp-level reductions with shuffles (xor butterfly, shfl_down tree, sub-warp
// widths, shfl_sync broadcast) and votes (ballot/any/all), one warp per row.
#include "common.h"

__device__ __forceinline__ float warp_sum_xor(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max_down(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, o));
  return __shfl_sync(0xffffffffu, v, 0);  // broadcast lane 0's result
}

// rows x cols matrix; one warp per row; blockDim = (32, warps per block).
__global__ void row_stats(const float* __restrict__ x, int rows, int cols, float* sum, float* mx, int* npos,
                          int* flags) {
  const int lane = threadIdx.x;
  const int row = blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= rows) return;  // whole warps leave together: fine
  float s = 0.0f, m = -INFINITY;
  int pos = 0;
  // The ballot needs every lane of the mask: iterate over whole warp-widths
  // (a `c < cols` loop would leave lanes out of the last ballot -- cudasim
  // reports that as lanes executing different warp intrinsics).
  for (int base = 0; base < cols; base += 32) {
    const int c = base + lane;
    const bool in = c < cols;
    const float v = in ? x[row * cols + c] : 0.0f;
    if (in) {
      s += v;
      m = fmaxf(m, v);
    }
    pos += __popc(__ballot_sync(0xffffffffu, in && v > 0.0f));
  }
  s = warp_sum_xor(s);
  m = warp_max_down(m);
  const int any_big = __any_sync(0xffffffffu, m > 0.9f);
  const int all_small = __all_sync(0xffffffffu, s < 1000.0f);
  if (lane == 0) {
    sum[row] = s;
    mx[row] = m;
    npos[row] = pos;
    flags[row] = any_big * 2 + all_small;
  }
}

// Sums of 8-lane segments with width-8 shuffles: out[i/8] for each 8 elements.
__global__ void segment_sums(const int* in, int* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  int v = i < n ? in[i] : 0;
  for (int o = 4; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o, 8);
  const int first = __shfl_sync(0xffffffffu, v, 0, 8);  // each segment's lane 0
  __syncwarp();
  if ((threadIdx.x & 7) == 0 && i < n) out[i / 8] = first;
}

// Warp-synchronous exchange through shared memory, ordered by __syncwarp().
__global__ void rotate_lanes(const float* in, float* out) {
  __shared__ float s[128];
  const int t = threadIdx.x, lane = t & 31, i = blockIdx.x * blockDim.x + t;
  s[t] = in[i];
  __syncwarp();
  const float v = s[(t & ~31) + ((lane + 1) & 31)];
  __syncwarp();
  s[t] = 2.0f * v;  // reuse after the second __syncwarp: no race either
  __syncwarp();
  out[i] = s[(t & ~31) + ((lane + 31) & 31)];
}

int main() {
  const int rows = 37, cols = 100;
  std::vector<float> h = random_floats((size_t)rows * cols, 7);
  float *d_x, *d_sum, *d_max;
  int *d_pos, *d_flags;
  CHECK(cudaMalloc(&d_x, h.size() * sizeof(float)));
  CHECK(cudaMalloc(&d_sum, rows * sizeof(float)));
  CHECK(cudaMalloc(&d_max, rows * sizeof(float)));
  CHECK(cudaMalloc(&d_pos, rows * sizeof(int)));
  CHECK(cudaMalloc(&d_flags, rows * sizeof(int)));
  CHECK(cudaMemcpy(d_x, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
  dim3 block(32, 4);
  row_stats<<<(rows + 3) / 4, block>>>(d_x, rows, cols, d_sum, d_max, d_pos, d_flags);
  CHECK(cudaGetLastError());

  const int n = 200;
  std::vector<int> hi(n);
  for (int i = 0; i < n; i++) hi[i] = (i * 37) % 11 - 5;
  int *d_in, *d_out;
  CHECK(cudaMalloc(&d_in, n * sizeof(int)));
  CHECK(cudaMalloc(&d_out, n / 8 * sizeof(int)));
  CHECK(cudaMemcpy(d_in, hi.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  segment_sums<<<(n + 63) / 64, 64>>>(d_in, d_out, n);
  CHECK(cudaDeviceSynchronize());

  std::vector<float> sum(rows), mx(rows);
  std::vector<int> pos(rows), flags(rows), seg(n / 8);
  CHECK(cudaMemcpy(sum.data(), d_sum, rows * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(mx.data(), d_max, rows * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(pos.data(), d_pos, rows * sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(flags.data(), d_flags, rows * sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(seg.data(), d_out, n / 8 * sizeof(int), cudaMemcpyDeviceToHost));

  std::vector<float> wsum(rows, 0.0f), wmax(rows, -INFINITY);
  std::vector<int> wpos(rows, 0), wflags(rows), wseg(n / 8, 0);
  for (int r = 0; r < rows; r++) {
    for (int c = 0; c < cols; c++) {
      const float v = h[(size_t)r * cols + c];
      wsum[r] += v;
      wmax[r] = std::fmax(wmax[r], v);
      wpos[r] += v > 0.0f;
    }
    wflags[r] = (wmax[r] > 0.9f) * 2 + (wsum[r] < 1000.0f);
  }
  for (int i = 0; i < n; i++) wseg[i / 8] += hi[i];
  expect_close("warp sum (xor)", sum.data(), wsum.data(), rows, 1e-5f);
  expect_close("warp max (down + broadcast)", mx.data(), wmax.data(), rows, 0.0f);
  expect_eq_int("ballot popcount", pos.data(), wpos.data(), rows);
  expect_eq_int("any/all", flags.data(), wflags.data(), rows);
  expect_eq_int("width-8 segment sums", seg.data(), wseg.data(), n / 8);
  {
    std::vector<float> hr = random_floats(256, 21), gr(256), wr(256);
    float *dri, *dro;
    CHECK(cudaMalloc(&dri, 256 * sizeof(float)));
    CHECK(cudaMalloc(&dro, 256 * sizeof(float)));
    CHECK(cudaMemcpy(dri, hr.data(), 256 * sizeof(float), cudaMemcpyHostToDevice));
    rotate_lanes<<<2, 128>>>(dri, dro);
    CHECK(cudaMemcpy(gr.data(), dro, 256 * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < 256; i++) wr[i] = 2.0f * hr[i];
    expect_close("__syncwarp exchange", gr.data(), wr.data(), 256, 0.0f);
    CHECK(cudaFree(dri));
    CHECK(cudaFree(dro));
  }
  std::printf("CHECKSUM %llx\n", checksum(sum.data(), rows * sizeof(float)));
  CHECK(cudaFree(d_x));
  CHECK(cudaFree(d_sum));
  CHECK(cudaFree(d_max));
  CHECK(cudaFree(d_pos));
  CHECK(cudaFree(d_flags));
  CHECK(cudaFree(d_in));
  CHECK(cudaFree(d_out));
  return finish();
}
