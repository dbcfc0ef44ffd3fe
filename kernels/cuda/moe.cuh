// moe.cuh — mixture-of-experts pieces of generated kernels: routing (router logits, softmax, top-k, renormalized weights), the expert-order row assignment, weight selection by expert, the gated activation of a tile, the per-token combine.
//
// A step's T tokens choose K of E experts each; the T*K (token, choice) pairs become "rows" in
// expert order (token order within an expert), so each expert multiplies one contiguous run of
// rows and reads its weights once per step. The route scratch holds, as 4-byte slots:
//   rec(t)     = route + t*3K:  ids[K] (int, chosen order), weights[K], rows[K] (int: the row of each choice)
//   row_token  = route + 3K*T:  [T*K] int, the token of each row (the X row the expert reads)
//   offsets    = route + 4K*T:  [E+1] int, expert e owns rows offsets[e] .. offsets[e+1]-1
// The semantics are the CPU backend's (generator/emit_c.lua, moe_kernel) step for step.
//
// Library kernels (generated models compose the pieces with their own weights and epilogue,
// generator/emit_cuda_moe.lua):
//   moe_route_kernel<DT, D, E, K>  grid T, block 128: routes token rows x[T][D] through router
//                                  [E][D] (plus router_bias[E] if given) and numbers the rows;
//                                  done: a device word, 0 at launch
//   moe_combine_kernel<D, E, K>    grid T, block 256: out[t] from the down rows [T*K][D]
#pragma once
#include "common.cuh"
#include "elementwise.cuh"
#include "gemv_q.cuh"

// IG_ACT_SWIGLU: ig_swiglu with the alpha, limit and up offset the call passes (gpt-oss)
enum { IG_ACT_SILU = 0, IG_ACT_GELU_TANH = 1, IG_ACT_SWIGLU = 2 };

template <int K, class F> __device__ __forceinline__ F* ig_moe_rec(F* route, int t) { return route + (long long)t * 3 * K; }
template <int K> __device__ __forceinline__ int* ig_moe_row_token(float* route, int T) {
  return reinterpret_cast<int*>(route + (long long)3 * K * T);
}
template <int K> __device__ __forceinline__ int* ig_moe_offsets(float* route, int T) {
  return reinterpret_cast<int*>(route + (long long)4 * K * T);
}

// Expert e's weight matrix among the kernel's pointer parameters (one per expert, in expert
// order). Kernel parameters cannot be indexed at run time without a local copy; a chain of
// selects keeps everything in registers and needs no device-side pointer table.
__device__ __forceinline__ const void* ig_moe_pick(int, const void* w) { return w; }
template <typename... P> __device__ __forceinline__ const void* ig_moe_pick(int e, const void* w, P... rest) {
  return e == 0 ? w : ig_moe_pick(e - 1, rest...);
}

// Routes token row x (D floats) through the router [E][D]: logits (a warp per expert), softmax,
// the top K by probability (lowest id first on ties), weights renormalized over the chosen
// ones (NORM) or the probabilities as they are; into rec (ig_moe_rec). logit: __shared__
// float[E] of the caller. All NT threads call it. GROUPS > 1 (DeepSeek-V2's group-limited
// routing): the experts form GROUPS equal groups and only the TOP_GROUPS groups with the highest
// best probability are eligible (the others' probabilities set to 0, as the reference masks them).
// router_bias (gpt-oss; nullptr: none) is added to the logits.
template <int DT, int D, int E, int K, int NT, bool NORM = true, int GROUPS = 1, int TOP_GROUPS = 1>
__device__ __forceinline__ void ig_moe_route(const void* __restrict__ router, const float* __restrict__ x, float* rec,
                                             float* logit, const float* __restrict__ router_bias = nullptr) {
  for (int e = threadIdx.x >> 5; e < E; e += NT / 32)
    ig_gemv_warp<DT, D, 1>(router, e, x, D, nullptr, 1, nullptr, 0.0f, nullptr, logit, E, router_bias, 0);
  __syncthreads();
  if (threadIdx.x != 0) return; // E is small (8 for Mixtral): one thread, in the CPU's order
  int* ids = reinterpret_cast<int*>(rec);
  float maxv = logit[0], sum = 0.0f, best[K], chosen = 0.0f;
  for (int e = 1; e < E; e++) maxv = logit[e] > maxv ? logit[e] : maxv;
  for (int e = 0; e < E; e++) { logit[e] = expf(logit[e] - maxv); sum += logit[e]; }
  for (int e = 0; e < E; e++) logit[e] /= sum;
  if constexpr (GROUPS > 1) {
    constexpr int PER = E / GROUPS;
    float gbest[GROUPS];
    bool keep[GROUPS];
    for (int g = 0; g < GROUPS; g++) {
      keep[g] = false;
      gbest[g] = logit[g * PER];
      for (int e = 1; e < PER; e++) gbest[g] = logit[g * PER + e] > gbest[g] ? logit[g * PER + e] : gbest[g];
    }
    for (int k = 0; k < TOP_GROUPS; k++) {
      int arg = -1;
      for (int g = 0; g < GROUPS; g++)
        if (!keep[g] && (arg < 0 || gbest[g] > gbest[arg])) arg = g;
      keep[arg] = true;
    }
    for (int e = 0; e < E; e++)
      if (!keep[e / PER]) logit[e] = 0.0f;
  }
  for (int k = 0; k < K; k++) {
    int arg = -1;
    for (int e = 0; e < E; e++) {
      bool taken = false;
      for (int j = 0; j < k; j++) taken |= ids[j] == e;
      if (!taken && (arg < 0 || logit[e] > logit[arg])) arg = e;
    }
    ids[k] = arg;
    best[k] = logit[arg];
    chosen += logit[arg];
  }
  for (int k = 0; k < K; k++) rec[K + k] = NORM ? best[k] / chosen : best[k];
}

// After every token is routed (the last block of the route launch): counts per expert, their
// offsets, and each (token, choice) its row in expert order, token order within an expert, so
// the result never depends on which block finished when. A thread per expert scans the T*K
// choices twice (T*K is at most 2*MAX_TOKENS for Mixtral; a block-wide scan would shorten the
// serial part for long prefills). All NT threads call it.
template <int E, int K, int NT> __device__ __forceinline__ void ig_moe_assign_rows(float* route, int T) {
  int* offsets = ig_moe_offsets<K>(route, T);
  int* row_token = ig_moe_row_token<K>(route, T);
  for (int e = threadIdx.x; e < E; e += NT) {
    int count = 0;
    for (int t = 0; t < T; t++) {
      const int* ids = reinterpret_cast<const int*>(ig_moe_rec<K>(route, t));
#pragma unroll
      for (int k = 0; k < K; k++) count += ids[k] == e;
    }
    offsets[e + 1] = count;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    offsets[0] = 0;
    for (int e = 0; e < E; e++) offsets[e + 1] += offsets[e];
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += NT) {
    int row = offsets[e];
    for (int t = 0; t < T; t++) {
      int* rec = reinterpret_cast<int*>(ig_moe_rec<K>(route, t));
#pragma unroll
      for (int k = 0; k < K; k++)
        if (rec[k] == e) rec[2 * K + k] = row, row_token[row++] = t;
    }
  }
}

// gate[i][c] = act(gate[i][c]) * up[i][c] for rows i < n and columns c0 <= c < min(c0 + NC, F)
// (rows of F floats): the gated activation of the tile a block (or warp) just wrote; its
// threads' global writes are visible to the caller after __syncthreads (__syncwarp for a warp).
// ACT: IG_ACT_SILU, IG_ACT_GELU_TANH or IG_ACT_SWIGLU (with alpha, limit, up_offset). Element i of
// the tile goes to thread `lane` == i % NT.
template <int ACT, int F, int NC, int NT>
__device__ __forceinline__ void ig_moe_act_tile(float* gate, const float* up, int n, int c0, int lane, float alpha = 1.0f,
                                                float limit = 0.0f, float up_offset = 0.0f) {
  for (int i = lane; i < n * NC; i += NT) {
    const int c = c0 + i % NC;
    if (c >= F) continue;
    const long long at = (long long)(i / NC) * F + c;
    if constexpr (ACT == IG_ACT_SWIGLU) gate[at] = ig_swiglu(gate[at], up[at], alpha, limit, up_offset);
    else gate[at] = (ACT == IG_ACT_SILU ? ig_silu(gate[at]) : ig_gelu_tanh(gate[at])) * up[at];
  }
}

// The combine of one token: out[i] = sum over experts e ascending, over choices k with ids[k] == e,
// of weight[k] * down[rows[k]][i] (D floats each): the CPU backend's accumulation order.
template <int D, int E, int K, int NT>
__device__ __forceinline__ void ig_moe_combine(const float* rec, const float* __restrict__ down, float* out) {
  const int* ids = reinterpret_cast<const int*>(rec);
  const int* rows = reinterpret_cast<const int*>(rec + 2 * K);
  for (int i = threadIdx.x; i < D; i += NT) {
    float o = 0.0f;
    for (int e = 0; e < E; e++)
#pragma unroll
      for (int k = 0; k < K; k++)
        if (ids[k] == e) o += rec[K + k] * down[(long long)rows[k] * D + i];
    out[i] = o;
  }
}

template <int DT, int D, int E, int K>
__global__ void __launch_bounds__(128) moe_route_kernel(const void* __restrict__ router, const float* __restrict__ x,
                                                        float* route, int T, unsigned* done,
                                                        const float* __restrict__ router_bias = nullptr) {
  __shared__ float logit[E];
  ig_moe_route<DT, D, E, K, 128>(router, x + (long long)blockIdx.x * D, ig_moe_rec<K>(route, blockIdx.x), logit,
                                 router_bias);
  if (!ig_last_block(done)) return;
  ig_moe_assign_rows<E, K, 128>(route, T);
}

template <int D, int E, int K>
__global__ void __launch_bounds__(256) moe_combine_kernel(const float* route, const float* __restrict__ down, float* out) {
  ig_moe_combine<D, E, K, 256>(ig_moe_rec<K>(route, blockIdx.x), down, out + (long long)blockIdx.x * D);
}
