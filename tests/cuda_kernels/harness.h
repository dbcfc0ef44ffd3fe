// harness.h — host helpers of the CUDA kernel tests (tests/cuda_kernels/t_*.cu): inputs, GGUF-block
// builders, device buffers, comparison with the CPU kernels of kernels/cpu/, checksums.
// The programs are built by cudasim (kernels/cudasim/cudasim_build.py) with -I kernels/cpu -I runtime.
#pragma once
#include <cuda_runtime.h>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

extern "C" {
#include "dtype.h" // runtime/load/dtype.c is linked in, compiled as C (the scalar reference of every type)
}
extern "C++" {
#include "kc_matmul.h"
#include "kc_kquant.h"
#include "kc_ops.h"
}

#define CHECK(x)                                                                                   \
  do {                                                                                             \
    cudaError_t err_ = (x);                                                                        \
    if (err_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(err_));   \
      std::exit(2);                                                                                \
    }                                                                                              \
  } while (0)

static int g_failures = 0, g_checks = 0;
static unsigned long long g_hash = 1469598103934665603ull; // FNV-1a over every result checked

static inline void hash_bytes(const void* p, size_t n) {
  const unsigned char* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; i++) g_hash = (g_hash ^ b[i]) * 1099511628211ull;
}

static inline std::vector<float> rnd(size_t n, unsigned seed, float lo = -1.0f, float hi = 1.0f) {
  std::vector<float> v(n);
  unsigned s = seed * 2654435761u + 12345u;
  for (size_t i = 0; i < n; i++) {
    s = s * 1664525u + 1013904223u;
    v[i] = lo + (hi - lo) * (float)(s >> 8) / 16777216.0f;
  }
  return v;
}
static inline unsigned rnd_u32(unsigned& s) { s = s * 1664525u + 1013904223u; return s >> 8; }

// f32 -> IEEE half, round to nearest even (normal range; the tests use moderate values).
static inline uint16_t f2h(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const int e = (int)((x >> 23) & 255) - 127 + 15;
  const uint32_t m = x & 0x7fffffu;
  if ((x & 0x7fffffffu) == 0) return (uint16_t)sign;
  if (e < 1 || e > 30) { std::fprintf(stderr, "f2h: %g out of the normal half range\n", f); std::exit(2); }
  uint32_t h = ((uint32_t)e << 10) | (m >> 13);
  const uint32_t rem = m & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
  return (uint16_t)(sign | h);
}
static inline uint16_t f2bf(float f) { // round to nearest even
  uint32_t x;
  std::memcpy(&x, &f, 4);
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// A [rows][n] matrix of a type added after Q4_1 (Q5_0 .. IQ4_XS, MXFP4): random bytes everywhere (every
// code, bit and 6-bit scale pattern occurs), then the f16 fields set to small positive scales so that
// the values stay moderate.
static inline std::vector<unsigned char> rnd_kblocks(int dt, int rows, int n, unsigned seed) {
  struct layout { int elems, bytes, f16[2]; };
  layout L{};
  switch (dt) {
    case INGOT_Q5_0: L = {32, 22, {0, -1}}; break;
    case INGOT_Q5_1: L = {32, 24, {0, 2}}; break;
    case INGOT_IQ4_NL: L = {32, 18, {0, -1}}; break;
    case INGOT_Q2_K: L = {256, 84, {80, 82}}; break;
    case INGOT_Q3_K: L = {256, 110, {108, -1}}; break;
    case INGOT_Q4_K: L = {256, 144, {0, 2}}; break;
    case INGOT_Q5_K: L = {256, 176, {0, 2}}; break;
    case INGOT_Q6_K: L = {256, 210, {208, -1}}; break;
    case INGOT_IQ4_XS: L = {256, 136, {0, -1}}; break;
    case INGOT_MXFP4: L = {32, 17, {-1, -1}}; break;
    default: std::fprintf(stderr, "rnd_matrix: dtype %d\n", dt); std::exit(2);
  }
  std::vector<unsigned char> m((size_t)rows * (n / L.elems) * L.bytes);
  unsigned s = seed * 747796405u + 7u;
  for (auto& b : m) b = (unsigned char)rnd_u32(s);
  if (dt == INGOT_MXFP4) // its E8M0 scale byte: 2^-13 .. 2^-4 (e 115 .. 124), as moderate as the f16 ones
    for (size_t off = 0; off < m.size(); off += L.bytes) m[off] = (unsigned char)(115 + rnd_u32(s) % 10);
  for (size_t off = 0; off < m.size(); off += L.bytes)
    for (int f : L.f16)
      if (f >= 0) {
        const uint16_t h = f2h((float)(1 + rnd_u32(s) % 64) / (L.elems == 32 ? 1024.0f : 8192.0f));
        std::memcpy(&m[off + f], &h, 2);
      }
  return m;
}

// A [rows][n] matrix of a type GPTQ/AWQ/FP8 checkpoints are repacked into: random codes, small
// positive f16 scales and zero points over their whole range (Q4_Z, Q8_Z); f32 scales of either
// sign over 2^-12..2^-4 and every E4M3 code but the two NaNs (F8_B32).
static inline std::vector<unsigned char> rnd_zblocks(int dt, int rows, int n, unsigned seed) {
  const size_t bytes = dt == INGOT_Q4_Z ? sizeof(block_q4_z) : sizeof(block_q8_z);
  std::vector<unsigned char> m((size_t)rows * (n / 32) * bytes);
  unsigned s = seed * 747796405u + 11u;
  for (auto& b : m) b = (unsigned char)rnd_u32(s);
  for (size_t off = 0; off < m.size(); off += bytes) {
    if (dt == INGOT_F8_B32) {
      const float d = std::ldexp(1.0f + (float)(rnd_u32(s) % 1024) / 1024.0f, -4 - (int)(rnd_u32(s) % 9)) *
                      (rnd_u32(s) & 1 ? -1.0f : 1.0f);
      std::memcpy(&m[off], &d, 4);
      for (size_t k = 4; k < bytes; k++)
        if ((m[off + k] & 0x7f) == 0x7f) m[off + k] ^= 1;
      continue;
    }
    const uint16_t d = f2h((float)(1 + rnd_u32(s) % 64) / 1024.0f);
    const uint16_t z = (uint16_t)(rnd_u32(s) % (dt == INGOT_Q4_Z ? 17 : 257));
    std::memcpy(&m[off], &d, 2);
    std::memcpy(&m[off + 2], &z, 2);
  }
  return m;
}

// A [rows][n] matrix of dtype dt (ingot_dtype values) with random contents, as raw bytes.
static inline std::vector<unsigned char> rnd_matrix(int dt, int rows, int n, unsigned seed) {
  size_t rb = 0;
  if (dt == INGOT_Q4_Z || dt == INGOT_Q8_Z || dt == INGOT_F8_B32) return rnd_zblocks(dt, rows, n, seed);
  switch (dt) {
    case INGOT_F32: rb = 4u * n; break;
    case INGOT_F16: case INGOT_BF16: rb = 2u * n; break;
    case INGOT_Q8_0: rb = n / 32 * sizeof(block_q8_0); break;
    case INGOT_Q4_0: rb = n / 32 * sizeof(block_q4_0); break;
    case INGOT_Q4_1: rb = n / 32 * sizeof(block_q4_1); break;
    default: return rnd_kblocks(dt, rows, n, seed);
  }
  std::vector<unsigned char> m(rb * rows);
  unsigned s = seed * 747796405u + 1u;
  const std::vector<float> f = rnd((size_t)rows * n, seed);
  for (int r = 0; r < rows; r++) {
    unsigned char* row = m.data() + rb * r;
    if (dt == INGOT_F32) std::memcpy(row, f.data() + (size_t)r * n, rb);
    else if (dt == INGOT_F16 || dt == INGOT_BF16)
      for (int k = 0; k < n; k++) {
        const uint16_t h = dt == INGOT_F16 ? f2h(f[(size_t)r * n + k]) : f2bf(f[(size_t)r * n + k]);
        std::memcpy(row + 2 * k, &h, 2);
      }
    else
      for (int b = 0; b < n / 32; b++) {
        const uint16_t d = f2h((float)(1 + rnd_u32(s) % 64) / 1024.0f), mn = f2h(-(float)(rnd_u32(s) % 64) / 256.0f);
        if (dt == INGOT_Q8_0) {
          block_q8_0 q;
          q.d = d;
          for (int k = 0; k < 32; k++) q.qs[k] = (int8_t)((int)(rnd_u32(s) % 255) - 127);
          std::memcpy(row + b * sizeof q, &q, sizeof q);
        } else if (dt == INGOT_Q4_0) {
          block_q4_0 q;
          q.d = d;
          for (int k = 0; k < 16; k++) q.qs[k] = (uint8_t)rnd_u32(s);
          std::memcpy(row + b * sizeof q, &q, sizeof q);
        } else {
          block_q4_1 q;
          q.d = d;
          q.m = mn;
          for (int k = 0; k < 16; k++) q.qs[k] = (uint8_t)rnd_u32(s);
          std::memcpy(row + b * sizeof q, &q, sizeof q);
        }
      }
  }
  return m;
}

// Device copy of a host vector (freed at exit: the tests are short programs).
template <class T> static inline T* to_dev(const std::vector<T>& h) {
  T* d = nullptr;
  CHECK(cudaMalloc(&d, h.size() * sizeof(T) + 1)); // +1: never a zero-sized allocation
  if (!h.empty()) CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}
template <class T> static inline std::vector<T> from_dev(const T* d, size_t n) {
  std::vector<T> h(n);
  CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

// |got - want| <= tol * (1 + |want|) elementwise; reports the worst element.
static inline void expect_close(const char* what, const float* got, const float* want, size_t n, float tol) {
  g_checks++;
  hash_bytes(got, n * sizeof(float));
  double worst = 0.0;
  size_t wi = 0;
  for (size_t i = 0; i < n; i++) {
    const double d = std::fabs((double)got[i] - want[i]) / (1.0 + std::fabs(want[i]));
    if (!(d <= worst)) worst = d, wi = i; // NaN counts as worst
  }
  if (!(worst <= tol)) {
    std::printf("MISMATCH %s[%zu]: got %.9g want %.9g (rel err %.3g > %.1g)\n", what, wi, (double)got[wi],
                (double)want[wi], worst, (double)tol);
    g_failures++;
  } else {
    std::printf("ok %s (%zu values, max rel err %.2g)\n", what, n, worst);
  }
}
static inline void expect_eq(const char* what, const int* got, const int* want, size_t n) {
  g_checks++;
  hash_bytes(got, n * sizeof(int));
  for (size_t i = 0; i < n; i++)
    if (got[i] != want[i]) {
      std::printf("MISMATCH %s[%zu]: got %d want %d\n", what, i, got[i], want[i]);
      g_failures++;
      return;
    }
  std::printf("ok %s (%zu values)\n", what, n);
}

// got and want the same bytes (the KV pool's stored rows); reports the first difference.
static inline void expect_same_bytes(const char* what, const void* got, const void* want, size_t n) {
  g_checks++;
  hash_bytes(got, n);
  const unsigned char *g = static_cast<const unsigned char*>(got), *w = static_cast<const unsigned char*>(want);
  for (size_t i = 0; i < n; i++)
    if (g[i] != w[i]) {
      std::printf("MISMATCH %s: byte %zu got 0x%02x want 0x%02x\n", what, i, g[i], w[i]);
      g_failures++;
      return;
    }
  std::printf("ok %s (%zu bytes identical)\n", what, n);
}

// A pool of `rows` cached rows of hd values filled with the CPU store of random values in
// [-1, 1): rows of kc_kv_t (f32: the values; q8_0: kc__kv_put's blocks).
static inline std::vector<kc_kv_t> kv_pool(size_t rows, int hd, unsigned seed) {
  const std::vector<float> x = rnd(rows * hd, seed);
  std::vector<kc_kv_t> pool(rows * KC_KV_ROW(hd));
  for (size_t r = 0; r < rows; r++) kc__kv_put(pool.data() + r * KC_KV_ROW(hd), x.data() + r * hd, hd);
  return pool;
}

static inline int finish() {
  CHECK(cudaDeviceSynchronize());
  std::printf("CHECKSUM %016llx\n", g_hash);
  std::printf("%s: %d checks, %d failures\n", g_failures ? "FAIL" : "PASS", g_checks, g_failures);
  return g_failures ? 1 : 0;
}
