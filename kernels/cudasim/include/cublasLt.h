// cudasim shim: cuBLASLt's matmul API (the subset ingot calls, same names, types and values as
// the real header) over a reference GEMM on the host. This is the one substitution cudasim makes
// for a library call: cuBLASLt's kernels are closed, so the simulator computes what they compute,
//   D = alpha * op(A) op(B) + beta * C (+ bias per row of D with CUBLASLT_EPILOGUE_BIAS),
// column-major, f32/f16/bf16 A and B, f32 C/D (or C/D of A's type), f32 compute and scale, every
// product accumulated in f32 in k order.
//
// It also refuses what cuBLASLt refuses, with the same status: layouts whose shapes do not chain
// (m x k by k x n into m x n), a leading dimension shorter than a column, type combinations it has
// no kernel for, and pointers less aligned than the preference the algorithm was chosen with
// (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES, 256 by default, as in cuBLASLt).
#pragma once
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "library_types.h"

typedef enum {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_ARCH_MISMATCH = 8,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_INTERNAL_ERROR = 14,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
} cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_TF32 = 77 } cublasComputeType_t;
typedef enum {
  CUBLASLT_MATMUL_DESC_COMPUTE_TYPE = 0,
  CUBLASLT_MATMUL_DESC_SCALE_TYPE = 1,
  CUBLASLT_MATMUL_DESC_TRANSA = 3,
  CUBLASLT_MATMUL_DESC_TRANSB = 4,
  CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
  CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
  CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26,
} cublasLtMatmulDescAttributes_t;
typedef enum { CUBLASLT_EPILOGUE_DEFAULT = 1, CUBLASLT_EPILOGUE_BIAS = 4 } cublasLtEpilogue_t;
typedef enum {
  CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,
} cublasLtMatmulPreferenceAttributes_t;

struct cublasLtContext { int created; };
typedef struct cublasLtContext* cublasLtHandle_t;
typedef struct {
  int32_t compute, scale, transa, transb;
  uint32_t epilogue;
  const void* bias;
  int32_t bias_type;
} cublasLtMatmulDescOpaque_t;
typedef cublasLtMatmulDescOpaque_t* cublasLtMatmulDesc_t;
typedef struct {
  int32_t type;
  uint64_t rows, cols;
  int64_t ld;
} cublasLtMatrixLayoutOpaque_t;
typedef cublasLtMatrixLayoutOpaque_t* cublasLtMatrixLayout_t;
typedef struct {
  uint64_t max_workspace;
  uint32_t align[4]; // A, B, C, D
} cublasLtMatmulPreferenceOpaque_t;
typedef cublasLtMatmulPreferenceOpaque_t* cublasLtMatmulPreference_t;
typedef struct { uint64_t data[8]; } cublasLtMatmulAlgo_t; // data[0..3]: the alignments it assumes
typedef struct {
  cublasLtMatmulAlgo_t algo;
  size_t workspaceSize;
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
} cublasLtMatmulHeuristicResult_t;

namespace cudasim { namespace lt {
// Element size of a supported matrix type, 0 for any other.
static inline int elem_bytes(int32_t t) { return t == CUDA_R_32F ? 4 : (t == CUDA_R_16F || t == CUDA_R_16BF) ? 2 : 0; }
static inline float load(const void* p, int32_t t, uint64_t i) {
  if (t == CUDA_R_32F) return static_cast<const float*>(p)[i];
  const uint16_t h = static_cast<const uint16_t*>(p)[i];
  return t == CUDA_R_16F ? ::cudasim::detail::f16_to_f32(h) : ::cudasim::detail::bf16_to_f32(h);
}
static inline void store(void* p, int32_t t, uint64_t i, float v) {
  if (t == CUDA_R_32F) static_cast<float*>(p)[i] = v;
  else static_cast<uint16_t*>(p)[i] = t == CUDA_R_16F ? ::cudasim::detail::f32_to_f16(v) : ::cudasim::detail::f32_to_bf16(v);
}
// Whether cuBLASLt has kernels for this operation: f32 compute and scale; A and B of one type; C/D
// f32 or of A's type; bias f32 (or D's type); shapes that chain; columns within their ld.
static inline cublasStatus_t check(const cublasLtMatmulDescOpaque_t* op, const cublasLtMatrixLayoutOpaque_t* a,
                                   const cublasLtMatrixLayoutOpaque_t* b, const cublasLtMatrixLayoutOpaque_t* c,
                                   const cublasLtMatrixLayoutOpaque_t* d) {
  if (!op || !a || !b || !c || !d) return CUBLAS_STATUS_INVALID_VALUE;
  if ((op->compute != CUBLAS_COMPUTE_32F && op->compute != CUBLAS_COMPUTE_32F_FAST_TF32) || op->scale != CUDA_R_32F)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (!elem_bytes(a->type) || a->type != b->type || c->type != d->type || (d->type != CUDA_R_32F && d->type != a->type))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (op->epilogue != CUBLASLT_EPILOGUE_DEFAULT && op->epilogue != CUBLASLT_EPILOGUE_BIAS) return CUBLAS_STATUS_NOT_SUPPORTED;
  const int32_t bias_type = op->bias_type < 0 ? d->type : op->bias_type;
  if (op->epilogue == CUBLASLT_EPILOGUE_BIAS && bias_type != CUDA_R_32F && bias_type != d->type) return CUBLAS_STATUS_NOT_SUPPORTED;
  const uint64_t m = op->transa == CUBLAS_OP_N ? a->rows : a->cols, k = op->transa == CUBLAS_OP_N ? a->cols : a->rows;
  const uint64_t kb = op->transb == CUBLAS_OP_N ? b->rows : b->cols, n = op->transb == CUBLAS_OP_N ? b->cols : b->rows;
  if (k != kb || c->rows != m || c->cols != n || d->rows != m || d->cols != n) return CUBLAS_STATUS_INVALID_VALUE;
  for (const cublasLtMatrixLayoutOpaque_t* l : {a, b, c, d})
    if (l->ld < 1 || (uint64_t)l->ld < l->rows) return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}
// D = alpha op(A) op(B) + beta C (+ bias): every product accumulated in f32, in k order.
static inline void gemm(const cublasLtMatmulDescOpaque_t* op, const cublasLtMatrixLayoutOpaque_t* a,
                        const cublasLtMatrixLayoutOpaque_t* b, const cublasLtMatrixLayoutOpaque_t* c,
                        const cublasLtMatrixLayoutOpaque_t* d, float al, float be, const void* A, const void* B,
                        const void* C, void* D) {
  const bool ta = op->transa == CUBLAS_OP_T, tb = op->transb == CUBLAS_OP_T;
  const uint64_t m = d->rows, n = d->cols, k = ta ? a->rows : a->cols;
  const int32_t bias_type = op->bias_type < 0 ? d->type : op->bias_type;
  for (uint64_t j = 0; j < n; j++)
    for (uint64_t i = 0; i < m; i++) {
      float acc = 0.0f;
      for (uint64_t p = 0; p < k; p++) {
        const float x = load(A, a->type, ta ? i * a->ld + p : p * a->ld + i);
        const float y = load(B, b->type, tb ? p * b->ld + j : j * b->ld + p);
        acc = fmaf(x, y, acc);
      }
      float v = al * acc;
      if (be != 0.0f) v += be * load(C, c->type, j * c->ld + i);
      if (op->epilogue == CUBLASLT_EPILOGUE_BIAS) v += load(op->bias, bias_type, i);
      store(D, d->type, j * d->ld + i, v);
    }
}
}}  // namespace cudasim::lt

static inline cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
  *h = static_cast<cublasLtHandle_t>(calloc(1, sizeof(struct cublasLtContext)));
  return *h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}
static inline cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) { free(h); return CUBLAS_STATUS_SUCCESS; }
static inline const char* cublasLtGetStatusString(cublasStatus_t s) {
  switch (s) {
  case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
  case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
  case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
  case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
  default: return "CUBLAS_STATUS_INTERNAL_ERROR";
  }
}
static inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* op, cublasComputeType_t compute,
                                                      cudaDataType_t scale) {
  *op = static_cast<cublasLtMatmulDesc_t>(calloc(1, sizeof(cublasLtMatmulDescOpaque_t)));
  if (!*op) return CUBLAS_STATUS_ALLOC_FAILED;
  (*op)->compute = compute, (*op)->scale = scale, (*op)->transa = (*op)->transb = CUBLAS_OP_N;
  (*op)->epilogue = CUBLASLT_EPILOGUE_DEFAULT, (*op)->bias_type = -1;
  return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t op) { free(op); return CUBLAS_STATUS_SUCCESS; }
static inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t op, cublasLtMatmulDescAttributes_t attr,
                                                            const void* buf, size_t size) {
  if (!op || !buf) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
  case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: if (size != 4) break; memcpy(&op->compute, buf, 4); return CUBLAS_STATUS_SUCCESS;
  case CUBLASLT_MATMUL_DESC_SCALE_TYPE: if (size != 4) break; memcpy(&op->scale, buf, 4); return CUBLAS_STATUS_SUCCESS;
  case CUBLASLT_MATMUL_DESC_TRANSA: if (size != 4) break; memcpy(&op->transa, buf, 4); return CUBLAS_STATUS_SUCCESS;
  case CUBLASLT_MATMUL_DESC_TRANSB: if (size != 4) break; memcpy(&op->transb, buf, 4); return CUBLAS_STATUS_SUCCESS;
  case CUBLASLT_MATMUL_DESC_EPILOGUE: if (size != 4) break; memcpy(&op->epilogue, buf, 4); return CUBLAS_STATUS_SUCCESS;
  case CUBLASLT_MATMUL_DESC_BIAS_POINTER: if (size != sizeof(void*)) break; memcpy(&op->bias, buf, size); return CUBLAS_STATUS_SUCCESS;
  case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: if (size != 4) break; memcpy(&op->bias_type, buf, 4); return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}
static inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType type, uint64_t rows,
                                                        uint64_t cols, int64_t ld) {
  *l = static_cast<cublasLtMatrixLayout_t>(calloc(1, sizeof(cublasLtMatrixLayoutOpaque_t)));
  if (!*l) return CUBLAS_STATUS_ALLOC_FAILED;
  (*l)->type = type, (*l)->rows = rows, (*l)->cols = cols, (*l)->ld = ld;
  return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) { free(l); return CUBLAS_STATUS_SUCCESS; }
static inline cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
  *p = static_cast<cublasLtMatmulPreference_t>(calloc(1, sizeof(cublasLtMatmulPreferenceOpaque_t)));
  if (!*p) return CUBLAS_STATUS_ALLOC_FAILED;
  for (int i = 0; i < 4; i++) (*p)->align[i] = 256;
  return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) { free(p); return CUBLAS_STATUS_SUCCESS; }
static inline cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                                  cublasLtMatmulPreferenceAttributes_t attr,
                                                                  const void* buf, size_t size) {
  if (!p || !buf) return CUBLAS_STATUS_INVALID_VALUE;
  if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES && size == 8) return memcpy(&p->max_workspace, buf, 8), CUBLAS_STATUS_SUCCESS;
  if (attr >= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES && attr <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES && size == 4)
    return memcpy(&p->align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], buf, 4), CUBLAS_STATUS_SUCCESS;
  return CUBLAS_STATUS_INVALID_VALUE;
}
// One algorithm (the reference GEMM) when the operation is supported; it records the pointer
// alignment it may assume, which cublasLtMatmul then checks.
static inline cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t op,
                                                            cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                                            cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                                            cublasLtMatmulPreference_t pref, int requested,
                                                            cublasLtMatmulHeuristicResult_t results[], int* returned) {
  if (!h || !pref || requested < 1 || !results || !returned) return CUBLAS_STATUS_INVALID_VALUE;
  *returned = 0;
  const cublasStatus_t s = ::cudasim::lt::check(op, a, b, c, d);
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  memset(&results[0], 0, sizeof results[0]);
  for (int i = 0; i < 4; i++) results[0].algo.data[i] = pref->align[i];
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t op, const void* alpha, const void* A,
                                            cublasLtMatrixLayout_t a, const void* B, cublasLtMatrixLayout_t b,
                                            const void* beta, const void* C, cublasLtMatrixLayout_t c, void* D,
                                            cublasLtMatrixLayout_t d, const cublasLtMatmulAlgo_t* algo, void* workspace,
                                            size_t workspace_bytes, cudaStream_t stream) {
  (void)workspace, (void)workspace_bytes;
  if (!h || !alpha || !beta || !A || !B || !C || !D || !algo) return CUBLAS_STATUS_INVALID_VALUE;
  const cublasStatus_t s = ::cudasim::lt::check(op, a, b, c, d);
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  const void* ptrs[4] = {A, B, C, D};
  for (int i = 0; i < 4; i++)
    if (algo->data[i] == 0 || (uintptr_t)ptrs[i] % algo->data[i] != 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (op->epilogue == CUBLASLT_EPILOGUE_BIAS && !op->bias) return CUBLAS_STATUS_INVALID_VALUE;
  // recorded by value while the stream is captured: the graph keeps this call's descriptors and scalars
  const cublasLtMatmulDescOpaque_t o = *op;
  const cublasLtMatrixLayoutOpaque_t la = *a, lb = *b, lc = *c, ld = *d;
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  return (cublasStatus_t)::cudasim::detail::submit(stream, [=]() {
    ::cudasim::lt::gemm(&o, &la, &lb, &lc, &ld, al, be, A, B, C, D);
    return 0;
  });
}
