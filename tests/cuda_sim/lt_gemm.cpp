// cuBLASLt calls as ingot makes them (runtime/cuda/cuda_host.h), written against the real
// <cublasLt.h>. Under cudasim they run on the simulator's reference GEMM: each case's inputs and
// result go to the file named by argv[1] for the test to recompute with numpy; refusals print
// their status. With the real toolkit headers the program must compile and link unchanged
// (the shim's API is the library's).
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

static uint32_t rng = 12345u;
static float next_value() { // dyadic values in [-2, 2): exact in f16, bf16 and f32
  rng = rng * 1664525u + 1013904223u;
  return (float)((int)(rng >> 24) - 128) / 64.0f;
}

// A device copy of n values in type t (CUDA_R_32F / 16F / 16BF) at byte offset `skew` of its allocation.
static void* upload(const std::vector<float>& v, cudaDataType_t t, size_t skew = 0) {
  const size_t es = t == CUDA_R_32F ? 4 : 2;
  std::vector<unsigned char> bytes(v.size() * es);
  for (size_t i = 0; i < v.size(); i++) {
    if (t == CUDA_R_32F) std::memcpy(&bytes[i * 4], &v[i], 4);
    else if (t == CUDA_R_16F) { __half h = __float2half(v[i]); std::memcpy(&bytes[i * 2], &h, 2); }
    else { __nv_bfloat16 h = __float2bfloat16(v[i]); std::memcpy(&bytes[i * 2], &h, 2); }
  }
  unsigned char* p = nullptr;
  if (cudaMalloc((void**)&p, bytes.size() + skew) != cudaSuccess) return nullptr;
  cudaMemcpy(p + skew, bytes.data(), bytes.size(), cudaMemcpyHostToDevice);
  return p + skew;
}

struct Case { int m, n, k; cudaDataType_t type; int transa, bias; float alpha, beta; };

static cublasStatus_t run_case(cublasLtHandle_t lt, const Case& c, FILE* out, size_t skew = 0, int wrong_k = 0,
                               cudaDataType_t btype = (cudaDataType_t)-1) {
  const int lda = c.transa ? c.k : c.m;
  std::vector<float> a((size_t)c.m * c.k), b((size_t)c.k * c.n), cc((size_t)c.m * c.n), bias(c.m);
  for (float& x : a) x = next_value();
  for (float& x : b) x = next_value();
  for (float& x : cc) x = next_value();
  for (float& x : bias) x = next_value();
  if ((int)btype < 0) btype = c.type;
  void *A = upload(a, c.type), *B = upload(b, btype, skew), *C = upload(cc, CUDA_R_32F), *BIAS = upload(bias, CUDA_R_32F);
  float* D = nullptr;
  cudaMalloc((void**)&D, sizeof(float) * c.m * c.n);
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatmulPreference_t pref;
  cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  const int32_t ta = c.transa ? CUBLAS_OP_T : CUBLAS_OP_N, bias_type = CUDA_R_32F;
  const uint32_t epi = CUBLASLT_EPILOGUE_BIAS, align = 16;
  const uint64_t ws = 1 << 20;
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  if (c.bias) {
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &BIAS, sizeof BIAS);
  }
  cublasLtMatrixLayoutCreate(&la, c.type, c.transa ? c.k : c.m, c.transa ? c.m : c.k, lda);
  cublasLtMatrixLayoutCreate(&lb, btype, c.k + wrong_k, c.n, c.k + wrong_k);
  cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, c.m, c.n, c.m);
  cublasLtMatmulPreferenceCreate(&pref);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  for (int a_ = CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES; a_ <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES; a_++)
    cublasLtMatmulPreferenceSetAttribute(pref, (cublasLtMatmulPreferenceAttributes_t)a_, &align, sizeof align);
  void* work = nullptr;
  cudaMalloc(&work, ws);
  cublasLtMatmulHeuristicResult_t res;
  int found = 0;
  cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 1, &res, &found);
  if (s == CUBLAS_STATUS_SUCCESS && found == 1)
    s = cublasLtMatmul(lt, op, &c.alpha, A, la, B, lb, &c.beta, C, lc, D, lc, &res.algo, work, ws, nullptr);
  cudaDeviceSynchronize();
  if (s == CUBLAS_STATUS_SUCCESS && out) {
    std::vector<float> d((size_t)c.m * c.n);
    cudaMemcpy(d.data(), D, sizeof(float) * d.size(), cudaMemcpyDeviceToHost);
    const int32_t head[6] = {c.m, c.n, c.k, (int32_t)c.type, c.transa, c.bias};
    const float scal[2] = {c.alpha, c.beta};
    fwrite(head, 4, 6, out), fwrite(scal, 4, 2, out);
    fwrite(a.data(), 4, a.size(), out), fwrite(b.data(), 4, b.size(), out), fwrite(cc.data(), 4, cc.size(), out);
    fwrite(bias.data(), 4, bias.size(), out), fwrite(d.data(), 4, d.size(), out);
  }
  cublasLtMatrixLayoutDestroy(la), cublasLtMatrixLayoutDestroy(lb), cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatmulDescDestroy(op);
  cudaFree(work), cudaFree(D), cudaFree(C), cudaFree(BIAS), cudaFree(A);
  cudaFree((unsigned char*)B - skew);
  return s;
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  FILE* out = fopen(argv[1], "wb");
  cublasLtHandle_t lt;
  if (!out || cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) return 1;
  const Case cases[] = {
      {37, 19, 64, CUDA_R_32F, 1, 0, 1.0f, 0.0f},   // ingot's use: W^T X, f32 weights
      {40, 17, 96, CUDA_R_16F, 1, 1, 1.0f, 0.0f},   // f16 in, f32 out, bias epilogue
      {24, 33, 48, CUDA_R_16BF, 1, 1, 1.0f, 0.0f},  // bf16 in
      {29, 8, 40, CUDA_R_16F, 0, 0, 0.5f, 1.0f},    // A not transposed, alpha and beta
  };
  int failed = 0;
  for (const Case& c : cases) {
    const cublasStatus_t s = run_case(lt, c, out);
    if (s != CUBLAS_STATUS_SUCCESS) printf("case %dx%dx%d: %s\n", c.m, c.n, c.k, cublasLtGetStatusString(s)), failed++;
  }
  fclose(out);
  // refusals: shapes that do not chain, mixed input types, a pointer below the promised alignment
  printf("k mismatch: %s\n", cublasLtGetStatusString(run_case(lt, cases[0], nullptr, 0, 8)));
  printf("mixed types: %s\n", cublasLtGetStatusString(run_case(lt, cases[1], nullptr, 0, 0, CUDA_R_32F)));
  printf("misaligned B: %s\n", cublasLtGetStatusString(run_case(lt, cases[1], nullptr, 4)));
  cublasLtDestroy(lt);
  if (!failed) printf("ALL OK\n");
  return failed != 0;
}
