// attn_rows.cuh — paged attention for any head_dim and any mix of prefill and decode tokens: one warp per (token, query head), keys in tiles of 32.
//
// attn_rows_kernel<HD, GROUP, KVH>
//   grid = (n_tokens, HEADS = KVH*GROUP), block = 32 (one warp).
//   Token t of sequence seq[t] at position pos[t] (its K/V and those of every earlier position
//   already in the pool) attends to keys [first, pos[t]], first = max(0, pos-window+1) when
//   window > 0, else 0, through the sequence's block table. Per tile of 32 keys, lane j scores key
//   j against the query row held in shared memory (no shuffles per key), the tile's max and sum
//   come from two warp reductions (online softmax), and the probabilities go through shared
//   memory so that lane l accumulates output dims l, l+32, ... over the tile's values.
//   score = q.k * scale, then softcap*tanh(score/softcap) when softcap > 0; sinks (nullptr: none)
//   as attn_decode.cuh.
//   q rows at q + t*ldq (head h at h*HD), out rows at out + t*ldo (head h at h*VD).
//   VD: the values' width (default HD); SHARED: no V half in the pool, the values are the first VD
//   columns of the key rows (MLA's cached latent, the absorbed form).
// The generated CUDA models use it where the specialized kernels do not apply (head_dim not a
// multiple of 32, shared-memory limits); attn_decode/attn_prefill serve the common shapes.
#pragma once
#include "common.cuh"

template <int HD, int GROUP, int KVH, int VD = HD, bool SHARED = false>
__global__ void __launch_bounds__(32)
attn_rows_kernel(const float* __restrict__ q, int ldq, const ig_kv_t* __restrict__ kv, int n_layers, int layer,
                 int n_blocks, const int* __restrict__ block_tables, int bt_stride, const int* __restrict__ pos,
                 const int* __restrict__ seq, int window, float scale, float softcap,
                 const float* __restrict__ sinks, float* __restrict__ out, int ldo) {
  constexpr int E = (VD + 31) / 32;
  __shared__ float qs[HD];
  __shared__ float ps[32];
  const int t = blockIdx.x, head = blockIdx.y, h = head / GROUP, lane = threadIdx.x;
  const int p_last = pos[t];
  const int first = window > 0 ? max(0, p_last - window + 1) : 0;
  const int* bt = block_tables + (long long)seq[t] * bt_stride;
  const long long vbase = SHARED ? 0 : ig_kv_v_base<KVH, HD>(n_layers, n_blocks);
  for (int d = lane; d < HD; d += 32) qs[d] = q[(long long)t * ldq + head * HD + d];
  __syncwarp();
  // wide values (MLA's latent: 512 columns, 16 per lane) keep their accumulators in shared memory,
  // each lane its own columns; registers would spill
  constexpr bool WIDE = E > 8;
  __shared__ float os[WIDE ? 32 * E : 1];
  float o[WIDE ? 1 : E], m = ig_neg_inf(), l = 0.0f;
  auto acc = [&](int e) -> float& {
    if constexpr (WIDE) return os[lane + 32 * e];
    else return o[e];
  };
#pragma unroll
  for (int e = 0; e < E; e++) acc(e) = 0.0f;
  for (int p0 = first; p0 <= p_last; p0 += 32) {
    const int p = p0 + lane, n = min(32, p_last - p0 + 1);
    float sc = ig_neg_inf();
    if (lane < n) {
      const ig_kv_t* kr = kv + ig_kv_row<KVH, HD>(layer, n_blocks, bt[p / IG_KV_BLOCK], h, p % IG_KV_BLOCK);
      float dot = 0.0f;
#if IG_KV_Q8
      for (int b = 0; b < HD; b += 32) { // one scale per block
        const float sb = ig_kv_q8_scale(kr, b);
        for (int i = 0; i < 32; i++) dot = fmaf(qs[b + i], sb * ig_kv_q8_value(kr, b + i), dot);
      }
#else
      for (int d = 0; d < HD; d++) dot = fmaf(qs[d], ig_kv_to(kr[d]), dot);
#endif
      sc = dot * scale;
      if (softcap > 0.0f) sc = softcap * tanhf(sc / softcap);
    }
    const float mn = fmaxf(m, ig_warp_max(sc)); // finite: the tile has at least one key
    const float corr = __expf(m - mn), pe = lane < n ? __expf(sc - mn) : 0.0f;
    l = l * corr + ig_warp_sum(pe);
    ps[lane] = pe;
    __syncwarp();
    if constexpr (WIDE) { // the same sums, each value row located once, the columns looped (not unrolled)
      for (int e = 0; e < E; e++) acc(e) *= corr;
      for (int j = 0; j < n; j++) {
        const int pj = p0 + j;
        const ig_kv_t* vr = kv + vbase + ig_kv_row<KVH, HD>(layer, n_blocks, bt[pj / IG_KV_BLOCK], h, pj % IG_KV_BLOCK);
        const float pr = ps[j];
        for (int e = 0; e < E; e++)
          if (lane + 32 * e < VD) acc(e) = fmaf(pr, ig_kv_get(vr, lane + 32 * e), acc(e));
      }
    } else {
#pragma unroll
      for (int e = 0; e < E; e++) {
        const int d = lane + 32 * e;
        if (d < VD) {
          float a = acc(e) * corr;
          for (int j = 0; j < n; j++) {
            const int pj = p0 + j;
            const ig_kv_t* vr = kv + vbase + ig_kv_row<KVH, HD>(layer, n_blocks, bt[pj / IG_KV_BLOCK], h, pj % IG_KV_BLOCK);
            a = fmaf(ps[j], ig_kv_get(vr, d), a);
          }
          acc(e) = a;
        }
      }
    }
    __syncwarp(); // ps is rewritten by the next tile
    m = mn;
  }
  const float norm = ig_attn_scale(l, m, sinks, head);
#pragma unroll
  for (int e = 0; e < E; e++) {
    const int d = lane + 32 * e;
    if (d < VD) out[(long long)t * ldo + head * VD + d] = acc(e) * norm;
  }
}
