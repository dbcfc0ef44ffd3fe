// t_rope_kv.cu — rope_kv_kernel against kc_rope + kc_kv_store: adjacent / half pairs, partial rotary dims, fused qkv rows, shuffled block tables; ig_row_kv_store against kc_kv_store (separate and shared value rows, q8_0's edge blocks).
// Also built with IG_KV_Q8 and KC_KV_Q8 (t_rope_kv_kvq8 in tests/test_cuda_kernels.py): the stored q8_0
// bytes must be the CPU's.
#include "harness.h"
#include "rope_kv.cuh"
static_assert(sizeof(ig_kv_t) == sizeof(kc_kv_t), "IG_KV_* and KC_KV_* set alike: one pool element");

// The pools after the stores: f32 rows within 1e-6 (RoPE's products may round differently in the
// last bit), q8_0 rows byte for byte (each value's rounding is pinned down: common.cuh).
static void expect_pool(const char* what, const std::vector<kc_kv_t>& got, const std::vector<kc_kv_t>& want) {
#if KC_KV_Q8
  expect_same_bytes(what, got.data(), want.data(), got.size());
#else
  expect_close(what, got.data(), want.data(), got.size(), 1e-6f);
#endif
}

template <int HEADS, int KVH, int HD, int ROT, bool ADJ> static void rope_case(const char* name, unsigned seed) {
  const int n_layers = 2, layer = 1, n_blocks = 8, max_ctx = 64, bt_stride = 4;
  // 2 sequences, 5 tokens: seq 0 at positions 14..16 (crosses a block), seq 1 at 3, 40
  const std::vector<int> pos = {14, 15, 16, 3, 40}, seq = {0, 0, 0, 1, 1};
  const std::vector<int> bt = {5, 2, 7, 0, /* seq 1 */ 6, 1, 3, 4}; // shuffled blocks
  const int T = (int)pos.size(), ld = (HEADS + 2 * KVH) * HD;      // fused q|k|v rows
  std::vector<float> qkv = rnd((size_t)T * ld, seed), cs((size_t)max_ctx * ROT);
  kc_rope_table(cs.data(), max_ctx, ROT, 10000.0);
  const std::vector<kc_kv_t> pool0 = kv_pool((size_t)2 * n_layers * n_blocks * KVH * IG_KV_BLOCK, HD, seed + 1);
  std::vector<float> want_q = qkv;
  std::vector<kc_kv_t> want_pool = pool0;
  for (int t = 0; t < T; t++) {
    float* row = want_q.data() + (size_t)t * ld;
    std::vector<float> k(row + HEADS * HD, row + (HEADS + KVH) * HD);
    kc_rope(row, HEADS, HD, ROT, cs.data(), pos[t], ADJ ? 1 : 0);
    kc_rope(k.data(), KVH, HD, ROT, cs.data(), pos[t], ADJ ? 1 : 0);
    kc_kv_store(want_pool.data(), n_layers, layer, n_blocks, KVH, IG_KV_BLOCK, HD, bt.data() + seq[t] * bt_stride,
                pos[t], k.data(), row + (HEADS + KVH) * HD);
  }
  float *dQKV = to_dev(qkv), *dCS = to_dev(cs);
  kc_kv_t* dPool = to_dev(pool0);
  int *dPos = to_dev(pos), *dSeq = to_dev(seq), *dBT = to_dev(bt);
  rope_kv_kernel<HEADS, KVH, HD, ROT, ADJ><<<T, 128>>>(dQKV, ld, dQKV + HEADS * HD, ld, dQKV + (HEADS + KVH) * HD, ld,
                                                       dCS, dPos, dSeq, dBT, bt_stride, dPool, n_layers, layer,
                                                       n_blocks);
  CHECK(cudaGetLastError());
  const std::vector<float> got_q = from_dev(dQKV, qkv.size());
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s q (and k, v rows untouched)", name);
  expect_close(buf, got_q.data(), want_q.data(), got_q.size(), 1e-6f);
  std::snprintf(buf, sizeof buf, "%s KV pool", name);
  expect_pool(buf, from_dev(dPool, pool0.size()), want_pool);
  cudaFree(dQKV), cudaFree(dCS), cudaFree(dPool), cudaFree(dPos), cudaFree(dSeq), cudaFree(dBT);
}

// Row t's k (and v unless SHARED: MLA's latent rows, values = their first columns) into position
// pos[t] of the pool, through the helper the generated row kernels call.
template <int KVH, int HD, bool SHARED>
__global__ void kv_store_kernel(const float* k, const float* v, ig_kv_t* kv, int n_layers, int layer, int n_blocks,
                                const int* bt, const int* pos) {
  const int t = blockIdx.x;
  ig_row_kv_store<KVH, HD>(k + (long long)t * KVH * HD, SHARED ? nullptr : v + (long long)t * KVH * HD, kv, n_layers,
                           layer, n_blocks, bt, pos[t]);
}

// Rows with q8_0's edge cases among random ones: a block of zeros (scale 0), exact ties
// (max 127: scale 1, x = n + 0.5 rounds to the even n), a scale past f16's range (stored as
// infinity, the int8 from the f32 scale), one below it (stored as 0), values of mixed magnitude,
// a scale that a multiply by 1/127 would get wrong.
template <int KVH, int HD, bool SHARED> static void kv_store_case(const char* name, unsigned seed) {
  const int n_layers = 3, layer = 2, n_blocks = 6, T = 4;
  const std::vector<int> pos = {0, 1, 17, 31}, bt = {4, 1}; // one sequence, blocks 4 then 1
  std::vector<float> k = rnd((size_t)T * KVH * HD, seed, -3.0f, 3.0f), v = rnd((size_t)T * KVH * HD, seed + 1);
  for (int i = 0; i < 32; i++) {
    k[i] = 0.0f;                                                     // token 0, first block: zeros
    k[32 + i] = i == 0 ? 127.0f : (i % 2 ? 1.0f : -1.0f) * (float)(i * 4 % 127) + (i % 3 ? 0.5f : -0.5f); // ties
    v[i] = (i % 2 ? -1.0f : 1.0f) * 1e7f * (float)(i + 1) / 32.0f;  // max|x| / 127 > 65504
    v[32 + i] = 1e-30f * (float)(i - 16);                            // a scale below f16's subnormals
  }
  for (int i = 0; i < 32; i++) k[(size_t)KVH * HD + i] *= i % 8 == 0 ? 1000.0f : 0.001f; // token 1: mixed
  // token 2: a block whose max makes amax / 127 differ from amax * (1 / 127.0f) in the last bit,
  // with a value whose int8 then differs (1 rather than 2): the scale must be the divide's
  float* b2 = k.data() + (size_t)2 * KVH * HD;
  for (int i = 2; i < 32; i++) b2[i] *= 0.5f;
  b2[0] = 0x1.4647d2p+1f, b2[1] = 0x1.ed4648p-6f;
  const std::vector<kc_kv_t> pool0 = kv_pool((size_t)2 * n_layers * n_blocks * KVH * IG_KV_BLOCK, HD, seed + 2);
  std::vector<kc_kv_t> want = pool0;
  for (int t = 0; t < T; t++)
    kc_kv_store(want.data(), n_layers, layer, n_blocks, KVH, IG_KV_BLOCK, HD, bt.data(), pos[t],
                k.data() + (size_t)t * KVH * HD, SHARED ? nullptr : v.data() + (size_t)t * KVH * HD);
  float *dK = to_dev(k), *dV = to_dev(v);
  kc_kv_t* dPool = to_dev(pool0);
  int *dBT = to_dev(bt), *dPos = to_dev(pos);
  kv_store_kernel<KVH, HD, SHARED><<<T, 64>>>(dK, dV, dPool, n_layers, layer, n_blocks, dBT, dPos);
  CHECK(cudaGetLastError());
  const std::vector<kc_kv_t> got = from_dev(dPool, pool0.size());
  expect_same_bytes(name, got.data(), want.data(), got.size() * sizeof(kc_kv_t)); // a copy or the same rounding
  cudaFree(dK), cudaFree(dV), cudaFree(dPool), cudaFree(dBT), cudaFree(dPos);
}

int main() {
  rope_case<6, 2, 32, 32, true>("rope_kv adjacent H6 KVH2 HD32", 1);
  rope_case<4, 4, 64, 64, false>("rope_kv halves H4 KVH4 HD64", 2);
  rope_case<3, 1, 64, 32, false>("rope_kv halves partial ROT32/HD64 H3 KVH1", 3);
  rope_case<4, 2, 32, 16, true>("rope_kv adjacent partial ROT16/HD32", 4);
  kv_store_case<2, 64, false>("kv_store KVH2 HD64 (edge blocks)", 5);
  kv_store_case<1, 96, true>("kv_store shared rows HD96 (edge blocks)", 6);
  kv_store_case<3, 128, false>("kv_store KVH3 HD128 (edge blocks)", 7);
  return finish();
}
