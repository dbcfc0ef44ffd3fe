// attn_prefill.cuh — flash-attention-style prefill over the paged KV pool: tiles of queries x tiles of keys, online softmax, causal mask, sliding window, tanh softcap.
//
// attn_prefill_kernel<HD, GROUP, KVH, BQ, BK = 32, NW = 4>
//   grid  = (ceil(max_s ntok[s] / BQ), KVH, n_seqs), block = NW*32.
//   Sequence s contributes ntok[s] consecutive tokens: batch rows tok0[s] .. tok0[s]+ntok[s]-1 at
//   positions pos0[s] .. pos0[s]+ntok[s]-1, their K/V already in the pool (rope_kv_kernel), and
//   attends to its keys [max(0, p-window+1) if window > 0 else 0, p] through its block table
//   (earlier chunks included: chunked prefill works).
//   Block (x, h, s) owns query tile x (BQ tokens) x the GROUP heads sharing KV head h: R = BQ*GROUP
//   query rows (token-major) staged in shared memory; warp w owns rows w, w+NW, ... (RW = R/NW
//   rounded up) and keeps each row's running max, sum and output slice (lane l: dims l + 32e) in
//   registers. Per key tile of BK keys (K rows padded to HD+1 floats: lane j reads key j's row
//   without bank conflicts; V rows unpadded: lane l reads dim l + 32e):
//     scores: lane j = key j, dot(q_row, K[j]) from shared memory; *scale, softcap, masks (a sink
//     logit per query head, gpt-oss, joins the sum at the end: ig_attn_scale);
//     online softmax: tile max and sum by warp shuffles; p_j broadcast with __shfl_sync for P.V.
//   q rows at q + row*ldq ([HEADS*HD]); out rows at out + row*ldo.
//   Limits: BK == 32 (one key per lane); HD % 32 == 0; shared memory
//   (R*HD + BK*(HD+1) + BK*HD)*4 bytes <= 48 KiB (e.g. HD 64: BQ*GROUP <= 128; HD 128: <= 32).
#pragma once
#include "common.cuh"

template <int HD, int GROUP, int BQ, int BK = 32>
__host__ __device__ constexpr int attn_prefill_smem_bytes() { return (BQ * GROUP * HD + BK * (HD + 1) + BK * HD) * 4; }

template <int HD, int GROUP, int KVH, int BQ, int BK = 32, int NW = 4>
__global__ void __launch_bounds__(NW * 32, 1) // min 1 block/SM: lets ptxas keep the per-row state in registers (sm_90 otherwise caps at 64 and spills)
attn_prefill_kernel(const float* __restrict__ q, int ldq, const ig_kv_t* __restrict__ kv, int n_layers, int layer,
                    int n_blocks, const int* __restrict__ block_tables, int bt_stride, const int* __restrict__ tok0,
                    const int* __restrict__ pos0, const int* __restrict__ ntok, int window, float scale, float softcap,
                    const float* __restrict__ sinks, float* __restrict__ out, int ldo) {
  static_assert(BK == 32, "one key per lane");
  static_assert(HD % 32 == 0, "head_dim");
  static_assert(attn_prefill_smem_bytes<HD, GROUP, BQ, BK>() <= 48 * 1024, "shared memory: lower BQ");
  constexpr int E = HD / 32, R = BQ * GROUP, RW = (R + NW - 1) / NW, NT = NW * 32;
  const int h = blockIdx.y, s = blockIdx.z;
  const int n = ntok[s], t_first = blockIdx.x * BQ;
  if (t_first >= n) return; // whole block
  const int nq = min(BQ, n - t_first);            // tokens in this tile
  const int row0 = tok0[s] + t_first, p0 = pos0[s] + t_first;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int* bt = block_tables + (long long)s * bt_stride;
  const long long vbase = ig_kv_v_base<KVH, HD>(n_layers, n_blocks);

  __shared__ float Qs[R][HD];
  __shared__ float Ks[BK][HD + 1];
  __shared__ float Vs[BK][HD];
  for (int i = threadIdx.x; i < R * HD; i += NT) { // row r = token (r / GROUP), head h*GROUP + r % GROUP
    const int r = i / HD, d = i % HD, t = r / GROUP;
    Qs[r][d] = t < nq ? q[(long long)(row0 + t) * ldq + (h * GROUP + r % GROUP) * HD + d] : 0.0f;
  }
  float m[RW], l[RW], o[RW][E];
#pragma unroll
  for (int k = 0; k < RW; k++) {
    m[k] = ig_neg_inf(), l[k] = 0.0f;
#pragma unroll
    for (int e = 0; e < E; e++) o[k][e] = 0.0f;
  }
  const int p_hi = p0 + nq - 1; // last query position of the tile = last key needed
  const int k_lo = window > 0 ? max(0, p0 - window + 1) : 0;
  for (int kb = k_lo; kb <= p_hi; kb += BK) {
    __syncthreads(); // previous tile consumed (and Qs written, on the first pass)
    for (int i = threadIdx.x; i < BK * HD; i += NT) {
      const int j = i / HD, d = i % HD, p = kb + j;
      float kx = 0.0f, vx = 0.0f; // keys past p_hi: zeros (masked below; never NaN into P.V)
      if (p <= p_hi) {
        const long long row = ig_kv_row<KVH, HD>(layer, n_blocks, bt[p / IG_KV_BLOCK], h, p % IG_KV_BLOCK);
        kx = ig_kv_get(kv + row, d), vx = ig_kv_get(kv + vbase + row, d);
      }
      Ks[j][d] = kx, Vs[j][d] = vx;
    }
    __syncthreads();
    const int pk = kb + lane; // this lane's key
#pragma unroll
    for (int k = 0; k < RW; k++) {
      const int r = warp + k * NW; // warp-uniform row
      if (r >= R || r / GROUP >= nq) continue;
      const int pq = p0 + r / GROUP;
      const int lo = window > 0 ? pq - window + 1 : 0;
      if (kb > pq || kb + BK - 1 < lo) continue; // whole tile masked for this row
      float dot = 0.0f;
#pragma unroll 8
      for (int d = 0; d < HD; d++) dot = fmaf(Qs[r][d], Ks[lane][d], dot);
      float sc = dot * scale;
      if (softcap > 0.0f) sc = softcap * tanhf(sc / softcap);
      const bool valid = pk <= pq && pk >= lo;
      sc = valid ? sc : ig_neg_inf();
      const float mn = fmaxf(m[k], ig_warp_max(sc)); // finite: the tile has a valid key
      const float pe = valid ? __expf(sc - mn) : 0.0f, corr = __expf(m[k] - mn);
      l[k] = l[k] * corr + ig_warp_sum(pe);
#pragma unroll
      for (int e = 0; e < E; e++) o[k][e] *= corr;
#pragma unroll 4
      for (int j = 0; j < BK; j++) {
        const float pj = __shfl_sync(0xffffffffu, pe, j);
#pragma unroll
        for (int e = 0; e < E; e++) o[k][e] = fmaf(pj, Vs[j][lane + 32 * e], o[k][e]);
      }
      m[k] = mn;
    }
  }
#pragma unroll
  for (int k = 0; k < RW; k++) {
    const int r = warp + k * NW;
    if (r >= R || r / GROUP >= nq) continue;
    float* orow = out + (long long)(row0 + r / GROUP) * ldo + (h * GROUP + r % GROUP) * HD;
    const float norm = ig_attn_scale(l[k], m[k], sinks, h * GROUP + r % GROUP);
#pragma unroll
    for (int e = 0; e < E; e++) orow[lane + 32 * e] = o[k][e] * norm;
  }
}
