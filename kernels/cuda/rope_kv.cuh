// rope_kv.cuh — RoPE on one token's q (in place) and k, and the store of rotated k and of v into the paged KV pool.
//
// rope_kv_kernel<HEADS, KVH, HD, ROT, ADJACENT>
//   grid = T (one block per token), block = 128 (any multiple of 32).
//   q  [T] rows at q + t*ldq: HEADS heads x HD, rotated in place (one thread per pair: no races).
//   k, v [T] rows at k + t*ldk, v + t*ldv: KVH heads x HD, read only (they may be views into a fused
//      qkv buffer). Rotated k and v go to the pool at the token's position: one thread per element
//      (a k element reads its pair partner from the unrotated input, so no thread waits on another).
//   cos_sin [max_ctx][ROT/2][2] (cos, sin); the first ROT dims of each head rotate, the rest pass.
//   ADJACENT = true: pairs (2i, 2i+1) (GGUF layout); false: pairs (i, i + ROT/2) (Hugging Face).
//   pos[t], tok_seq[t]: the token's position and sequence; block_tables [n_seqs][bt_stride].
//   kv: pool of n_layers x n_blocks blocks of ig_kv_t (f32, f16 or q8_0; layout in common.cuh), written for
//      `layer`. A warp stores 32 consecutive values of a row (q8_0: one block, quantized together).
#pragma once
#include "common.cuh"

// Dimension d's pair partner and which side of the pair it is (first = the "x0" element).
template <int ROT, bool ADJACENT> __device__ __forceinline__ void ig_rope_pair(int d, int& i, int& partner, bool& first) {
  if constexpr (ADJACENT) {
    i = d >> 1, first = (d & 1) == 0, partner = d ^ 1;
  } else {
    first = d < ROT / 2, i = first ? d : d - ROT / 2, partner = first ? d + ROT / 2 : d - ROT / 2;
  }
}

template <int HEADS, int KVH, int HD, int ROT, bool ADJACENT>
__global__ void __launch_bounds__(128)
rope_kv_kernel(float* q, int ldq, const float* __restrict__ k, int ldk, const float* __restrict__ v, int ldv,
               const float* __restrict__ cos_sin, const int* __restrict__ pos, const int* __restrict__ tok_seq,
               const int* __restrict__ block_tables, int bt_stride, ig_kv_t* __restrict__ kv, int n_layers, int layer,
               int n_blocks) {
  static_assert(ROT % 2 == 0 && ROT <= HD, "rotary dims");
  const int t = blockIdx.x, p = pos[t];
  const float* cs = cos_sin + (long long)p * ROT;
  // q: one thread per rotated pair
  float* qt = q + (long long)t * ldq;
  for (int e = threadIdx.x; e < HEADS * (ROT / 2); e += blockDim.x) {
    const int h = e / (ROT / 2), i = e % (ROT / 2);
    const int a = ADJACENT ? 2 * i : i, b = ADJACENT ? 2 * i + 1 : i + ROT / 2;
    float* x = qt + h * HD;
    const float c = cs[2 * i], s = cs[2 * i + 1], x0 = x[a], x1 = x[b];
    x[a] = x0 * c - x1 * s;
    x[b] = x0 * s + x1 * c;
  }
  // k and v: one thread per element, straight into the token's slot of its KV block
  const int blk = block_tables[(long long)tok_seq[t] * bt_stride + p / IG_KV_BLOCK], slot = p % IG_KV_BLOCK;
  const float* kt = k + (long long)t * ldk;
  const float* vt = v + (long long)t * ldv;
  const long long vbase = ig_kv_v_base<KVH, HD>(n_layers, n_blocks);
  // every lane of a warp takes part in each pass (KVH * HD and blockDim.x multiples of 32 for q8_0)
  static_assert(!IG_KV_Q8 || HD % 32 == 0, "q8_0 rows");
  for (int e = threadIdx.x; e < KVH * HD; e += blockDim.x) {
    const int h = e / HD, d = e % HD;
    const long long off = ig_kv_row<KVH, HD>(layer, n_blocks, blk, h, slot);
    float kval = kt[e];
    if (d < ROT) {
      int i, partner;
      bool first;
      ig_rope_pair<ROT, ADJACENT>(d, i, partner, first);
      const float c = cs[2 * i], s = cs[2 * i + 1], other = kt[h * HD + partner];
      kval = first ? kval * c - other * s : other * s + kval * c;
    }
    ig_kv_put_warp(kv + off, d, kval);
    ig_kv_put_warp(kv + vbase + off, d, vt[e]);
  }
}

// RoPE of one row of HEADS heads (x -> y, in place allowed) at the position whose table row is
// cs = cos_sin + pos*ROT: one thread per rotated pair; dims >= ROT are copied when y != x.
template <int HEADS, int HD, int ROT, bool ADJACENT>
__device__ __forceinline__ void ig_row_rope(const float* x, float* y, const float* __restrict__ cs) {
  static_assert(ROT % 2 == 0 && ROT <= HD, "rotary dims");
  for (int e = threadIdx.x; e < HEADS * (ROT / 2); e += blockDim.x) {
    const int h = e / (ROT / 2), i = e % (ROT / 2);
    const int a = h * HD + (ADJACENT ? 2 * i : i), b = h * HD + (ADJACENT ? 2 * i + 1 : i + ROT / 2);
    const float c = cs[2 * i], s = cs[2 * i + 1], x0 = x[a], x1 = x[b];
    y[a] = x0 * c - x1 * s;
    y[b] = x0 * s + x1 * c;
  }
  if constexpr (ROT < HD) {
    if (x != y)
      for (int e = threadIdx.x; e < HEADS * (HD - ROT); e += blockDim.x)
        y[e / (HD - ROT) * HD + ROT + e % (HD - ROT)] = x[e / (HD - ROT) * HD + ROT + e % (HD - ROT)];
  }
}

// Stores one token's k and v rows (KVH heads of HD) into its slot of the paged pool: position p
// of the sequence whose block table is bt. Every thread of the block calls it (blockDim.x a
// multiple of 32: a warp stores 32 consecutive values, for q8_0 one block quantized together).
template <int KVH, int HD>
__device__ __forceinline__ void ig_row_kv_store(const float* k, const float* v, ig_kv_t* kv, int n_layers, int layer,
                                                int n_blocks, const int* __restrict__ bt, int p) {
  static_assert(!IG_KV_Q8 || HD % 32 == 0, "q8_0 rows");
  const int blk = bt[p / IG_KV_BLOCK], slot = p % IG_KV_BLOCK;
  const long long vbase = ig_kv_v_base<KVH, HD>(n_layers, n_blocks);
  for (int e = threadIdx.x; e < KVH * HD; e += blockDim.x) {
    const long long off = ig_kv_row<KVH, HD>(layer, n_blocks, blk, e / HD, slot);
    ig_kv_put_warp(kv + off, e % HD, k[e]);
    if (v) ig_kv_put_warp(kv + vbase + off, e % HD, v[e]); // v null: the values share the key rows (MLA)
  }
}
