// attn_decode.cuh — paged attention for decode (one new token per sequence), GQA-grouped, online softmax, sliding window, tanh softcap, split-K ("flash-decoding") with a combine kernel.
//
// attn_decode_kernel<HD, GROUP, KVH, NW = 4>
//   grid  = (KVH, n_seqs, n_splits), block = NW*32.
//   Block (h, s, z) serves the GROUP query heads h*GROUP .. h*GROUP+GROUP-1 that share KV head h, for
//   sequence s whose token sits at position pos[s] (its K/V already stored) with query row
//   q + s*ldq ([HEADS*HD], HEADS = KVH*GROUP). Keys: [first, pos], first = max(0, pos-window+1) when
//   window > 0, else 0; split z takes keys [first + z*chunk, first + (z+1)*chunk) of that range
//   (chunk ignored when n_splits == 1; a split past the end writes an empty partial). The caller
//   guarantees n_splits*chunk >= the longest key range (chunk = ceil(max_len / n_splits)).
//   Warp w walks keys first_z + w, + NW, ...: each K/V row is read once for the whole group (lane
//   l holds dims [l*HD/32, (l+1)*HD/32): one vector load per lane), the group's scores come from
//   warp-shuffle dot products, and each warp keeps its own running max / sum / output for the
//   group in registers. The NW warp states are merged through shared memory (NW*GROUP*HD floats).
//   score = q.k * scale, then softcap*tanh(score/softcap) when softcap > 0. sinks: a logit per
//   query head in the softmax's sum (gpt-oss; nullptr: none), folded in by ig_attn_scale.
//   n_splits == 1: out[s*ldo + head*HD + d] = normalized output.
//   n_splits  > 1: unnormalized partials part_o[((s*HEADS + head)*n_splits + z)*HD + d] and
//                  part_ml[((s*HEADS + head)*n_splits + z)*2 + {0: max, 1: sum}], merged by
//                  attn_decode_combine_kernel<HD, HEADS> (grid (HEADS, n_seqs), block HD).
//   Limits: HD % 32 == 0, HD <= 256; GROUP*HD*NW*4 bytes of shared memory (<= 48 KiB).
#pragma once
#include "common.cuh"

template <int HD, int GROUP, int KVH, int NW = 4>
__global__ void __launch_bounds__(NW * 32, 1) // min 1 block/SM: lets ptxas keep the per-row state in registers (sm_90 otherwise caps at 64 and spills)
attn_decode_kernel(const float* __restrict__ q, int ldq, const ig_kv_t* __restrict__ kv, int n_layers, int layer,
                   int n_blocks, const int* __restrict__ block_tables, int bt_stride, const int* __restrict__ pos,
                   int window, float scale, float softcap, const float* __restrict__ sinks, int chunk,
                   float* __restrict__ out, int ldo, float* __restrict__ part_o, float* __restrict__ part_ml) {
  static_assert(HD % 32 == 0 && HD <= 256, "head_dim");
  static_assert(NW * GROUP * HD * 4 <= 48 * 1024, "shared memory");
  constexpr int E = HD / 32, HEADS = KVH * GROUP;
  const int h = blockIdx.x, s = blockIdx.y, z = blockIdx.z, nz = gridDim.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int p_last = pos[s];
  const int first = window > 0 ? max(0, p_last - window + 1) : 0;
  const int k_begin = nz == 1 ? first : first + z * chunk;
  const int k_end = nz == 1 ? p_last : min(p_last, first + (z + 1) * chunk - 1);
  const int* bt = block_tables + (long long)s * bt_stride;
  const long long vbase = ig_kv_v_base<KVH, HD>(n_layers, n_blocks);

  float qr[GROUP][E], o[GROUP][E], m[GROUP], l[GROUP];
#pragma unroll
  for (int g = 0; g < GROUP; g++) {
    ig_load_f<E>(q + (long long)s * ldq + (h * GROUP + g) * HD + lane * E, qr[g]);
    m[g] = ig_neg_inf(), l[g] = 0.0f;
#pragma unroll
    for (int e = 0; e < E; e++) o[g][e] = 0.0f;
  }
  for (int p = k_begin + warp; p <= k_end; p += NW) {
    const long long row = ig_kv_row<KVH, HD>(layer, n_blocks, bt[p / IG_KV_BLOCK], h, p % IG_KV_BLOCK);
    float kr[E], vr[E];
    ig_load_kv<E>(kv + row, lane * E, kr);
    ig_load_kv<E>(kv + vbase + row, lane * E, vr);
#pragma unroll
    for (int g = 0; g < GROUP; g++) {
      float dot = 0.0f;
#pragma unroll
      for (int e = 0; e < E; e++) dot = fmaf(qr[g][e], kr[e], dot);
      float sc = ig_warp_sum(dot) * scale;
      if (softcap > 0.0f) sc = softcap * tanhf(sc / softcap);
      const float mn = fmaxf(m[g], sc), corr = __expf(m[g] - mn), pe = __expf(sc - mn);
      l[g] = l[g] * corr + pe;
#pragma unroll
      for (int e = 0; e < E; e++) o[g][e] = fmaf(pe, vr[e], o[g][e] * corr);
      m[g] = mn;
    }
  }
  // merge the NW warp states
  __shared__ float sm_o[NW][GROUP][HD];
  __shared__ float sm_m[NW][GROUP], sm_l[NW][GROUP];
#pragma unroll
  for (int g = 0; g < GROUP; g++) {
#pragma unroll
    for (int e = 0; e < E; e++) sm_o[warp][g][lane * E + e] = o[g][e];
    if (lane == 0) sm_m[warp][g] = m[g], sm_l[warp][g] = l[g];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < GROUP * HD; i += NW * 32) {
    const int g = i / HD, d = i % HD;
    float M = ig_neg_inf();
#pragma unroll
    for (int w = 0; w < NW; w++) M = fmaxf(M, sm_m[w][g]);
    float L = 0.0f, A = 0.0f;
    if (M != ig_neg_inf()) {
#pragma unroll
      for (int w = 0; w < NW; w++) {
        const float f = __expf(sm_m[w][g] - M); // 0 for a warp without keys (max -inf)
        L = fmaf(sm_l[w][g], f, L);
        A = fmaf(sm_o[w][g][d], f, A);
      }
    }
    const int head = h * GROUP + g;
    if (nz == 1) {
      out[(long long)s * ldo + head * HD + d] = A * ig_attn_scale(L, M, sinks, head);
    } else {
      const long long pi = ((long long)s * HEADS + head) * nz + z;
      part_o[pi * HD + d] = A;
      if (d == 0) part_ml[pi * 2] = M, part_ml[pi * 2 + 1] = L;
    }
  }
}

// Merges the n_splits partials of attn_decode_kernel: grid (HEADS, n_seqs), block HD threads.
template <int HD, int HEADS>
__global__ void __launch_bounds__(HD)
attn_decode_combine_kernel(const float* __restrict__ part_o, const float* __restrict__ part_ml, int n_splits,
                           const float* __restrict__ sinks, float* __restrict__ out, int ldo) {
  const int head = blockIdx.x, s = blockIdx.y, d = threadIdx.x;
  const long long p0 = ((long long)s * HEADS + head) * n_splits;
  float M = ig_neg_inf();
  for (int z = 0; z < n_splits; z++) M = fmaxf(M, part_ml[(p0 + z) * 2]);
  float L = 0.0f, A = 0.0f;
  for (int z = 0; z < n_splits; z++) {
    const float mz = part_ml[(p0 + z) * 2];
    if (mz == ig_neg_inf()) continue; // empty split
    const float f = __expf(mz - M);
    L = fmaf(part_ml[(p0 + z) * 2 + 1], f, L);
    A = fmaf(part_o[(p0 + z) * HD + d], f, A);
  }
  out[(long long)s * ldo + head * HD + d] = A * ig_attn_scale(L, M, sinks, head);
}
