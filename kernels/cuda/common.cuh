// common.cuh — shared device helpers of ingot's CUDA kernels: weight dtypes and GGUF block layouts, fp16/bf16 decode, vector loads, warp/block reductions, paged-KV addressing.
//
// Self-contained on purpose (no includes): every kernel header compiles with nvcc, with NVRTC
// (no system headers there) and with cudasim (g++). Only CUDA built-ins are used.
#pragma once

// Weight element types; the values are runtime/load/dtype.h's ingot_dtype.
enum {
  IG_F32 = 0, IG_F16 = 1, IG_BF16 = 2, IG_Q8_0 = 3, IG_Q4_0 = 4, IG_Q4_1 = 5, IG_Q5_0 = 6, IG_Q5_1 = 7,
  IG_Q2_K = 8, IG_Q3_K = 9, IG_Q4_K = 10, IG_Q5_K = 11, IG_Q6_K = 12, IG_IQ4_NL = 13, IG_IQ4_XS = 14,
  // 16: float8 checkpoint parts, never a weight; then what GPTQ/AWQ/FP8 linears are repacked into
  IG_I32 = 15, // an act-order weight's input order (int32), read by the matmuls, not a weight type
  IG_Q4_Z = 17, IG_Q8_Z = 18, IG_F8_B32 = 19,
  IG_MXFP4 = 20 // OCP microscaling FP4 (gpt-oss's experts in GGUF)
};

// GGUF blocks of 32 elements (byte-identical to runtime/load/dtype.h):
//   Q8_0 34 B: f16 d, int8 q[32]              x = d*q
//   Q4_0 18 B: f16 d, 16 B nibbles            x = d*(q-8)
//   Q4_1 20 B: f16 d, f16 m, 16 B nibbles     x = d*q + m
//   Q5_0 22 B: f16 d, u32 qh, 16 B nibbles    x = d*(q-16), bit 4 of element j = bit j of qh
//   Q5_1 24 B: f16 d, f16 m, u32 qh, nibbles   x = d*q + m
//   IQ4_NL 18 B: f16 d, 16 B nibbles          x = d*ig_iq4_value(q)
//   Q4_Z 20 B: f16 d, u16 z, 16 B nibbles     x = d*(q-z)   (GPTQ/AWQ 4-bit, z the zero point)
//   Q8_Z 36 B: f16 d, u16 z, u8 q[32]         x = d*(q-z)   (GPTQ 8-bit)
//   F8_B32 36 B: f32 d, E4M3 q[32]            x = d*ig_e4m3(q) (FP8 checkpoints)
//   MXFP4 17 B: E8M0 e, 16 B nibbles          x = 2^(e-128)*ig_mxfp4_value(q) (byte-aligned blocks)
// Nibbles: byte j holds element j (low nibble) and element j+16 (high nibble).
// Super-blocks of 256 (the K-quants, IQ4_XS), laid out as runtime/load/dtype.h describes:
//   Q2_K 84 B, Q3_K 110 B, Q4_K 144 B, Q5_K 176 B, Q6_K 210 B, IQ4_XS 136 B.
// Blocks are only 2-byte (Q8_0, Q4_0, Q5_0, IQ4_NL, Q3_K, Q6_K) or 4-byte (the others) aligned
// inside a row.
#define IG_QBLOCK 32
#define IG_KV_BLOCK 16 // tokens per paged-KV block (INGOT_KV_BLOCK)

template <int DT> struct ig_dtype_info;
template <> struct ig_dtype_info<IG_F32> { static constexpr int elems = 1, bytes = 4; };
template <> struct ig_dtype_info<IG_F16> { static constexpr int elems = 1, bytes = 2; };
template <> struct ig_dtype_info<IG_BF16> { static constexpr int elems = 1, bytes = 2; };
template <> struct ig_dtype_info<IG_Q8_0> { static constexpr int elems = 32, bytes = 34; };
template <> struct ig_dtype_info<IG_Q4_0> { static constexpr int elems = 32, bytes = 18; };
template <> struct ig_dtype_info<IG_Q4_1> { static constexpr int elems = 32, bytes = 20; };
template <> struct ig_dtype_info<IG_Q5_0> { static constexpr int elems = 32, bytes = 22; };
template <> struct ig_dtype_info<IG_Q5_1> { static constexpr int elems = 32, bytes = 24; };
template <> struct ig_dtype_info<IG_Q2_K> { static constexpr int elems = 256, bytes = 84; };
template <> struct ig_dtype_info<IG_Q3_K> { static constexpr int elems = 256, bytes = 110; };
template <> struct ig_dtype_info<IG_Q4_K> { static constexpr int elems = 256, bytes = 144; };
template <> struct ig_dtype_info<IG_Q5_K> { static constexpr int elems = 256, bytes = 176; };
template <> struct ig_dtype_info<IG_Q6_K> { static constexpr int elems = 256, bytes = 210; };
template <> struct ig_dtype_info<IG_IQ4_NL> { static constexpr int elems = 32, bytes = 18; };
template <> struct ig_dtype_info<IG_MXFP4> { static constexpr int elems = 32, bytes = 17; };
template <> struct ig_dtype_info<IG_IQ4_XS> { static constexpr int elems = 256, bytes = 136; };
template <> struct ig_dtype_info<IG_Q4_Z> { static constexpr int elems = 32, bytes = 20; };
template <> struct ig_dtype_info<IG_Q8_Z> { static constexpr int elems = 32, bytes = 36; };
template <> struct ig_dtype_info<IG_F8_B32> { static constexpr int elems = 32, bytes = 36; };
// The row-length multiple a kernel needs: 8 for float rows (one slice of 8), else the block.
template <int DT> __host__ __device__ constexpr int ig_row_multiple() {
  return ig_dtype_info<DT>::elems == 1 ? 8 : ig_dtype_info<DT>::elems;
}

// Bytes of a row of n elements of type DT (n a multiple of the block size).
template <int DT> __host__ __device__ constexpr long long ig_row_bytes(long long n) {
  return n / ig_dtype_info<DT>::elems * ig_dtype_info<DT>::bytes;
}

// 16-byte vectors for 128-bit loads (the simulator has no float4/uint4; these work everywhere).
struct alignas(16) ig_f4 { float x, y, z, w; };
struct alignas(8) ig_f2 { float x, y; };
struct alignas(16) ig_u4 { unsigned x, y, z, w; };

__device__ __forceinline__ float ig_neg_inf() { return __int_as_float(0xff800000); }

// IEEE binary16 -> binary32 (exact): one cvt on the GPU; bit rebuild elsewhere.
__device__ __forceinline__ float ig_f16_to_f32(unsigned short h) {
#if defined(__CUDA_ARCH__)
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
#else
  const unsigned sign = (unsigned)(h & 0x8000u) << 16, ex = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (ex == 0) return __uint_as_float(__float_as_uint((float)man * 5.9604644775390625e-8f) | sign);
  if (ex == 31) return __uint_as_float(sign | 0x7f800000u | (man << 13));
  return __uint_as_float(sign | ((ex + 112u) << 23) | (man << 13));
#endif
}

// What an attention row's unnormalized sums A are multiplied by, from the softmax's sum L and its
// maximum M: 1 / L, or with a sink logit (gpt-oss: one per query head, in the softmax's sum,
// weighing no value; sinks nullptr when the model has none) e^(M - M') / (L e^(M - M') + e^(sink - M')),
// M' = max(M, sink). Once per row, not per element.
__device__ __forceinline__ float ig_attn_scale(float L, float M, const float* __restrict__ sinks, int head) {
  if (!sinks) return 1.0f / L;
  const float sink = sinks[head], mx = fmaxf(M, sink), a = __expf(M - mx);
  return a / (L * a + __expf(sink - mx));
}
__device__ __forceinline__ float ig_bf16_to_f32(unsigned short h) { return __uint_as_float((unsigned)h << 16); }
// binary32 -> binary16 bits, round to nearest even (one cvt on the GPU; also the KV cache's f16 store).
__device__ __forceinline__ unsigned short ig_f32_to_f16(float f) {
#if defined(__CUDA_ARCH__)
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
#else
  const unsigned x = __float_as_uint(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return (unsigned short)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
  if (ax >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u); // rounds past 65504: infinity
  if (ax < 0x38800000u) {                                         // a subnormal half (or zero)
    if (ax < 0x33000000u) return (unsigned short)sign;
    const unsigned e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u, sh = 126u - e;
    unsigned r = m >> sh;
    const unsigned rem = m & ((1u << sh) - 1u), half = 1u << (sh - 1u);
    if (rem > half || (rem == half && (r & 1u))) r++;
    return (unsigned short)(sign | r);
  }
  unsigned r = (ax - 0x38000000u) >> 13;
  const unsigned rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) r++;
  return (unsigned short)(sign | r);
#endif
}

// Unaligned-safe small loads from a byte pointer (p must be aligned to the type's size).
__device__ __forceinline__ unsigned short ig_ld_u16(const unsigned char* p) {
  return *reinterpret_cast<const unsigned short*>(p);
}
__device__ __forceinline__ unsigned ig_ld_u32(const unsigned char* p) { return *reinterpret_cast<const unsigned*>(p); }
// 4 bytes at p, little-endian, when p is only ALIGN-byte aligned (2 or 4): blocks of 22, 110 or
// 210 bytes leave their fields 2-byte aligned, so those are read as two halves.
template <int ALIGN> __device__ __forceinline__ unsigned ig_ld4(const unsigned char* p) {
  if constexpr (ALIGN >= 4) return ig_ld_u32(p);
  else return (unsigned)ig_ld_u16(p) | ((unsigned)ig_ld_u16(p + 2) << 16);
}

// An E4M3 (float8_e4m3fn) code as f32, exactly: its bits moved into an f16 (sign to bit 15, the
// rest up by 7) are the value / 256, normals and subnormals alike. NaN codes are refused at load.
__device__ __forceinline__ float ig_e4m3_to_f32(unsigned q) {
  return ig_f16_to_f32((unsigned short)(((q & 0x80u) << 8) | ((q & 0x7fu) << 7))) * 256.0f;
}

// The value an IQ4 nibble selects (GGUF's kvalues_iq4nl: -127, -104, ..., 113), from two 64-bit
// constants in registers: no table in memory, so it compiles the same with nvcc, NVRTC and cudasim.
__device__ __forceinline__ float ig_iq4_value(unsigned q) {
  const unsigned long long lo = 0xF6EADDCFBFAD9881ull, hi = 0x7159453526190D01ull;
  return (float)(signed char)(((q < 8 ? lo : hi) >> (8 * (q & 7))) & 0xffu);
}

// The value an MXFP4 nibble selects: twice its E2M1 value (GGUF's kvalues_mxfp4: 0, 1, 2, 3, 4, 6, 8,
// 12 and their negatives), as ig_iq4_value.
__device__ __forceinline__ float ig_mxfp4_value(unsigned q) {
  const unsigned long long lo = 0x0C08060403020100ull, hi = 0xF4F8FAFCFDFEFF00ull;
  return (float)(signed char)(((q < 8 ? lo : hi) >> (8 * (q & 7))) & 0xffu);
}
// An MXFP4 block's E8M0 scale e halved, 2^(e-128), exactly (e 0 and 1: the subnormals).
__device__ __forceinline__ float ig_e8m0_half(unsigned e) {
  return __uint_as_float(e < 2 ? 0x00200000u << e : (e - 1) << 23);
}

// E consecutive floats at p into r (p aligned to 16 B when E % 4 == 0, 8 B when E % 2 == 0).
template <int E> __device__ __forceinline__ void ig_load_f(const float* p, float (&r)[E]) {
  if constexpr (E % 4 == 0) {
#pragma unroll
    for (int i = 0; i < E; i += 4) {
      const ig_f4 v = *reinterpret_cast<const ig_f4*>(p + i);
      r[i] = v.x; r[i + 1] = v.y; r[i + 2] = v.z; r[i + 3] = v.w;
    }
  } else if constexpr (E % 2 == 0) {
#pragma unroll
    for (int i = 0; i < E; i += 2) {
      const ig_f2 v = *reinterpret_cast<const ig_f2*>(p + i);
      r[i] = v.x; r[i + 1] = v.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < E; i++) r[i] = p[i];
  }
}

__device__ __forceinline__ float ig_warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float ig_warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the NT threads of a block (NT a multiple of 32, <= 1024); every thread gets the
// result. scratch: __shared__ float[32] of the caller. Contains two __syncthreads: all
// threads of the block must call it.
template <int NT> __device__ __forceinline__ float ig_block_sum(float v, float* scratch) {
  static_assert(NT % 32 == 0 && NT <= 1024, "block size");
  constexpr int NW = NT / 32;
  v = ig_warp_sum(v);
  if (NW == 1) return v;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float t = lane < NW ? scratch[lane] : 0.0f;
  t = ig_warp_sum(t);
  __syncthreads(); // scratch may be reused by the caller's next reduction
  return t;
}

// The KV cache's element (the generated source defines these before the kernel headers):
//   f32 (default), f16 bits with --kv-dtype f16 (IG_KV_HALF 1), or bytes of llama.cpp's Q8_0 blocks
//   with --kv-dtype q8_0 (IG_KV_Q8 1). f16: K and V are rounded to nearest even once, when stored,
//   and widened exactly when read. q8_0: each 32 values of a row share a scale s = max|x| / 127,
//   stored as f16 (2 bytes, then 32 int8 q = round-to-nearest-even(x * (1/s))), read back as
//   s * q: byte for byte what kernels/cpu/kc_ops.h's kc__kv_put stores (the same f32 divide,
//   reciprocal and product, each correctly rounded, and lrintf's rounding), so a CUDA build and a
//   CPU build given the same K and V hold the same rows. Every computation on the values stays f32.
#ifndef IG_KV_HALF
#define IG_KV_HALF 0
#endif
#ifndef IG_KV_Q8
#define IG_KV_Q8 0
#endif
#if IG_KV_Q8
typedef unsigned char ig_kv_t;
#elif IG_KV_HALF
typedef unsigned short ig_kv_t;
__device__ __forceinline__ ig_kv_t ig_kv_from(float x) { return ig_f32_to_f16(x); }
__device__ __forceinline__ float ig_kv_to(ig_kv_t x) { return ig_f16_to_f32(x); }
#else
typedef float ig_kv_t;
__device__ __forceinline__ ig_kv_t ig_kv_from(float x) { return x; }
__device__ __forceinline__ float ig_kv_to(ig_kv_t x) { return x; }
#endif

// Elements of ig_kv_t in a cached row of HD values (q8_0: HD / 32 blocks of 34 bytes).
template <int HD> __host__ __device__ constexpr long long ig_kv_row_elems() {
#if IG_KV_Q8
  static_assert(HD % 32 == 0, "q8_0 KV rows are whole blocks of 32 values (the generator refuses others)");
  return HD / 32 * 34;
#else
  return HD;
#endif
}

// Paged KV pool, per layer [kv_head][block][slot][row of HD values]; K for all layers, then V:
//   K(layer, block, h, slot) = kv + (((layer*KVH + h)*n_blocks + block)*IG_KV_BLOCK + slot) * ROW
//   V(...)                   = K(...) + n_layers*n_blocks*KVH*IG_KV_BLOCK * ROW
// with ROW = ig_kv_row_elems<HD>() elements. A sequence's position p lives in block
// block_tables[seq*bt_stride + p/IG_KV_BLOCK], slot p%IG_KV_BLOCK. ig_kv_row gives a row's first
// element; the values inside it are read with ig_kv_get / ig_load_kv and written with ig_kv_put_warp.
// Head-major, as the CPU pool (kc_ops.h's kc_kv_row_index, where the reason is): a head's rows in
// consecutive blocks are one run. The layout is the same on both backends, so the kernel tests
// compare pools built by kc_kv_store with what these kernels write and read.
template <int KVH, int HD>
__device__ __forceinline__ long long ig_kv_row(int layer, int n_blocks, int block, int h, int slot) {
  return ((((long long)layer * KVH + h) * n_blocks + block) * IG_KV_BLOCK + slot) * ig_kv_row_elems<HD>();
}
template <int KVH, int HD> __device__ __forceinline__ long long ig_kv_v_base(int n_layers, int n_blocks) {
  return (long long)n_layers * n_blocks * KVH * IG_KV_BLOCK * ig_kv_row_elems<HD>();
}

#if IG_KV_Q8
// The scale and the int8 at value d of a q8_0 row.
__device__ __forceinline__ float ig_kv_q8_scale(const ig_kv_t* row, int d) {
  return ig_f16_to_f32(ig_ld_u16(row + (d >> 5) * 34));
}
__device__ __forceinline__ float ig_kv_q8_value(const ig_kv_t* row, int d) {
  return (float)(signed char)row[(d >> 5) * 34 + 2 + (d & 31)];
}
#endif

// Value d of a cached row, as f32.
__device__ __forceinline__ float ig_kv_get(const ig_kv_t* row, int d) {
#if IG_KV_Q8
  return ig_kv_q8_scale(row, d) * ig_kv_q8_value(row, d);
#else
  return ig_kv_to(row[d]);
#endif
}

// Values d0 .. d0+E-1 of a cached row as floats (d0 a multiple of E; for f32 rows d0*4 aligned as
// ig_load_f needs): one vector load for f32, f16 widened one by one, q8_0 with one scale load when
// the E values share a block (32 % E == 0) and the int8 pairs read as 16-bit words when E is even.
template <int E> __device__ __forceinline__ void ig_load_kv(const ig_kv_t* row, int d0, float (&r)[E]) {
#if IG_KV_Q8
  if constexpr (32 % E == 0) {
    const ig_kv_t* blk = row + (d0 >> 5) * 34;
    const float s = ig_f16_to_f32(ig_ld_u16(blk));
    const ig_kv_t* qp = blk + 2 + (d0 & 31); // 2-byte aligned when E is even (d0 even)
    if constexpr (E % 2 == 0) {
#pragma unroll
      for (int i = 0; i < E; i += 2) {
        const unsigned w = ig_ld_u16(qp + i);
        r[i] = s * (float)(signed char)(w & 0xffu), r[i + 1] = s * (float)(signed char)(w >> 8);
      }
    } else {
#pragma unroll
      for (int i = 0; i < E; i++) r[i] = s * (float)(signed char)qp[i];
    }
  } else {
#pragma unroll
    for (int i = 0; i < E; i++) r[i] = ig_kv_get(row, d0 + i);
  }
#elif IG_KV_HALF
  const ig_kv_t* p = row + d0; // one 64-bit add, then constant offsets
#pragma unroll
  for (int i = 0; i < E; i++) r[i] = ig_f16_to_f32(p[i]);
#else
  ig_load_f<E>(row + d0, r);
#endif
}

// Stores x as value d of a cached row. Called by the 32 lanes of a warp together (converged, all
// active), lane l holding value d = 32*b + l of the same row: for q8_0 the warp is block b and
// quantizes it (max |x| by shuffles, lane 0 writes the f16 scale). f32 and f16 store per lane.
__device__ __forceinline__ void ig_kv_put_warp(ig_kv_t* row, int d, float x) {
#if IG_KV_Q8
  const float amax = ig_warp_max(fabsf(x));
  // kc__kv_put: d = amax / 127, id = d > 0 ? 1 / d : 0, q = lrintf(x * id); the _rn intrinsics
  // keep each step one IEEE round-to-nearest operation whatever the compiler flags
  const float s = __fdiv_rn(amax, 127.0f), inv = s > 0.0f ? __frcp_rn(s) : 0.0f;
  ig_kv_t* blk = row + (d >> 5) * 34;
  if ((d & 31) == 0) *reinterpret_cast<unsigned short*>(blk) = ig_f32_to_f16(s);
  blk[2 + (d & 31)] = (ig_kv_t)__float2int_rn(__fmul_rn(x, inv));
#else
  row[d] = ig_kv_from(x);
#endif
}

// True in exactly one block of the launch: the last to get here. Every block's global writes
// before the call are visible to that block afterwards (__threadfence before the count), which
// then runs a fused kernel's epilogue over the whole output. counter: a device word that is 0
// at launch; the last block resets it, so the next launch on the stream finds 0 again. Every
// thread of every block must call it (it contains __syncthreads).
__device__ __forceinline__ bool ig_last_block(unsigned* counter) {
  __shared__ int is_last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned blocks = gridDim.x * gridDim.y * gridDim.z;
    is_last = atomicAdd(counter, 1u) == blocks - 1;
    if (is_last) *counter = 0;
  }
  __syncthreads();
  return is_last != 0;
}
