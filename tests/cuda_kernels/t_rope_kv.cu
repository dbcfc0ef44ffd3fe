// t_rope_kv.cu — rope_kv_kernel against kc_rope + kc_kv_store: adjacent / half pairs, partial rotary dims, fused qkv rows, shuffled block tables.
#include "harness.h"
#include "rope_kv.cuh"

template <int HEADS, int KVH, int HD, int ROT, bool ADJ> static void rope_case(const char* name, unsigned seed) {
  const int n_layers = 2, layer = 1, n_blocks = 8, max_ctx = 64, bt_stride = 4;
  // 2 sequences, 5 tokens: seq 0 at positions 14..16 (crosses a block), seq 1 at 3, 40
  const std::vector<int> pos = {14, 15, 16, 3, 40}, seq = {0, 0, 0, 1, 1};
  const std::vector<int> bt = {5, 2, 7, 0, /* seq 1 */ 6, 1, 3, 4}; // shuffled blocks
  const int T = (int)pos.size(), ld = (HEADS + 2 * KVH) * HD;      // fused q|k|v rows
  std::vector<float> qkv = rnd((size_t)T * ld, seed), cs((size_t)max_ctx * ROT);
  kc_rope_table(cs.data(), max_ctx, ROT, 10000.0);
  const size_t pool_n = (size_t)2 * n_layers * n_blocks * KVH * IG_KV_BLOCK * HD;
  const std::vector<float> pool0 = rnd(pool_n, seed + 1);
  std::vector<float> want_q = qkv, want_pool = pool0;
  for (int t = 0; t < T; t++) {
    float* row = want_q.data() + (size_t)t * ld;
    std::vector<float> k(row + HEADS * HD, row + (HEADS + KVH) * HD);
    kc_rope(row, HEADS, HD, ROT, cs.data(), pos[t], ADJ ? 1 : 0);
    kc_rope(k.data(), KVH, HD, ROT, cs.data(), pos[t], ADJ ? 1 : 0);
    kc_kv_store(want_pool.data(), n_layers, layer, n_blocks, KVH, IG_KV_BLOCK, HD, bt.data() + seq[t] * bt_stride,
                pos[t], k.data(), row + (HEADS + KVH) * HD);
  }
  float *dQKV = to_dev(qkv), *dCS = to_dev(cs), *dPool = to_dev(pool0);
  int *dPos = to_dev(pos), *dSeq = to_dev(seq), *dBT = to_dev(bt);
  rope_kv_kernel<HEADS, KVH, HD, ROT, ADJ><<<T, 128>>>(dQKV, ld, dQKV + HEADS * HD, ld, dQKV + (HEADS + KVH) * HD, ld,
                                                       dCS, dPos, dSeq, dBT, bt_stride, dPool, n_layers, layer,
                                                       n_blocks);
  CHECK(cudaGetLastError());
  const std::vector<float> got_q = from_dev(dQKV, qkv.size()), got_pool = from_dev(dPool, pool_n);
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s q (and k, v rows untouched)", name);
  expect_close(buf, got_q.data(), want_q.data(), got_q.size(), 1e-6f);
  std::snprintf(buf, sizeof buf, "%s KV pool", name);
  expect_close(buf, got_pool.data(), want_pool.data(), got_pool.size(), 1e-6f);
  cudaFree(dQKV), cudaFree(dCS), cudaFree(dPool), cudaFree(dPos), cudaFree(dSeq), cudaFree(dBT);
}

int main() {
  rope_case<6, 2, 32, 32, true>("rope_kv adjacent H6 KVH2 HD32", 1);
  rope_case<4, 4, 64, 64, false>("rope_kv halves H4 KVH4 HD64", 2);
  rope_case<3, 1, 64, 32, false>("rope_kv halves partial ROT32/HD64 H3 KVH1", 3);
  rope_case<4, 2, 32, 16, true>("rope_kv adjacent partial ROT16/HD32", 4);
  return finish();
}
