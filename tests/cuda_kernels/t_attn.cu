// t_attn.cu — attn_decode_kernel (+ split-K combine) and attn_prefill_kernel against kc_attend_kv: GQA groups 1/3/4, sliding windows, softcap, sinks, shuffled block tables, chunked prefill.
// Also built with IG_KV_Q8 and KC_KV_Q8 (t_attn_kvq8 in tests/test_cuda_kernels.py): both sides read the same
// q8_0 rows.
#include <cmath>
#include "harness.h"
#include "attn_decode.cuh"
#include "attn_prefill.cuh"
static_assert(sizeof(ig_kv_t) == sizeof(kc_kv_t), "IG_KV_* and KC_KV_* set alike: one pool element");

static const int n_layers = 2, layer = 1, n_blocks = 12, bt_stride = 4;
static const std::vector<int> g_bt = {7, 2, 10, 4, /* seq 1 */ 1, 11, 0, 5, /* seq 2 */ 9, 3, 8, 6};

struct Pool {
  std::vector<kc_kv_t> h;
  kc_kv_t* d;
};
template <int KVH, int HD> static Pool make_pool(unsigned seed) {
  Pool p;
  p.h = kv_pool((size_t)2 * n_layers * n_blocks * KVH * IG_KV_BLOCK, HD, seed);
  p.d = to_dev(p.h);
  return p;
}

// CPU reference: kc_attend_kv for every (row, kv head), token at position pos with sequence seq;
// sinks: one logit per query head (gpt-oss), or empty.
template <int HD, int GROUP, int KVH>
static void ref_attend(const Pool& P, const std::vector<float>& q, int ldq, int seq, int p, int window, float scale,
                       float softcap, const std::vector<float>& sinks, float* out_row) {
  const int first = window > 0 ? std::max(0, p - window + 1) : 0;
  std::vector<float> scores(KC_ATTN_SCRATCH(GROUP, HD, HD));
  (void)ldq;
  for (int h = 0; h < KVH; h++)
    kc_attend_kv(P.h.data(), n_layers, layer, n_blocks, KVH, IG_KV_BLOCK, HD, HD, 0, g_bt.data() + seq * bt_stride, h,
                 GROUP, first, p, q.data() + h * GROUP * HD, scale, softcap,
                 sinks.empty() ? nullptr : sinks.data() + h * GROUP, scores.data(), out_row + h * GROUP * HD);
}

// a sink logit per query head, around the scores' own range (some above every score), or none
static std::vector<float> make_sinks(bool with, int heads, unsigned seed) {
  return with ? rnd((size_t)heads, seed, -3.0f, 3.0f) : std::vector<float>();
}

template <int HD, int GROUP, int KVH>
static void decode_case(const char* name, int window, float softcap, int n_splits, int chunk, unsigned seed,
                        bool with_sinks = false) {
  constexpr int HEADS = KVH * GROUP;
  const std::vector<int> pos = {0, 20, 47}; // 3 sequences (block tables above hold up to 64 positions)
  const int S = (int)pos.size(), ldq = HEADS * HD + 8, ldo = HEADS * HD + 4;
  const float scale = 1.0f / std::sqrt((float)HD);
  Pool P = make_pool<KVH, HD>(seed);
  const std::vector<float> q = rnd((size_t)S * ldq, seed + 1, -2.0f, 2.0f);
  const std::vector<float> sinks = make_sinks(with_sinks, HEADS, seed + 2);
  std::vector<float> want((size_t)S * ldo, 0.0f);
  for (int s = 0; s < S; s++) {
    const std::vector<float> qs(q.begin() + (size_t)s * ldq, q.begin() + (size_t)(s + 1) * ldq);
    ref_attend<HD, GROUP, KVH>(P, qs, ldq, s, pos[s], window, scale, softcap, sinks, want.data() + (size_t)s * ldo);
  }
  float *dSinks = with_sinks ? to_dev(sinks) : nullptr;
  float *dQ = to_dev(q), *dO = to_dev(std::vector<float>(want.size(), 0.0f));
  int *dBT = to_dev(g_bt), *dPos = to_dev(pos);
  float *dPO = to_dev(std::vector<float>((size_t)S * HEADS * n_splits * HD)),
        *dML = to_dev(std::vector<float>((size_t)S * HEADS * n_splits * 2));
  attn_decode_kernel<HD, GROUP, KVH><<<dim3(KVH, S, n_splits), 128>>>(dQ, ldq, P.d, n_layers, layer, n_blocks, dBT,
                                                                       bt_stride, dPos, window, scale, softcap, dSinks,
                                                                       chunk, dO, ldo, dPO, dML);
  CHECK(cudaGetLastError());
  if (n_splits > 1) {
    attn_decode_combine_kernel<HD, HEADS><<<dim3(HEADS, S), HD>>>(dPO, dML, n_splits, dSinks, dO, ldo);
    CHECK(cudaGetLastError());
  }
  const std::vector<float> got = from_dev(dO, want.size());
  expect_close(name, got.data(), want.data(), got.size(), 1e-4f);
  cudaFree(dQ), cudaFree(dO), cudaFree(dBT), cudaFree(dPos), cudaFree(dPO), cudaFree(dML), cudaFree(P.d), cudaFree(dSinks);
}

template <int HD, int GROUP, int KVH, int BQ>
static void prefill_case(const char* name, int window, float softcap, unsigned seed, bool with_sinks = false) {
  constexpr int HEADS = KVH * GROUP;
  // seq 0: 20 tokens from position 0 (first chunk); seq 1: 7 tokens from 13 (a later chunk);
  // seq 2: 1 token at 30. Batch rows: seq 0 = rows 0..19, seq 1 = 20..26, seq 2 = 27.
  const std::vector<int> tok0 = {0, 20, 27}, pos0 = {0, 13, 30}, ntok = {20, 7, 1};
  const int S = 3, T = 28, ldq = HEADS * HD + 4, ldo = HEADS * HD;
  const float scale = 1.0f / std::sqrt((float)HD);
  Pool P = make_pool<KVH, HD>(seed);
  const std::vector<float> q = rnd((size_t)T * ldq, seed + 1, -2.0f, 2.0f);
  const std::vector<float> sinks = make_sinks(with_sinks, HEADS, seed + 2);
  std::vector<float> want((size_t)T * ldo, 0.0f);
  for (int s = 0; s < S; s++)
    for (int i = 0; i < ntok[s]; i++) {
      const int row = tok0[s] + i;
      const std::vector<float> qs(q.begin() + (size_t)row * ldq, q.begin() + (size_t)(row + 1) * ldq);
      ref_attend<HD, GROUP, KVH>(P, qs, ldq, s, pos0[s] + i, window, scale, softcap, sinks, want.data() + (size_t)row * ldo);
    }
  float *dSinks = with_sinks ? to_dev(sinks) : nullptr;
  float *dQ = to_dev(q), *dO = to_dev(std::vector<float>(want.size(), 0.0f));
  int *dBT = to_dev(g_bt), *dT0 = to_dev(tok0), *dP0 = to_dev(pos0), *dN = to_dev(ntok);
  attn_prefill_kernel<HD, GROUP, KVH, BQ><<<dim3((20 + BQ - 1) / BQ, KVH, S), 128>>>(
      dQ, ldq, P.d, n_layers, layer, n_blocks, dBT, bt_stride, dT0, dP0, dN, window, scale, softcap, dSinks, dO, ldo);
  CHECK(cudaGetLastError());
  const std::vector<float> got = from_dev(dO, want.size());
  expect_close(name, got.data(), want.data(), got.size(), 1e-4f);
  cudaFree(dQ), cudaFree(dO), cudaFree(dBT), cudaFree(dT0), cudaFree(dP0), cudaFree(dN), cudaFree(P.d), cudaFree(dSinks);
}

int main() {
  decode_case<64, 1, 2>("decode HD64 G1 KVH2", 0, 0.0f, 1, 0, 1);
  decode_case<32, 3, 2>("decode HD32 G3 KVH2 window8", 8, 0.0f, 1, 0, 2);
  decode_case<64, 4, 1>("decode HD64 G4 KVH1 softcap0.7", 0, 0.7f, 1, 0, 3);
  decode_case<32, 3, 2>("decode HD32 G3 split-K 4x16", 0, 0.0f, 4, 16, 4);
  decode_case<64, 4, 2>("decode HD64 G4 split-K 3x8 window20 softcap1.5", 20, 1.5f, 3, 8, 5);
  decode_case<128, 1, 1>("decode HD128 G1 split-K 2x32", 0, 0.0f, 2, 32, 6);
  prefill_case<64, 1, 2, 8>("prefill HD64 G1 KVH2 BQ8", 0, 0.0f, 11);
  prefill_case<32, 3, 2, 8>("prefill HD32 G3 KVH2 BQ8 window6", 6, 0.0f, 12);
  prefill_case<64, 4, 1, 4>("prefill HD64 G4 KVH1 BQ4 softcap0.7", 0, 0.7f, 13);
  prefill_case<32, 4, 2, 16>("prefill HD32 G4 BQ16 window9 softcap1.5", 9, 1.5f, 14);
  // gpt-oss's sinks: one split, split-K (folded in once, by the combine), a window; prefill
  decode_case<64, 2, 2>("decode HD64 G2 KVH2 sinks", 0, 0.0f, 1, 0, 21, true);
  decode_case<32, 4, 2>("decode HD32 G4 split-K 3x8 window20 sinks", 20, 0.0f, 3, 8, 22, true);
  prefill_case<64, 2, 2, 8>("prefill HD64 G2 KVH2 BQ8 window6 sinks", 6, 0.0f, 23, true);
  return finish();
}
