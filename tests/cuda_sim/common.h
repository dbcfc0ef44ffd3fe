// Host-side helpers shared by the cudasim test programs.  Plain CUDA runtime
// API: these files compile with nvcc as well as under the simulator.
#pragma once
#include <cuda_runtime.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CHECK(x)                                                                     \
  do {                                                                               \
    cudaError_t err_ = (x);                                                          \
    if (err_ != cudaSuccess) {                                                       \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,                \
                   cudaGetErrorString(err_));                                        \
      std::exit(2);                                                                  \
    }                                                                                \
  } while (0)

// Deterministic pseudo-random inputs.
static inline std::vector<float> random_floats(size_t n, unsigned seed, float lo = -1.0f, float hi = 1.0f) {
  std::vector<float> v(n);
  unsigned s = seed * 2654435761u + 1u;
  for (size_t i = 0; i < n; i++) {
    s = s * 1664525u + 1013904223u;
    v[i] = lo + (hi - lo) * (float)(s >> 8) / 16777216.0f;
  }
  return v;
}

// FNV-1a over the bytes of a result: printed so that runs under different
// schedules can be compared.
static inline unsigned long long checksum(const void* p, size_t n) {
  const unsigned char* b = static_cast<const unsigned char*>(p);
  unsigned long long h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

static int g_failures = 0;

static inline void expect_close(const char* what, const float* got, const float* want, size_t n, float tol) {
  for (size_t i = 0; i < n; i++) {
    float d = std::fabs(got[i] - want[i]);
    if (!(d <= tol * (1.0f + std::fabs(want[i])))) {
      std::printf("MISMATCH %s[%zu]: got %.8g want %.8g\n", what, i, (double)got[i], (double)want[i]);
      g_failures++;
      return;
    }
  }
  std::printf("ok %s (%zu values)\n", what, n);
}

static inline void expect_eq_int(const char* what, const int* got, const int* want, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (got[i] != want[i]) {
      std::printf("MISMATCH %s[%zu]: got %d want %d\n", what, i, got[i], want[i]);
      g_failures++;
      return;
    }
  std::printf("ok %s (%zu values)\n", what, n);
}

static inline int finish() {
  std::printf(g_failures ? "FAILED (%d)\n" : "ALL OK\n", g_failures);
  return g_failures ? 1 : 0;
}
