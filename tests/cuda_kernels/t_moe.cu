// t_moe.cu — the mixture-of-experts routing and combine kernels (moe.cuh) against plain loops with the CPU backend's semantics (generator/emit_c.lua, moe_kernel).
#include <cstdlib>

#include "harness.h"
#include "moe.cuh"

// The route scratch of T tokens as moe.cuh lays it out, in 4-byte slots.
template <int E, int K> static size_t route_slots(int T) { return (size_t)4 * K * T + E + 1; }

// Reference routing of T rows of x through router [E][D] (f32): ids, weights (rec layout), then
// rows in expert order, token order within an expert, the row -> token map and the offsets.
template <int D, int E, int K>
static void route_ref(const std::vector<float>& router, const std::vector<float>& x, int T, std::vector<int>& ids,
                      std::vector<float>& weights, std::vector<int>& rows, std::vector<int>& row_token,
                      std::vector<int>& offsets, const std::vector<float>& bias) {
  ids.assign((size_t)T * K, -1), weights.assign((size_t)T * K, 0.0f), rows.assign((size_t)T * K, -1);
  row_token.assign((size_t)T * K, -1), offsets.assign(E + 1, 0);
  for (int t = 0; t < T; t++) {
    float p[E], maxv, sum = 0.0f, chosen = 0.0f;
    for (int e = 0; e < E; e++)
      p[e] = kc_dot(router.data() + (size_t)e * D, x.data() + (size_t)t * D, D) + (bias.empty() ? 0.0f : bias[e]);
    maxv = p[0];
    for (int e = 1; e < E; e++) maxv = p[e] > maxv ? p[e] : maxv;
    for (int e = 0; e < E; e++) { p[e] = expf(p[e] - maxv); sum += p[e]; }
    for (int e = 0; e < E; e++) p[e] /= sum;
    int* id = ids.data() + (size_t)t * K;
    for (int k = 0; k < K; k++) { // top-k by probability, lowest id first on ties
      int arg = -1;
      for (int e = 0; e < E; e++) {
        bool taken = false;
        for (int j = 0; j < k; j++) taken |= id[j] == e;
        if (!taken && (arg < 0 || p[e] > p[arg])) arg = e;
      }
      id[k] = arg;
      chosen += p[arg];
    }
    for (int k = 0; k < K; k++) weights[(size_t)t * K + k] = p[id[k]] / chosen;
  }
  for (int i = 0; i < T * K; i++) offsets[ids[i] + 1]++;
  for (int e = 0; e < E; e++) offsets[e + 1] += offsets[e];
  std::vector<int> fill(offsets.begin(), offsets.end() - 1);
  for (int e = 0; e < E; e++)
    for (int i = 0; i < T * K; i++)
      if (ids[i] == e) rows[i] = fill[e], row_token[fill[e]++] = i / K;
}

// Routes T random rows (router rows all equal when tied: every probability 1/E, so the lowest ids
// win) and checks every part of the scratch; twice, so the done counter's reset is used.
// with_bias: a router bias (gpt-oss) large enough to change the choices.
template <int D, int E, int K>
static void route_case(const char* name, int T, bool tied, unsigned seed, bool with_bias = false) {
  std::vector<float> router = rnd((size_t)E * D, seed, -0.5f, 0.5f);
  if (tied)
    for (int e = 1; e < E; e++) std::memcpy(router.data() + (size_t)e * D, router.data(), sizeof(float) * D);
  const std::vector<float> x = rnd((size_t)T * D, seed + 1, -1.0f, 1.0f);
  std::vector<int> ids, rows, row_token, offsets;
  std::vector<float> weights;
  const std::vector<float> bias = with_bias ? rnd(E, seed + 2, -2.0f, 2.0f) : std::vector<float>();
  route_ref<D, E, K>(router, x, T, ids, weights, rows, row_token, offsets, bias);
  float *dR = to_dev(router), *dX = to_dev(x), *dS = to_dev(std::vector<float>(route_slots<E, K>(T)));
  float* dB = with_bias ? to_dev(bias) : nullptr;
  unsigned* done = to_dev(std::vector<unsigned>(1, 0u));
  for (int pass = 0; pass < 2; pass++) {
    moe_route_kernel<IG_F32, D, E, K><<<T, 128>>>(dR, dX, dS, T, done, dB);
    CHECK(cudaGetLastError());
  }
  const std::vector<float> s = from_dev(dS, route_slots<E, K>(T));
  std::vector<int> got_ids((size_t)T * K), got_rows((size_t)T * K), got_map((size_t)T * K), got_off(E + 1);
  std::vector<float> got_w((size_t)T * K);
  for (int t = 0; t < T; t++)
    for (int k = 0; k < K; k++) {
      std::memcpy(&got_ids[(size_t)t * K + k], &s[(size_t)t * 3 * K + k], 4);
      got_w[(size_t)t * K + k] = s[(size_t)t * 3 * K + K + k];
      std::memcpy(&got_rows[(size_t)t * K + k], &s[(size_t)t * 3 * K + 2 * K + k], 4);
    }
  std::memcpy(got_map.data(), &s[(size_t)3 * K * T], sizeof(int) * T * K);
  std::memcpy(got_off.data(), &s[(size_t)4 * K * T], sizeof(int) * (E + 1));
  char what[160];
  std::snprintf(what, sizeof what, "%s: expert ids", name);
  expect_eq(what, got_ids.data(), ids.data(), ids.size());
  std::snprintf(what, sizeof what, "%s: weights", name);
  expect_close(what, got_w.data(), weights.data(), weights.size(), 1e-5f); // f32 dot products in another order
  std::snprintf(what, sizeof what, "%s: rows in expert order", name);
  expect_eq(what, got_rows.data(), rows.data(), rows.size());
  std::snprintf(what, sizeof what, "%s: row -> token", name);
  expect_eq(what, got_map.data(), row_token.data(), row_token.size());
  std::snprintf(what, sizeof what, "%s: expert offsets", name);
  expect_eq(what, got_off.data(), offsets.data(), offsets.size());
  cudaFree(dR), cudaFree(dX), cudaFree(dS), cudaFree(done), cudaFree(dB);
}

// The gated activation of a tile with gpt-oss's SwiGLU (IG_ACT_SWIGLU) against the CPU backend's
// kc_swiglu_row: values across the clamp, one warp over a 3-row tile of 40 columns from column 8.
template <int F, int NC>
__global__ void act_tile_kernel(float* gate, const float* up, int n, int c0, float alpha, float limit, float off) {
  ig_moe_act_tile<IG_ACT_SWIGLU, F, NC, 32>(gate, up, n, c0, threadIdx.x, alpha, limit, off);
}
static void swiglu_case(const char* name, float alpha, float limit, float off, unsigned seed) {
  constexpr int F = 56, NC = 40, C0 = 8, N = 3;
  const std::vector<float> g = rnd((size_t)N * F, seed, -12.0f, 12.0f), u = rnd((size_t)N * F, seed + 1, -12.0f, 12.0f);
  std::vector<float> want = g;
  for (int i = 0; i < N; i++) // columns C0 .. min(C0 + NC, F) - 1 of each row; the others untouched
    kc_swiglu_row(want.data() + (size_t)i * F + C0, u.data() + (size_t)i * F + C0, std::min(NC, F - C0), alpha, limit, off);
  float *dG = to_dev(g), *dU = to_dev(u);
  act_tile_kernel<F, NC><<<1, 32>>>(dG, dU, N, C0, alpha, limit, off);
  CHECK(cudaGetLastError());
  const std::vector<float> got = from_dev(dG, g.size());
  expect_close(name, got.data(), want.data(), got.size(), 1e-6f); // expf on both sides, the same order
  cudaFree(dG), cudaFree(dU);
}

// out[t] = sum over experts ascending, choices of that expert, of weight * down row: records
// written by hand (one token's choices out of expert order, repeated weights), random down rows.
template <int D, int E, int K> static void combine_case(const char* name, int T, unsigned seed) {
  const std::vector<float> down = rnd((size_t)T * K * D, seed, -2.0f, 2.0f), w = rnd((size_t)T * K, seed + 1, 0.0f, 1.0f);
  std::vector<float> rec((size_t)T * 3 * K);
  std::vector<float> want((size_t)T * D, 0.0f);
  unsigned s = seed;
  for (int t = 0; t < T; t++) {
    int id[K];
    for (int k = 0; k < K; k++) { // distinct experts, in the router's order (not ascending)
      bool again;
      do {
        id[k] = (int)(rnd_u32(s) % E);
        again = false;
        for (int j = 0; j < k; j++) again |= id[j] == id[k];
      } while (again);
    }
    for (int k = 0; k < K; k++) {
      const int row = (int)((size_t)(t * K + k) * 7 % ((size_t)T * K)); // any permutation of the rows
      std::memcpy(&rec[(size_t)t * 3 * K + k], &id[k], 4);
      rec[(size_t)t * 3 * K + K + k] = w[(size_t)t * K + k];
      std::memcpy(&rec[(size_t)t * 3 * K + 2 * K + k], &row, 4);
    }
    for (int e = 0; e < E; e++)
      for (int k = 0; k < K; k++)
        if (id[k] == e)
          for (int i = 0; i < D; i++)
            want[(size_t)t * D + i] += w[(size_t)t * K + k] * down[(size_t)(t * K + k) * 7 % ((size_t)T * K) * D + i];
  }
  float *dRec = to_dev(rec), *dDown = to_dev(down), *dO = to_dev(std::vector<float>((size_t)T * D));
  moe_combine_kernel<D, E, K><<<T, 256>>>(dRec, dDown, dO);
  CHECK(cudaGetLastError());
  const std::vector<float> got = from_dev(dO, want.size());
  expect_close(name, got.data(), want.data(), got.size(), 1e-6f); // the same sums in the same order
  cudaFree(dRec), cudaFree(dDown), cudaFree(dO);
}

int main() {
  // The route's last block reads every block's records after a fence and an atomic count, an
  // ordering the cross-block race mode cannot see; races within a block are still checked.
  setenv("CUDASIM_RACE_GLOBAL", "1", 0);
  route_case<64, 8, 2>("route D64 E8 top2", 37, false, 1);
  route_case<96, 4, 1>("route D96 E4 top1", 9, false, 2);
  route_case<32, 6, 3>("route D32 E6 top3 (every probability tied)", 5, true, 3);
  route_case<64, 160, 2>("route E160 (more experts than threads)", 4, false, 4);
  route_case<64, 8, 2>("route D64 E8 top2 with a router bias", 21, false, 7, true);
  combine_case<96, 8, 2>("combine D96 E8 top2", 6, 5);
  combine_case<300, 4, 3>("combine D300 E4 top3 (strided threads)", 3, 6);
  swiglu_case("SwiGLU alpha 1.702 limit 7 up + 1 (gpt-oss)", 1.702f, 7.0f, 1.0f, 8);
  swiglu_case("SwiGLU alpha 1 no limit (plain silu(g) up)", 1.0f, 0.0f, 0.0f, 9);
  return finish();
}
