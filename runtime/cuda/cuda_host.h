// cuda_host.h — the host side shared by every generated CUDA model: device state, weight upload,
// the paged KV pool in device memory, per-step metadata, kernel launches (nvcc-built code, NVRTC
// JIT for the exact device, or cudasim on a machine without a GPU), CUDA graphs for decode steps.
//
// Included by build/<name>/gen/model.cu after kernels.cu, model_weight_names and the generated constants:
//   N_WEIGHTS, MAX_TOKENS, VOCAB, MAX_CTX, BT_STRIDE, N_HEADS_MAX, HEAD_DIM_MAX, ARENA_BYTES_PER_TOKEN,
//   IG_N_KERNELS, IG_KERNEL_NAMES (launch table: extern "C" names or template instantiations),
//   IG_SOURCE_HASH, and kernel_sources.h (the NVRTC sources).
// The generated cu_run (after this file) launches one step's kernels in order.
#pragma once
#include <cublasLt.h> // types and signatures only: the library is opened at run time (cudasim: its reference GEMM)
#include <cuda_runtime.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <dlfcn.h>
#ifndef INGOT_CUDASIM
#include <nvrtc.h>
#include <unistd.h>
#endif

extern "C" {
#include "model_api.h"
}

#define IG_ATTN_CHUNK 256      // keys per split of split-K decode attention
#define IG_ATTN_MAX_SPLITS 32  // partial buffers are sized for this many splits
#define IG_MAX_GRAPHS 64       // captured decode graphs kept (keyed by tokens, splits)
#define IG_LT_PLANS 64         // cuBLASLt (shape, tokens) layouts and algorithms kept
#define IG_LT_WORKSPACE (32u << 20) // cuBLASLt workspace: 32 MiB, what its Hopper kernels ask for

// A cuBLASLt GEMM shape of the generated table IG_LT_SHAPE_LIST: Y[n][out] = X[n][in] W[out][in]^T (+ bias).
struct ig_lt_shape {
  int type; // cudaDataType of W and X
  int in, out, bias;
};
static const ig_lt_shape IG_LT_SHAPES[IG_LT_N_SHAPES + 1] = {IG_LT_SHAPE_LIST {0, 0, 0, 0}};

// Per-step choices the host makes before launching (attention kernel and its split).
struct ig_step_info {
  int decode_only; // every sequence brings one token and token i is sequence i
  int splits, chunk, max_ntok, max_len;
};

struct cu_model {
  const ingot_desc* desc; // the model's descriptor (model.c's, given to cu_model_init): its name, KV row bytes
  int device, cc, sm_count;
  cudaStream_t stream;
  union {
    void* slot[N_WEIGHTS];    // device copies, in WEIGHTS order
    model_weight_names named; // the same, by name (model.cu declares it: generator/weight_names.lua)
  } w;
  unsigned char* arena;
  float *logits, *hidden, *rope, *part_o, *part_ml; // hidden: [MAX_TOKENS][HIDDEN_DIM] (embeddings)
  unsigned* done;
  int* meta;       // device: [META_ARRAYS][MAX_TOKENS] per-token and per-sequence arrays, then block tables
  int* meta_host;  // pinned host copy
  size_t weight_bytes;
  long long launches; // kernels launched so far (--info / tests read the per-step count)
  char why[256];      // what failed inside cu_run, beyond a CUDA error
  // cuBLASLt (NULL: libcublasLt absent, INGOT_CUBLASLT=0, or no dense GEMM; the tiled GEMM runs)
  cublasLtHandle_t lt;
  cublasLtMatmulPreference_t lt_pref;
  void *lt_ws, *lt_x;
  cublasLtMatmulDesc_t lt_op[IG_LT_N_SHAPES + 1]; // per shape: transposed W, F32 compute, bias epilogue
  cublasLtMatrixLayout_t lt_w[IG_LT_N_SHAPES + 1];
  struct {
    int shape, n; // n == 0: unused
    cublasLtMatrixLayout_t x, y;
    cublasLtMatmulAlgo_t algo;
  } lt_plan[IG_LT_PLANS];
  int lt_next; // the plan slot replaced next when all are taken
#ifndef INGOT_CUDASIM
  cudaLibrary_t module;           // NVRTC-compiled code for this exact device, or NULL
  cudaKernel_t fn[IG_N_KERNELS]; // its kernels, by launch-table index
#endif
  struct {
    int T, splits;
    cudaGraphExec_t exec;
  } graphs[IG_MAX_GRAPHS];
  int n_graphs, use_graphs;
  void* graph_kv; // the KV pool the graphs were captured with (its pointer is a kernel argument)
  void* graph_state; // and the recurrent state
  long long steps, graph_replays; // INGOT_CUDA_STATS=1 prints them at exit
};

enum { META_TOKENS, META_POS, META_SEQ, META_LOGIT_ROWS, META_HIDDEN_ROWS, META_TOK0, META_POS0, META_NTOK, META_DEC_POS,
       META_STATE_SLOT, META_ARRAYS };
#define META_INTS ((size_t)META_ARRAYS * MAX_TOKENS + (size_t)MAX_TOKENS * BT_STRIDE)

template <class T> struct ig_same { typedef T type; };

// Launches kernel k (launch-table index kid) with arguments converted to its parameter types.
template <typename... P>
static int ig_launch(cu_model* d, int kid, void (*k)(P...), dim3 grid, dim3 block, typename ig_same<P>::type... args) {
  d->launches++;
#ifdef INGOT_CUDASIM
  (void)kid;
  return cudasim::launch_on(d->stream, nullptr, k, grid, block, 0, args...) == cudaSuccess ? 0 : -1;
#else
  void* argv[] = {(void*)&args..., nullptr};
  const void* f = d->module ? (const void*)d->fn[kid] : (const void*)k; // cudaLaunchKernel takes either
  return cudaLaunchKernel(f, grid, block, argv, 0, d->stream) == cudaSuccess ? 0 : -1;
#endif
}

#define LAUNCH(kid, kernel, grid, block, ...)                                    \
  do {                                                                           \
    if (ig_launch(d, kid, kernel, grid, block, __VA_ARGS__) != 0) return -1;     \
  } while (0)
#define A(off) ((float*)(d->arena + (size_t)(off) * MAX_TOKENS))

static int cu_run(cu_model* d, const ig_step& st, const ig_step_info& si);

static int ig_fail(char* err, size_t errlen, const char* what, cudaError_t e) {
  snprintf(err, errlen, "CUDA: %s: %s", what, cudaGetErrorString(e));
  return -1;
}

#ifndef INGOT_CUDASIM
// ---- NVRTC: the embedded sources compiled for one architecture --------------------------------

// libnvrtc is opened when first needed, so the binary starts (and runs the embedded code) on a
// machine that has the driver but not the toolkit.
static struct {
  bool tried, ok;
  decltype(&nvrtcCreateProgram) create;
  decltype(&nvrtcAddNameExpression) add_name;
  decltype(&nvrtcCompileProgram) compile;
  decltype(&nvrtcGetProgramLogSize) log_size;
  decltype(&nvrtcGetProgramLog) log;
  decltype(&nvrtcGetCUBINSize) cubin_size;
  decltype(&nvrtcGetCUBIN) cubin;
  decltype(&nvrtcGetPTXSize) ptx_size;
  decltype(&nvrtcGetPTX) ptx;
  decltype(&nvrtcGetLoweredName) lowered;
  decltype(&nvrtcDestroyProgram) destroy;
  decltype(&nvrtcGetErrorString) error;
} ig_nvrtc;

static bool ig_nvrtc_open(char* err, size_t errlen) {
  if (ig_nvrtc.tried) {
    if (!ig_nvrtc.ok) snprintf(err, errlen, "libnvrtc not available");
    return ig_nvrtc.ok;
  }
  ig_nvrtc.tried = true;
  void* h = dlopen("libnvrtc.so.13", RTLD_NOW);
  if (!h) h = dlopen("libnvrtc.so", RTLD_NOW);
  if (!h) {
    snprintf(err, errlen, "libnvrtc not available: %s", dlerror());
    return false;
  }
#define IG_SYM(field, name) ig_nvrtc.field = (decltype(ig_nvrtc.field))dlsym(h, #name)
  IG_SYM(create, nvrtcCreateProgram); IG_SYM(add_name, nvrtcAddNameExpression); IG_SYM(compile, nvrtcCompileProgram);
  IG_SYM(log_size, nvrtcGetProgramLogSize); IG_SYM(log, nvrtcGetProgramLog); IG_SYM(cubin_size, nvrtcGetCUBINSize);
  IG_SYM(cubin, nvrtcGetCUBIN); IG_SYM(ptx_size, nvrtcGetPTXSize); IG_SYM(ptx, nvrtcGetPTX);
  IG_SYM(lowered, nvrtcGetLoweredName); IG_SYM(destroy, nvrtcDestroyProgram); IG_SYM(error, nvrtcGetErrorString);
#undef IG_SYM
  ig_nvrtc.ok = ig_nvrtc.create && ig_nvrtc.add_name && ig_nvrtc.compile && ig_nvrtc.log_size && ig_nvrtc.log &&
                ig_nvrtc.cubin_size && ig_nvrtc.cubin && ig_nvrtc.ptx_size && ig_nvrtc.ptx && ig_nvrtc.lowered &&
                ig_nvrtc.destroy && ig_nvrtc.error;
  if (!ig_nvrtc.ok) snprintf(err, errlen, "libnvrtc lacks a symbol");
  return ig_nvrtc.ok;
}

// Compiles kernel_sources.h for `arch` ("sm_90": a cubin; "compute_90": PTX) into a malloc'd image;
// lowered[] gets each launch-table kernel's symbol. 0, or -1 with err filled.
static int ig_nvrtc_compile(const char* arch, char** image, size_t* size, const char** lowered_out, char* err,
                            size_t errlen) {
  if (!ig_nvrtc_open(err, errlen)) return -1;
  nvrtcProgram prog;
  nvrtcResult r = ig_nvrtc.create(&prog, IG_SOURCES[0], "kernels.cu", IG_N_SOURCES - 1, IG_SOURCES + 1,
                                     IG_SOURCE_NAMES + 1);
  if (r != NVRTC_SUCCESS) {
    snprintf(err, errlen, "NVRTC: %s", ig_nvrtc.error(r));
    return -1;
  }
  for (int i = 0; i < IG_N_KERNELS; i++)
    if (strchr(IG_KERNEL_NAMES[i], '<')) ig_nvrtc.add_name(prog, IG_KERNEL_NAMES[i]);
  char opt_arch[64];
  snprintf(opt_arch, sizeof opt_arch, "--gpu-architecture=%s", arch);
  const char* opts[] = {opt_arch, "--std=c++17", "-DINGOT_NVRTC=1"};
  r = ig_nvrtc.compile(prog, 3, opts);
  if (r != NVRTC_SUCCESS) {
    size_t n = 0;
    ig_nvrtc.log_size(prog, &n);
    char* log = (char*)malloc(n + 1);
    if (log) ig_nvrtc.log(prog, log);
    snprintf(err, errlen, "NVRTC (%s): %s: %.600s", arch, ig_nvrtc.error(r), log ? log : "");
    free(log);
    ig_nvrtc.destroy(&prog);
    return -1;
  }
  const bool cubin = strncmp(arch, "sm_", 3) == 0;
  r = cubin ? ig_nvrtc.cubin_size(prog, size) : ig_nvrtc.ptx_size(prog, size);
  *image = r == NVRTC_SUCCESS ? (char*)malloc(*size) : NULL;
  if (*image) r = cubin ? ig_nvrtc.cubin(prog, *image) : ig_nvrtc.ptx(prog, *image);
  for (int i = 0; lowered_out && i < IG_N_KERNELS; i++) {
    lowered_out[i] = IG_KERNEL_NAMES[i];
    if (strchr(IG_KERNEL_NAMES[i], '<')) {
      const char* low = NULL;
      if (ig_nvrtc.lowered(prog, IG_KERNEL_NAMES[i], &low) == NVRTC_SUCCESS && low) lowered_out[i] = strdup(low);
    }
  }
  ig_nvrtc.destroy(&prog);
  if (!*image || r != NVRTC_SUCCESS) {
    snprintf(err, errlen, "NVRTC (%s): no image", arch);
    return -1;
  }
  return 0;
}

// INGOT_NVRTC_CHECK=80,90: compile the embedded sources to PTX for those architectures and say so on
// stderr (works without a GPU: how CI checks what the binary carries).
static void ig_nvrtc_check(const char* list) {
  char buf[128];
  snprintf(buf, sizeof buf, "%s", list);
  for (char* tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
    char arch[32], err[1024];
    snprintf(arch, sizeof arch, "compute_%s", tok);
    char* image = NULL;
    size_t size = 0;
    const char* lowered[IG_N_KERNELS];
    if (ig_nvrtc_compile(arch, &image, &size, lowered, err, sizeof err) != 0) {
      fprintf(stderr, "nvrtc: %s: FAILED: %s\n", arch, err);
      continue;
    }
    int found = 0;
    for (int i = 0; i < IG_N_KERNELS; i++) found += strstr(image, lowered[i]) != NULL;
    fprintf(stderr, "nvrtc: %s: ok, %zu bytes of PTX, %d of %d kernels\n", arch, size, found, IG_N_KERNELS);
    free(image);
  }
}

// Writes bytes to path through a temporary file and a rename (readers never see half a file).
static void ig_write_file(const char* path, const void* bytes, size_t n) {
  char tmp[800];
  snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
  FILE* o = fopen(tmp, "wb");
  if (!o) return;
  const bool ok = fwrite(bytes, 1, n, o) == n;
  if (fclose(o) == 0 && ok) rename(tmp, path);
  else remove(tmp);
}

// The kernels' symbols saved beside a cached cubin (<path>.names, one per line, launch-table
// order) into lowered[]; 0, or -1 when absent or not matching this binary's table.
static int ig_read_names(const char* path, const char** lowered) {
  char names[800], line[1024];
  snprintf(names, sizeof names, "%s.names", path);
  FILE* f = fopen(names, "r");
  if (!f) return -1;
  int i = 0;
  while (i < IG_N_KERNELS && fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    lowered[i++] = strdup(line);
  }
  fclose(f);
  return i == IG_N_KERNELS ? 0 : -1;
}

static const int ig_cubin_archs[] = {IG_CUBIN_ARCHS};
static const int ig_n_cubin_archs = (int)(sizeof ig_cubin_archs / sizeof ig_cubin_archs[0]);

// Whether the embedded code runs on compute capability cc: a cubin for sm_XY runs on the GPUs of
// major version X from Y up, and the newest architecture's PTX is compiled by the driver for
// any later GPU (never an earlier one).
static bool ig_embedded_runs(int cc) {
  for (int i = 0; i < ig_n_cubin_archs; i++)
    if (ig_cubin_archs[i] / 10 == cc / 10 && ig_cubin_archs[i] <= cc) return true;
  return cc >= ig_cubin_archs[ig_n_cubin_archs - 1];
}

// "sm_80/86/89/90": the architectures of the embedded cubins, for messages
static void ig_cubin_arch_list(char* out, size_t n) {
  size_t k = (size_t)snprintf(out, n, "sm_");
  for (int i = 0; i < ig_n_cubin_archs && k < n; i++)
    k += (size_t)snprintf(out + k, n - k, "%s%d", i ? "/" : "", ig_cubin_archs[i]);
}

// Loads (or compiles and caches) this device's code: $INGOT_CACHE_DIR or ~/.cache/ingot, file
// <source hash>-sm_<cc>.cubin. INGOT_JIT=0: never; 1: always; default: only for devices the
// embedded cubins (IG_CUBIN_ARCHS, the build's --cuda-arch) do not cover exactly.
static void ig_jit_load(cu_model* d) {
  const char* mode = getenv("INGOT_JIT");
  bool covered = false;
  for (int i = 0; i < ig_n_cubin_archs; i++) covered = covered || ig_cubin_archs[i] == d->cc;
  if ((mode && !strcmp(mode, "0")) || ((!mode || strcmp(mode, "1")) && covered)) return;
  char dir[512], path[768], err[1024];
  const char* env = getenv("INGOT_CACHE_DIR");
  const char* home = getenv("HOME");
  if (env && *env) snprintf(dir, sizeof dir, "%s", env);
  else snprintf(dir, sizeof dir, "%s/.cache/ingot", home ? home : "/tmp");
  snprintf(path, sizeof path, "%s/%s-sm_%d.cubin", dir, IG_SOURCE_HASH, d->cc);
  char* image = NULL;
  size_t size = 0;
  const char* lowered[IG_N_KERNELS];
  FILE* f = fopen(path, "rb");
  bool cached = false;
  if (f) {
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    image = n > 0 ? (char*)malloc((size_t)n) : NULL;
    cached = image && fread(image, 1, (size_t)n, f) == (size_t)n;
    size = cached ? (size_t)n : 0;
    fclose(f);
  }
  char arch[32];
  snprintf(arch, sizeof arch, "sm_%d", d->cc);
  if (!cached) {
    free(image);
    image = NULL;
    if (ig_nvrtc_compile(arch, &image, &size, lowered, err, sizeof err) != 0) {
      fprintf(stderr, "%s: warning: %s; using the embedded code\n", d->desc->name, err);
      return;
    }
    // the symbols first, then the cubin: a cached cubin always has its symbol list beside it
    mkdir(dir, 0755);
    char names[800];
    snprintf(names, sizeof names, "%s.names", path);
    FILE* nf = fopen(names, "w");
    bool ok = nf != NULL;
    for (int i = 0; ok && i < IG_N_KERNELS; i++) ok = fprintf(nf, "%s\n", lowered[i]) > 0;
    if (nf && fclose(nf) != 0) ok = false;
    if (ok) ig_write_file(path, image, size);
  } else if (ig_read_names(path, lowered) != 0) {
    // no symbol list (an older cache entry): the names come from a PTX build of the same sources
    char* ptx = NULL;
    size_t n = 0;
    if (ig_nvrtc_compile("compute_80", &ptx, &n, lowered, err, sizeof err) != 0) {
      free(image);
      return;
    }
    free(ptx);
  }
  cudaLibrary_t mod;
  if (cudaLibraryLoadData(&mod, image, NULL, NULL, 0, NULL, NULL, 0) != cudaSuccess) {
    fprintf(stderr, "%s: warning: cannot load %s; using the embedded code\n", d->desc->name, path);
    free(image);
    return;
  }
  free(image);
  for (int i = 0; i < IG_N_KERNELS; i++) {
    if (cudaLibraryGetKernel(&d->fn[i], mod, lowered[i]) != cudaSuccess) {
      fprintf(stderr, "%s: warning: %s missing from the JIT module; using the embedded code\n", d->desc->name,
              lowered[i]);
      cudaLibraryUnload(mod);
      return;
    }
  }
  d->module = mod;
  fprintf(stderr, "%s: kernels JIT-compiled for %s (%s)\n", d->desc->name, arch, cached ? "cache" : "NVRTC");
}
#endif

// ---- cuBLASLt: the dense GEMMs of prefill-sized steps -----------------------------------------

// The entry points, opened from libcublasLt at run time like NVRTC: a binary runs (with the tiled
// GEMM) where the driver is installed but not the CUDA libraries. Under cudasim they are the
// simulator's reference GEMM (kernels/cudasim/include/cublasLt.h).
#define IG_LT_SYMBOLS(X)                                                                              \
  X(create, cublasLtCreate) X(destroy, cublasLtDestroy) X(status, cublasLtGetStatusString)            \
  X(op_create, cublasLtMatmulDescCreate) X(op_destroy, cublasLtMatmulDescDestroy)                     \
  X(op_set, cublasLtMatmulDescSetAttribute) X(layout_create, cublasLtMatrixLayoutCreate)              \
  X(layout_destroy, cublasLtMatrixLayoutDestroy) X(pref_create, cublasLtMatmulPreferenceCreate)       \
  X(pref_destroy, cublasLtMatmulPreferenceDestroy) X(pref_set, cublasLtMatmulPreferenceSetAttribute)  \
  X(heuristic, cublasLtMatmulAlgoGetHeuristic) X(matmul, cublasLtMatmul)
static struct {
#define IG_LT_FIELD(field, name) decltype(&name) field;
  IG_LT_SYMBOLS(IG_LT_FIELD)
#undef IG_LT_FIELD
} ig_lt;

static bool ig_lt_open(char* why, size_t n) {
#ifdef INGOT_CUDASIM
#define IG_LT_BIND(field, name) ig_lt.field = name;
  (void)why, (void)n;
#else
  void* h = dlopen("libcublasLt.so.13", RTLD_NOW);
  if (!h) h = dlopen("libcublasLt.so", RTLD_NOW);
  if (!h) return snprintf(why, n, "libcublasLt not available: %s", dlerror()), false;
#define IG_LT_BIND(field, name) ig_lt.field = (decltype(ig_lt.field))dlsym(h, #name);
#endif
  IG_LT_SYMBOLS(IG_LT_BIND)
#undef IG_LT_BIND
#define IG_LT_CHECK(field, name) &&ig_lt.field
  const bool ok = true IG_LT_SYMBOLS(IG_LT_CHECK);
#undef IG_LT_CHECK
  if (!ok) snprintf(why, n, "libcublasLt lacks a symbol");
  return ok;
}

static void ig_lt_free(cu_model* d) {
  if (!d->lt) return;
  for (int i = 0; i < IG_LT_PLANS; i++)
    if (d->lt_plan[i].n) ig_lt.layout_destroy(d->lt_plan[i].x), ig_lt.layout_destroy(d->lt_plan[i].y);
  for (int i = 0; i < IG_LT_N_SHAPES; i++) {
    if (d->lt_op[i]) ig_lt.op_destroy(d->lt_op[i]);
    if (d->lt_w[i]) ig_lt.layout_destroy(d->lt_w[i]);
  }
  if (d->lt_pref) ig_lt.pref_destroy(d->lt_pref);
  cudaFree(d->lt_ws);
  cudaFree(d->lt_x);
  ig_lt.destroy(d->lt);
  d->lt = NULL;
}

// The layouts and algorithm of (shape, n tokens): column-major, Y (out x n) = W^T (out x in) X (in x n),
// i.e. the row-major [n][in] activations and [out][in] weights as stored. -1 with d->why on failure.
static int ig_lt_plan(cu_model* d, int shape, int n) {
  for (int i = 0; i < IG_LT_PLANS; i++)
    if (d->lt_plan[i].n == n && d->lt_plan[i].shape == shape) return i;
  const ig_lt_shape& s = IG_LT_SHAPES[shape];
  const int i = d->lt_next;
  d->lt_next = (d->lt_next + 1) % IG_LT_PLANS;
  if (d->lt_plan[i].n) ig_lt.layout_destroy(d->lt_plan[i].x), ig_lt.layout_destroy(d->lt_plan[i].y);
  d->lt_plan[i].n = 0;
  cublasLtMatmulHeuristicResult_t r;
  int found = 0;
  cublasStatus_t st = ig_lt.layout_create(&d->lt_plan[i].x, (cudaDataType_t)s.type, s.in, n, s.in);
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = ig_lt.layout_create(&d->lt_plan[i].y, CUDA_R_32F, s.out, n, s.out);
    if (st != CUBLAS_STATUS_SUCCESS) ig_lt.layout_destroy(d->lt_plan[i].x);
  }
  if (st != CUBLAS_STATUS_SUCCESS)
    return snprintf(d->why, sizeof d->why, "cuBLASLt layout: %s", ig_lt.status(st)), -1;
  st = ig_lt.heuristic(d->lt, d->lt_op[shape], d->lt_w[shape], d->lt_plan[i].x, d->lt_plan[i].y, d->lt_plan[i].y,
                       d->lt_pref, 1, &r, &found);
  if (st != CUBLAS_STATUS_SUCCESS || found < 1) {
    ig_lt.layout_destroy(d->lt_plan[i].x), ig_lt.layout_destroy(d->lt_plan[i].y);
    return snprintf(d->why, sizeof d->why, "cuBLASLt has no algorithm for %d x %d x %d (type %d): %s", s.out, n, s.in,
                    s.type, ig_lt.status(st)), -1;
  }
  d->lt_plan[i].algo = r.algo;
  d->lt_plan[i].shape = shape;
  d->lt_plan[i].n = n;
  return i;
}

// Y[n][out] = X[n][in] W^T (+ bias) (+ R[n][out], when R is given: C = R, beta = 1; R may be Y):
// one cuBLASLt matmul on the model's stream.
static int ig_lt_gemm(cu_model* d, int shape, const void* W, const void* X, float* Y, int n, const void* bias,
                      const float* R = nullptr) {
  d->launches++;
  if (IG_LT_SHAPES[shape].bias) {
    const cublasStatus_t st = ig_lt.op_set(d->lt_op[shape], CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    if (st != CUBLAS_STATUS_SUCCESS) return snprintf(d->why, sizeof d->why, "cuBLASLt bias: %s", ig_lt.status(st)), -1;
  }
  const int p = ig_lt_plan(d, shape, n);
  if (p < 0) return -1;
  const float one = 1.0f, beta = R ? 1.0f : 0.0f;
  const cublasStatus_t st = ig_lt.matmul(d->lt, d->lt_op[shape], &one, W, d->lt_w[shape], X, d->lt_plan[p].x, &beta,
                                         R ? R : Y, d->lt_plan[p].y, Y, d->lt_plan[p].y, &d->lt_plan[p].algo, d->lt_ws,
                                         IG_LT_WORKSPACE, d->stream);
  if (st != CUBLAS_STATUS_SUCCESS)
    return snprintf(d->why, sizeof d->why, "cuBLASLt matmul (%d x %d x %d): %s", IG_LT_SHAPES[shape].out, n,
                    IG_LT_SHAPES[shape].in, ig_lt.status(st)), -1;
  return 0;
}
#define LT_GEMM(shape, W, X, Y, n, bias)                                   \
  do {                                                                     \
    if (ig_lt_gemm(d, shape, W, X, Y, n, bias) != 0) return -1;            \
  } while (0)
#define LT_GEMM_ADD(shape, W, X, Y, R, n, bias)                            \
  do {                                                                     \
    if (ig_lt_gemm(d, shape, W, X, Y, n, bias, R) != 0) return -1;         \
  } while (0)

// Opens cuBLASLt and builds each shape's descriptors, then checks that every shape has an
// algorithm at the largest step; anything missing leaves d->lt NULL (the tiled GEMM runs) and says why.
static void ig_lt_init(cu_model* d) {
  const char* env = getenv("INGOT_CUBLASLT");
  if (IG_LT_N_SHAPES == 0 || (env && !strcmp(env, "0"))) return;
  char why[512] = "";
  if (!ig_lt_open(why, sizeof why)) {
    fprintf(stderr, "%s: warning: %s; prefill uses the tiled GEMM\n", d->desc->name, why);
    return;
  }
  cublasStatus_t st = ig_lt.create(&d->lt);
  if (st != CUBLAS_STATUS_SUCCESS) {
    d->lt = NULL;
    fprintf(stderr, "%s: warning: cuBLASLt: %s; prefill uses the tiled GEMM\n", d->desc->name, ig_lt.status(st));
    return;
  }
  const int32_t transposed = CUBLAS_OP_T, bias_type = CUDA_R_32F;
  const uint32_t epilogue_bias = CUBLASLT_EPILOGUE_BIAS, align = 16; // arena rows: 16-byte aligned
  const uint64_t ws = IG_LT_WORKSPACE;
  bool ok = cudaMalloc(&d->lt_ws, IG_LT_WORKSPACE) == cudaSuccess &&
            (IG_LT_X_BYTES == 0 || cudaMalloc(&d->lt_x, (size_t)IG_LT_X_BYTES * MAX_TOKENS) == cudaSuccess);
  ok = ok && ig_lt.pref_create(&d->lt_pref) == CUBLAS_STATUS_SUCCESS &&
       ig_lt.pref_set(d->lt_pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws) == CUBLAS_STATUS_SUCCESS;
  for (int a = CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES; ok && a <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES; a++)
    ok = ig_lt.pref_set(d->lt_pref, (cublasLtMatmulPreferenceAttributes_t)a, &align, sizeof align) == CUBLAS_STATUS_SUCCESS;
  for (int i = 0; ok && i < IG_LT_N_SHAPES; i++) {
    const ig_lt_shape& s = IG_LT_SHAPES[i];
    ok = ig_lt.op_create(&d->lt_op[i], CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
         ig_lt.op_set(d->lt_op[i], CUBLASLT_MATMUL_DESC_TRANSA, &transposed, sizeof transposed) == CUBLAS_STATUS_SUCCESS &&
         ig_lt.layout_create(&d->lt_w[i], (cudaDataType_t)s.type, s.in, s.out, s.in) == CUBLAS_STATUS_SUCCESS;
    if (ok && s.bias)
      ok = ig_lt.op_set(d->lt_op[i], CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue_bias, sizeof epilogue_bias) ==
               CUBLAS_STATUS_SUCCESS &&
           ig_lt.op_set(d->lt_op[i], CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type) ==
               CUBLAS_STATUS_SUCCESS;
  }
  if (!ok) snprintf(d->why, sizeof d->why, "cuBLASLt setup failed");
  for (int i = 0; ok && i < IG_LT_N_SHAPES; i++) {
    // the heuristic reads the bias pointer's alignment: a stand-in with the biases' (256-byte)
    // alignment until each call sets its own
    if (IG_LT_SHAPES[i].bias) ig_lt.op_set(d->lt_op[i], CUBLASLT_MATMUL_DESC_BIAS_POINTER, &d->lt_ws, sizeof d->lt_ws);
    ok = ig_lt_plan(d, i, MAX_TOKENS) >= 0;
  }
  if (!ok) {
    fprintf(stderr, "%s: warning: %s; prefill uses the tiled GEMM\n", d->desc->name, d->why);
    d->why[0] = 0;
    ig_lt_free(d);
  }
}

// ---- setup -----------------------------------------------------------------------------------

extern "C" void cu_model_free(cu_model* d) {
  if (!d) return;
  for (int i = 0; i < N_WEIGHTS; i++) {
    bool first = true; // weights shared by several slots are freed once
    for (int j = 0; j < i; j++) first = first && d->w.slot[j] != d->w.slot[i];
    if (first && d->w.slot[i]) cudaFree(d->w.slot[i]);
  }
  cudaFree(d->arena);
  cudaFree(d->logits);
  cudaFree(d->hidden);
  cudaFree(d->rope);
  cudaFree(d->part_o);
  cudaFree(d->part_ml);
  cudaFree(d->done);
  cudaFree(d->meta);
  cudaFreeHost(d->meta_host);
  ig_lt_free(d);
  const char* stats = getenv("INGOT_CUDA_STATS");
  if (stats && !strcmp(stats, "1"))
    fprintf(stderr, "%s: cuda: %lld steps, %d graphs captured, %lld graph replays, %lld kernel launches outside graphs\n",
            d->desc->name, d->steps, d->n_graphs, d->graph_replays, d->launches);
  for (int i = 0; i < d->n_graphs; i++) cudaGraphExecDestroy(d->graphs[i].exec);
#ifndef INGOT_CUDASIM
  if (d->module) cudaLibraryUnload(d->module);
#endif
  if (d->stream) cudaStreamDestroy(d->stream);
  free(d);
}

extern "C" int cu_model_init(cu_model** out, const ingot_desc* desc, const void* const* host_w, const size_t* bytes,
                             int n, const float* rope, char* err, size_t errlen) {
  *out = NULL;
#ifndef INGOT_CUDASIM
  const char* check = getenv("INGOT_NVRTC_CHECK");
  if (check && *check) ig_nvrtc_check(check);
#endif
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count < 1) {
    snprintf(err, errlen, "no CUDA device (%s): this binary was built with --backend cuda; build with --backend cpu "
             "for this machine", e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    return -1;
  }
  cu_model* d = (cu_model*)calloc(1, sizeof *d);
  if (!d) return snprintf(err, errlen, "out of memory"), -1;
  d->desc = desc;
  const char* dev_env = getenv("INGOT_CUDA_DEVICE");
  d->device = dev_env ? atoi(dev_env) : 0;
  cudaDeviceProp prop;
  if ((e = cudaSetDevice(d->device)) != cudaSuccess || (e = cudaGetDeviceProperties(&prop, d->device)) != cudaSuccess) {
    cu_model_free(d);
    return ig_fail(err, errlen, "device", e);
  }
  d->cc = prop.major * 10 + prop.minor;
  d->sm_count = prop.multiProcessorCount;
  if ((e = cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking)) != cudaSuccess) {
    cu_model_free(d);
    return ig_fail(err, errlen, "stream", e);
  }
#ifndef INGOT_CUDASIM
  ig_jit_load(d);
  if (!d->module && !ig_embedded_runs(d->cc)) {
    char archs[64];
    ig_cubin_arch_list(archs, sizeof archs);
    const char* jit = getenv("INGOT_JIT");
    snprintf(err, errlen, "this binary carries code for %s (./ingot build --cuda-arch) and the GPU is sm_%d, for which "
             "NVRTC compiled nothing (%s): rebuild with a --cuda-arch that covers it, or all", archs, d->cc,
             jit && !strcmp(jit, "0") ? "INGOT_JIT=0" : "see the warning above");
    cu_model_free(d);
    return -1;
  }
#endif
  const char* graphs = getenv("INGOT_CUDA_GRAPHS");
  d->use_graphs = !(graphs && !strcmp(graphs, "0"));
  for (int i = 0; i < n; i++) {
    for (int j = 0; j < i && !d->w.slot[i]; j++)
      if (host_w[j] == host_w[i]) d->w.slot[i] = d->w.slot[j]; // one tensor, several slots (tied weights)
    if (d->w.slot[i]) continue;
    if ((e = cudaMalloc(&d->w.slot[i], bytes[i])) != cudaSuccess ||
        (e = cudaMemcpy(d->w.slot[i], host_w[i], bytes[i], cudaMemcpyHostToDevice)) != cudaSuccess) {
      cu_model_free(d);
      return ig_fail(err, errlen, "weight upload", e);
    }
    d->weight_bytes += bytes[i];
  }
  ig_lt_init(d);
  const size_t parts = (size_t)MAX_TOKENS * N_HEADS_MAX * IG_ATTN_MAX_SPLITS;
  if ((e = cudaMalloc((void**)&d->arena, (size_t)ARENA_BYTES_PER_TOKEN * MAX_TOKENS)) != cudaSuccess ||
      (e = cudaMalloc((void**)&d->logits, sizeof(float) * (size_t)MAX_TOKENS * VOCAB)) != cudaSuccess ||
      (e = cudaMalloc((void**)&d->hidden, sizeof(float) * (size_t)MAX_TOKENS * HIDDEN_DIM)) != cudaSuccess ||
      (e = cudaMalloc((void**)&d->rope, sizeof(float) * (size_t)N_ROPE * MAX_CTX * ROPE_DIM)) != cudaSuccess ||
      (e = cudaMalloc((void**)&d->part_o, sizeof(float) * parts * HEAD_DIM_MAX)) != cudaSuccess ||
      (e = cudaMalloc((void**)&d->part_ml, sizeof(float) * parts * 2)) != cudaSuccess ||
      (e = cudaMalloc((void**)&d->done, sizeof(unsigned))) != cudaSuccess ||
      (e = cudaMemset(d->done, 0, sizeof(unsigned))) != cudaSuccess ||
      (e = cudaMalloc((void**)&d->meta, sizeof(int) * META_INTS)) != cudaSuccess ||
      (e = cudaMallocHost((void**)&d->meta_host, sizeof(int) * META_INTS)) != cudaSuccess ||
      (e = cudaMemcpy(d->rope, rope, sizeof(float) * (size_t)N_ROPE * MAX_CTX * ROPE_DIM, cudaMemcpyHostToDevice)) != cudaSuccess) {
    cu_model_free(d);
    return ig_fail(err, errlen, "scratch allocation", e);
  }
  *out = d;
  return 0;
}

// ---- the KV pool ------------------------------------------------------------------------------

extern "C" int cu_kv_alloc(cu_model* d, ingot_kv* kv, int n_blocks, char* err, size_t errlen) {
  (void)d;
  const size_t bytes = (size_t)n_blocks * INGOT_KV_BLOCK * d->desc->kv_bytes_per_token;
  kv->n_blocks = n_blocks;
  kv->data = NULL;
  kv->state = NULL;
  kv->n_state_slots = 0;
  cudaError_t e = n_blocks > 0 ? cudaMalloc(&kv->data, bytes) : cudaErrorInvalidValue;
  if (e == cudaSuccess) e = cudaMemset(kv->data, 0, bytes);
  if (e != cudaSuccess) {
    if (kv->data) cudaFree(kv->data);
    kv->data = NULL;
    snprintf(err, errlen, "device memory for a KV pool of %d blocks (%zu bytes): %s", n_blocks, bytes,
             cudaGetErrorString(e));
    return -1;
  }
  return 0;
}

extern "C" void cu_kv_release(cu_model* d, ingot_kv* kv) {
  (void)d;
  if (kv->data) cudaFree(kv->data);
  kv->data = NULL;
  if (kv->state) cudaFree(kv->state);
  kv->state = NULL;
  kv->n_state_slots = 0;
}

// The recurrent state of n_slots sequences on the device (nothing for a model without one).
extern "C" int cu_state_alloc(cu_model* d, ingot_kv* kv, int n_slots, char* err, size_t errlen) {
  (void)d;
  if (kv->state) cudaFree(kv->state);
  kv->state = NULL;
  kv->n_state_slots = 0;
  if (STATE_FLOATS == 0) return 0;
  const size_t bytes = sizeof(float) * (size_t)STATE_FLOATS * (size_t)(n_slots > 0 ? n_slots : 0);
  cudaError_t e = n_slots > 0 ? cudaMalloc(&kv->state, bytes) : cudaErrorInvalidValue;
  if (e == cudaSuccess) e = cudaMemset(kv->state, 0, bytes);
  if (e != cudaSuccess) {
    if (kv->state) cudaFree(kv->state);
    kv->state = NULL;
    snprintf(err, errlen, "device memory for the recurrent state of %d sequences (%zu bytes): %s", n_slots, bytes,
             cudaGetErrorString(e));
    return -1;
  }
  kv->n_state_slots = n_slots;
  return 0;
}

extern "C" int cu_kv_fit_blocks(cu_model* d, size_t block_bytes, double fraction) {
  (void)d;
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess || block_bytes == 0) return 0;
  const double blocks = (double)free_b * fraction / (double)block_bytes;
  return blocks >= 1 ? (blocks > (1 << 24) ? 1 << 24 : (int)blocks) : 1;
}

// ---- one step ----------------------------------------------------------------------------------

// A step's metadata in the host staging buffer (tokens, positions, sequences, block tables, the
// rows wanted) and what the launches are told of its shape (si): whether it is all decode, and the
// split-K of decode attention.
static void ig_stage_step(cu_model* d, const ingot_batch* b, ig_step_info* si_out) {
  const int T = b->n_tokens, S = b->n_seqs, L = b->n_logits, H = b->n_hidden;
  int* h = d->meta_host;
  ig_step_info si = {1, 1, 0, 0, 0};
  int* tok0 = h + META_TOK0 * MAX_TOKENS;
  int* ntok = h + META_NTOK * MAX_TOKENS;
  for (int s = 0; s < S; s++) tok0[s] = -1, ntok[s] = 0;
  for (int i = 0; i < T; i++) {
    const int s = b->seq[i];
    h[META_TOKENS * MAX_TOKENS + i] = b->tokens[i];
    h[META_POS * MAX_TOKENS + i] = b->pos[i];
    h[META_SEQ * MAX_TOKENS + i] = s;
    if (tok0[s] < 0) tok0[s] = i, h[META_POS0 * MAX_TOKENS + s] = b->pos[i];
    ntok[s]++;
    if (s != i) si.decode_only = 0;
  }
  if (T != S) si.decode_only = 0;
  for (int i = 0; i < L; i++) h[META_LOGIT_ROWS * MAX_TOKENS + i] = b->logit_rows[i];
  for (int i = 0; i < H; i++) h[META_HIDDEN_ROWS * MAX_TOKENS + i] = b->hidden_rows[i];
  int* bt = h + META_ARRAYS * MAX_TOKENS;
  for (int s = 0; s < S; s++) {
    const int nb = (b->seq_len[s] + INGOT_KV_BLOCK - 1) / INGOT_KV_BLOCK;
    memcpy(bt + (size_t)s * BT_STRIDE, b->block_tables[s], sizeof(int) * (size_t)nb);
    h[META_DEC_POS * MAX_TOKENS + s] = b->seq_len[s] - 1;
    h[META_STATE_SLOT * MAX_TOKENS + s] = b->state_slots ? b->state_slots[s] : 0;
    if (ntok[s] > si.max_ntok) si.max_ntok = ntok[s];
    if (b->seq_len[s] > si.max_len) si.max_len = b->seq_len[s];
  }
  if (si.decode_only) { // split-K: long contexts and too few (sequence, KV head) blocks to fill the device
    const char* forced = getenv("INGOT_ATTN_SPLITS");
    int splits = (si.max_len + IG_ATTN_CHUNK - 1) / IG_ATTN_CHUNK;
    if (forced) splits = atoi(forced);
    else if (S * KV_HEADS_MIN >= d->sm_count || si.max_len <= 2 * IG_ATTN_CHUNK) splits = 1;
    if (splits < 1) splits = 1;
    if (splits > IG_ATTN_MAX_SPLITS) splits = IG_ATTN_MAX_SPLITS;
    if (splits > si.max_len) splits = si.max_len;
    si.splits = splits;
    si.chunk = splits > 1 ? (forced || splits == IG_ATTN_MAX_SPLITS ? (si.max_len + splits - 1) / splits : IG_ATTN_CHUNK) : 0;
  }
  *si_out = si;
}

// The kernels' view of a step: device pointers into the uploaded metadata, the KV pool, the state.
static ig_step ig_step_args(cu_model* d, ingot_kv* kv, const ingot_batch* b) {
  const size_t head_ints = (size_t)META_ARRAYS * MAX_TOKENS;
  ig_step st;
  st.tokens = d->meta + META_TOKENS * MAX_TOKENS;
  st.pos = d->meta + META_POS * MAX_TOKENS;
  st.seq = d->meta + META_SEQ * MAX_TOKENS;
  st.logit_rows = d->meta + META_LOGIT_ROWS * MAX_TOKENS;
  st.hidden_rows = d->meta + META_HIDDEN_ROWS * MAX_TOKENS;
  st.tok0 = d->meta + META_TOK0 * MAX_TOKENS;
  st.pos0 = d->meta + META_POS0 * MAX_TOKENS;
  st.ntok = d->meta + META_NTOK * MAX_TOKENS;
  st.dec_pos = d->meta + META_DEC_POS * MAX_TOKENS;
  st.block_tables = d->meta + head_ints;
  st.kv = (ig_kv_t*)kv->data;
  st.lt_x = d->lt_x;
  st.n_blocks = kv->n_blocks;
  st.rope = d->rope;
  st.done = d->done;
  st.state = (float*)kv->state;
  st.state_slots = d->meta + META_STATE_SLOT * MAX_TOKENS;
  st.n_tokens = b->n_tokens;
  st.n_logits = b->n_logits;
  st.n_hidden = b->n_hidden;
  st.n_seqs = b->n_seqs;
  return st;
}

// Runs a step's launches: a decode step by replaying (or first capturing) its graph, any other
// launch by launch. 0, or -1 (d->why says what failed, or the CUDA error is pending).
static int ig_launch_step(cu_model* d, ingot_kv* kv, const ig_step& st, const ig_step_info& si) {
  const int T = st.n_tokens, L = st.n_logits, H = st.n_hidden;
  int rc = 0;
  // Decode steps replay a captured graph per (tokens, splits): the metadata above changes every
  // step, the launches and their arguments do not (fixed chunk, fixed buffers). The KV pool
  // pointer is part of the arguments: graphs are dropped when it changes. A captured graph holds the
  // launches of a step in which every token wants logits and none a hidden row (what a decode step
  // of generation is); any other step runs launch by launch.
  if (d->graph_kv != kv->data || d->graph_state != kv->state) {
    for (int i = 0; i < d->n_graphs; i++) cudaGraphExecDestroy(d->graphs[i].exec);
    d->n_graphs = 0;
    d->graph_kv = kv->data;
    d->graph_state = kv->state;
  }
  const bool graphable = d->use_graphs && si.decode_only && L == T && H == 0 &&
                         (si.splits == 1 || si.chunk == IG_ATTN_CHUNK) &&
                         getenv("INGOT_ATTN_SPLITS") == NULL;
  int gi = -1;
  for (int i = 0; graphable && i < d->n_graphs; i++)
    if (d->graphs[i].T == T && d->graphs[i].splits == si.splits) gi = i;
  if (graphable && gi < 0 && d->n_graphs < IG_MAX_GRAPHS) {
    cudaGraph_t graph;
    if (cudaStreamBeginCapture(d->stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
      const long long before = d->launches;
      rc = cu_run(d, st, si);
      const bool ended = cudaStreamEndCapture(d->stream, &graph) == cudaSuccess;
      d->launches = before;
      if (rc == 0 && ended && cudaGraphInstantiate(&d->graphs[d->n_graphs].exec, graph, 0) == cudaSuccess) {
        d->graphs[d->n_graphs].T = T;
        d->graphs[d->n_graphs].splits = si.splits;
        gi = d->n_graphs++;
      }
      if (ended) cudaGraphDestroy(graph);
      cudaGetLastError();
      rc = 0;
    }
  }
  if (gi >= 0) {
    const cudaError_t e = cudaGraphLaunch(d->graphs[gi].exec, d->stream);
    if (e != cudaSuccess) return ig_fail(d->why, sizeof d->why, "graph", e);
    d->graph_replays++;
  } else {
    rc = cu_run(d, st, si);
  }
  return rc;
}

extern "C" int cu_forward(cu_model* d, ingot_kv* kv, const ingot_batch* b, char* err, size_t errlen) {
  const int S = b->n_seqs, L = b->n_logits, H = b->n_hidden;
  ig_step_info si;
  ig_stage_step(d, b, &si);
  int* h = d->meta_host;
  int* bt = h + META_ARRAYS * MAX_TOKENS;
  cudaError_t e;
  const size_t head_ints = (size_t)META_ARRAYS * MAX_TOKENS;
  if ((e = cudaMemcpyAsync(d->meta, h, sizeof(int) * head_ints, cudaMemcpyHostToDevice, d->stream)) != cudaSuccess ||
      (e = cudaMemcpyAsync(d->meta + head_ints, bt, sizeof(int) * (size_t)S * BT_STRIDE, cudaMemcpyHostToDevice,
                           d->stream)) != cudaSuccess)
    return ig_fail(err, errlen, "step upload", e);
  const ig_step st = ig_step_args(d, kv, b);
  d->steps++;
  const int rc = ig_launch_step(d, kv, st, si);
  if (rc != 0 && d->why[0]) {
    snprintf(err, errlen, "%s", d->why);
    d->why[0] = 0;
    return -1;
  }
  if (rc != 0) return ig_fail(err, errlen, "kernel launch", cudaGetLastError());
  if (L > 0 && (e = cudaMemcpyAsync(b->logits, d->logits, sizeof(float) * (size_t)L * VOCAB, cudaMemcpyDeviceToHost,
                                    d->stream)) != cudaSuccess)
    return ig_fail(err, errlen, "logits download", e);
  if (H > 0 && (e = cudaMemcpyAsync(b->hidden, d->hidden, sizeof(float) * (size_t)H * HIDDEN_DIM,
                                    cudaMemcpyDeviceToHost, d->stream)) != cudaSuccess)
    return ig_fail(err, errlen, "hidden rows download", e);
  if ((e = cudaStreamSynchronize(d->stream)) != cudaSuccess) return ig_fail(err, errlen, "step", e);
  return 0;
}
