// elementwise.cuh — row-wise elementwise ops on [T][N] f32 activations: silu(gate)*up, gelu_tanh(gate)*up, residual add, softcap, scale.
//
// Every kernel: template <int N> (row length), runtime T rows with their own leading dimensions
// (so a fused [T][2*FF] gate|up buffer is read in place: up = gate + FF, ld = 2*FF).
// Launch: grid = min(ceil(T*N / 256), a few waves), block = 256; grid-stride loop over T*N.
#pragma once
#include "common.cuh"

__device__ __forceinline__ float ig_silu(float x) { return x / (1.0f + expf(-x)); }
// gpt-oss's gated activation (kc_swiglu_row): the gate clamped to <= limit and up to [-limit, limit]
// (limit <= 0: not clamped), g sigmoid(alpha g) (up + up_offset)
__device__ __forceinline__ float ig_swiglu(float g, float u, float alpha, float limit, float up_offset) {
  if (limit > 0.0f) g = fminf(g, limit), u = fminf(fmaxf(u, -limit), limit);
  return g / (1.0f + expf(-alpha * g)) * (u + up_offset);
}
__device__ __forceinline__ float ig_gelu_tanh(float x) {
  const float k = 0.7978845608028654f; // sqrt(2/pi)
  return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

// GELU exactly, x/2 erfc(-x / sqrt 2) (transformers' "gelu"; kernels/cpu's kc_gelu)
__device__ __forceinline__ float ig_gelu(float x) { return 0.5f * x * erfcf(-x * 0.70710678118654752f); }

#define IG_ELEMENTWISE_LOOP(N, T)                                                                      \
  for (long long i_ = (long long)blockIdx.x * blockDim.x + threadIdx.x; i_ < (long long)(T) * (N);  \
       i_ += (long long)gridDim.x * blockDim.x)

// out[t][i] = silu(gate[t][i]) * up[t][i]
template <int N>
__global__ void silu_mul_kernel(const float* gate, int ldg, const float* up, int ldu, float* out, int ldo, int T) {
  IG_ELEMENTWISE_LOOP(N, T) {
    const int t = (int)(i_ / N), c = (int)(i_ % N);
    out[(long long)t * ldo + c] = ig_silu(gate[(long long)t * ldg + c]) * up[(long long)t * ldu + c];
  }
}

// out[t][i] = gelu_tanh(gate[t][i]) * up[t][i]
template <int N>
__global__ void gelu_tanh_mul_kernel(const float* gate, int ldg, const float* up, int ldu, float* out, int ldo,
                                     int T) {
  IG_ELEMENTWISE_LOOP(N, T) {
    const int t = (int)(i_ / N), c = (int)(i_ % N);
    out[(long long)t * ldo + c] = ig_gelu_tanh(gate[(long long)t * ldg + c]) * up[(long long)t * ldu + c];
  }
}

// y[t][i] += x[t][i] (residual)
template <int N> __global__ void add_kernel(float* y, int ldy, const float* x, int ldx, int T) {
  IG_ELEMENTWISE_LOOP(N, T) {
    const int t = (int)(i_ / N), c = (int)(i_ % N);
    y[(long long)t * ldy + c] += x[(long long)t * ldx + c];
  }
}

// x[t][i] = cap * tanh(x[t][i] / cap) (logit soft-capping), in place
template <int N> __global__ void softcap_kernel(float* x, int ldx, int T, float cap) {
  IG_ELEMENTWISE_LOOP(N, T) {
    const int t = (int)(i_ / N), c = (int)(i_ % N);
    float* p = x + (long long)t * ldx + c;
    *p = cap * tanhf(*p / cap);
  }
}

// x[t][i] *= s, in place
template <int N> __global__ void scale_kernel(float* x, int ldx, int T, float s) {
  IG_ELEMENTWISE_LOOP(N, T) {
    const int t = (int)(i_ / N), c = (int)(i_ % N);
    x[(long long)t * ldx + c] *= s;
  }
}

#undef IG_ELEMENTWISE_LOOP
