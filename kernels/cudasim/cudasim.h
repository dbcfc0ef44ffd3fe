// cudasim.h -- CUDA's execution model on the CPU, for CI machines without a GPU.
//
// A CUDA source written for nvcc compiles unchanged with
//
//     g++ -std=c++17 -x c++ -include kernels/cudasim/cudasim.h
//         -I kernels/cudasim/include file.cu kernels/cudasim/cudasim.cpp
//
// (kernels/cudasim/cudasim_build.py does this, plus the two link-time details
// described below; use it).  Kernels are launched with
//
//     cudasim::launch(kernel, grid, block, dyn_smem_bytes, args...);
//     CUDASIM_LAUNCH(kernel, grid, block, dyn_smem_bytes, args...);   // names the kernel in reports
//
// or, in host code, with the usual `kernel<<<grid, block, smem, stream>>>(args)`
// spelling, which cudasim_build.py rewrites textually into
// `::cudasim::launcher(kernel, "kernel", grid, block, smem, stream)(args)`
// (only the `<<<...>>>` part is touched; everything else is compiled as written).
//
// DESIGN (details in cudasim.cpp and README.md):
//
// * Every CUDA thread is a fiber (ucontext, 64 KiB mmap'd stack with a guard
//   page; stacks are pooled).  The blocks of a grid run one after another on the
//   launching OS thread (optionally in a seeded random order); the threads of a
//   block are interleaved cooperatively: a thread runs until it reaches a
//   synchronisation point (__syncthreads, a warp intrinsic, __syncwarp) and then
//   yields to the block scheduler.
// * __syncthreads is a real barrier.  A barrier reached while some thread of the
//   block has exited, or reached by different threads at different call sites
//   (divergent __syncthreads), is reported as an error.
// * Warp intrinsics are rendezvous of the lanes named by the mask: each lane
//   deposits its operand and sleeps until every lane of the mask has arrived,
//   then all read their results.  A mask naming an exited / nonexistent lane, a
//   calling lane outside its own mask, lanes of one mask executing different
//   intrinsics, and any deadlock are errors.
// * `__shared__` expands to `thread_local`.  Static shared arrays are therefore
//   function-local thread_local variables: one instance per OS thread, and since
//   the blocks of a launch run sequentially on one OS thread, one instance per
//   running block.  The whole static-TLS segment of the executable is poisoned
//   (0xff bytes: NaN floats, -1 ints) at the start of every block, as shared
//   memory is uninitialised on a GPU.  (So the simulation executable must not
//   contain other thread_local variables of its own -- cudasim has none.)
//   `extern __shared__ T name[]` becomes `extern thread_local T name[]`, an
//   undefined TLS symbol; cudasim_build.py aliases every such symbol to one
//   232448-byte TLS array (--defsym NAME=cudasim_dyn_smem), so all dynamic
//   shared arrays start at the same address, exactly as in CUDA.
// * Race detection: the kernel translation unit is compiled with
//   -fsanitize=thread, which makes GCC call __tsan_readN/__tsan_writeN before
//   every memory access; cudasim.cpp implements those hooks itself (libtsan is
//   NOT linked) and keeps byte-granular shadow memory for the shared segment and
//   for cudasim::malloc'd buffers.  See cudasim.cpp for the rules.
// * Schedule fuzzing (CUDASIM_SEED=n): the scheduler picks a random ready thread
//   at every yield point, shuffles the block order, and (in race builds) also
//   yields at random shared-memory accesses.
//
// Only the API surface that kernels usually touch is provided; anything missing
// fails to compile (loudly) rather than misbehaving.
#ifndef CUDASIM_H
#define CUDASIM_H

#ifdef __CUDACC__
#error "cudasim.h is for g++ simulation builds; do not include it under nvcc"
#endif
#ifndef INGOT_CUDASIM
#define INGOT_CUDASIM 1
#endif
#define CUDASIM_ARCH 800

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

// `#pragma unroll` is everywhere in CUDA code; g++ does not know it.
#pragma GCC diagnostic ignored "-Wunknown-pragmas"  // GCC >= 13; older: -Wno-unknown-pragmas

// ---------------------------------------------------------------- qualifiers
#define __global__
#define __device__
#define __host__
#define __constant__
#define __managed__
#define __shared__ thread_local
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __grid_constant__
#ifndef __align__
#define __align__(n) __attribute__((aligned(n)))
#endif
#define CUDASIM_NOSAN __attribute__((no_sanitize_thread, no_sanitize_address))

// -------------------------------------------------------------- vector types
struct uint3 { unsigned x, y, z; };
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};

#define CUDASIM_VEC2(T, N, A) struct __attribute__((aligned(A))) N##2 { T x, y; }; \
  static inline N##2 make_##N##2(T x, T y) { return N##2{x, y}; }
#define CUDASIM_VEC3(T, N) struct N##3 { T x, y, z; }; \
  static inline N##3 make_##N##3(T x, T y, T z) { return N##3{x, y, z}; }
#define CUDASIM_VEC4(T, N, A) struct __attribute__((aligned(A))) N##4 { T x, y, z, w; }; \
  static inline N##4 make_##N##4(T x, T y, T z, T w) { return N##4{x, y, z, w}; }
CUDASIM_VEC2(float, float, 8)  CUDASIM_VEC3(float, float)  CUDASIM_VEC4(float, float, 16)
CUDASIM_VEC2(double, double, 16) CUDASIM_VEC3(double, double) CUDASIM_VEC4(double, double, 16)
CUDASIM_VEC2(int, int, 8)      CUDASIM_VEC3(int, int)      CUDASIM_VEC4(int, int, 16)
CUDASIM_VEC2(unsigned, uint, 8)                            CUDASIM_VEC4(unsigned, uint, 16)
CUDASIM_VEC2(signed char, char, 2)   CUDASIM_VEC4(signed char, char, 4)
CUDASIM_VEC2(unsigned char, uchar, 2) CUDASIM_VEC4(unsigned char, uchar, 4)
CUDASIM_VEC2(short, short, 4)  CUDASIM_VEC4(short, short, 8)
CUDASIM_VEC2(unsigned short, ushort, 4) CUDASIM_VEC4(unsigned short, ushort, 8)
CUDASIM_VEC2(long long, longlong, 16) CUDASIM_VEC2(unsigned long long, ulonglong, 16)
static inline uint3 make_uint3(unsigned x, unsigned y, unsigned z) { return uint3{x, y, z}; }
#undef CUDASIM_VEC2
#undef CUDASIM_VEC3
#undef CUDASIM_VEC4

// ------------------------------------------------------------ runtime state
namespace cudasim {

// Error policy for detected misuse (CUDASIM_ON_ERROR=exit|abort|return).
enum class OnError { Exit, Abort, Return };

struct Config {
  uint64_t seed = 0;          // 0: deterministic round-robin; else fuzzed schedule + block order
  int race_global = 2;        // race build: 0 shared only, 1 + global within a block, 2 + across blocks
  OnError on_error = OnError::Exit;
  size_t stack_bytes = 64 * 1024;
  bool poison = true;         // poison shared memory per block and fresh cudasim::malloc memory
};
Config& config();              // initialised from the environment on first use

void* malloc(size_t bytes);    // device buffer: host memory (+ guard zones unless ASan)
void free(void* p);
bool check_guards();           // verify every live buffer's guard zones; reports; false on damage
const char* last_error_text(); // text of the last reported error ("" if none)
int error_count();             // errors detected so far (races, misuse, OOB)

namespace detail {
struct Fiber;
struct KernelCall {
  void (*thunk)(void*);
  void* ctx;
  const char* name;
  const void* fn;
};
extern Fiber* g_cur;            // running simulated thread (nullptr on the host)
extern uint3 g_blockIdx, g_blockDim, g_gridDim;
const uint3& cur_thread_idx();
int launch(const KernelCall& call, dim3 grid, dim3 block, size_t dyn_smem);
void syncthreads(const char* file, int line);
int syncthreads_op(int op, int pred, const char* file, int line);
enum WarpOpKind {
  W_SYNC, W_SHFL_IDX, W_SHFL_UP, W_SHFL_DOWN, W_SHFL_XOR, W_BALLOT, W_ANY, W_ALL,
  W_ADD_I, W_MIN_I, W_MAX_I, W_ADD_U, W_MIN_U, W_MAX_U, W_AND, W_OR, W_XOR,
  W_MATCH_ANY, W_MATCH_ALL
};
uint64_t warp_op(int op, unsigned mask, uint64_t value, int arg, int width, int* pred_out,
                 const char* file, int line);
unsigned activemask();
int lane_id();
void trap(const char* file, int line);
void yield_point();
long long clock_tick();
void sticky(int err);
}  // namespace detail

// ---- streams and stream capture (CUDA graphs) ----
// Work issued to a stream that this host thread is capturing is recorded, not run;
// a graph replays the recorded work in order (cudaGraphLaunch). Kernel arguments
// and host-side scalars are copied when the work is recorded, as CUDA copies them
// into the graph's nodes; device memory is read when the work runs.
}  // namespace cudasim
struct CUstream_st { int id; };
typedef CUstream_st* cudaStream_t;
namespace cudasim { namespace detail {
typedef std::function<int()> Work;
struct Capture {
  cudaStream_t stream = nullptr;
  std::vector<Work>* work = nullptr; // non-null while capturing
};
inline Capture& capture() {
  static thread_local Capture c;
  return c;
}
inline bool capturing(cudaStream_t s) { return s && capture().work && capture().stream == s; }
// Runs w now, or records it when s is being captured (then 0: cudaSuccess).
inline int submit(cudaStream_t s, Work w) {
  if (!capturing(s)) return w();
  capture().work->push_back(std::move(w));
  return 0;
}
}  // namespace detail

// launch(kernel, grid, block, dyn_smem, args...): runs the whole grid before
// returning (launches are synchronous).  The arguments are converted to the
// kernel's parameter types once (like CUDA's parameter buffer); every simulated
// thread receives its own by-value copy.  Returns cudaError_t as int.
// launch_on(stream, ...): the same on a stream, recorded while that stream is captured.
template <class... P, class... A>
int launch_on(cudaStream_t stream, const char* name, void (*kernel)(P...), dim3 grid, dim3 block, size_t dyn_smem,
              A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "cudasim::launch: wrong number of kernel arguments");
  struct Ctx {
    void (*k)(P...);
    std::tuple<std::decay_t<P>...> params;
  };
  // the work owns its copy of the arguments (no shared_ptr: its atomic count would reach the race
  // build's -fsanitize=thread hooks)
  Ctx ctx{kernel, std::tuple<std::decay_t<P>...>(static_cast<std::decay_t<P>>(std::forward<A>(args))...)};
  auto run = [ctx, name, grid, block, dyn_smem]() mutable {
    detail::KernelCall call;
    call.thunk = [](void* c) {
      Ctx* x = static_cast<Ctx*>(c);
      std::apply(x->k, x->params);
    };
    call.ctx = &ctx;
    call.name = name;
    call.fn = reinterpret_cast<const void*>(ctx.k);
    return detail::launch(call, grid, block, dyn_smem);
  };
  if (!detail::capturing(stream)) return run(); // the common case: no std::function, no copy kept
  return detail::submit(stream, std::move(run));
}
template <class... P, class... A>
int launch_named(const char* name, void (*kernel)(P...), dim3 grid, dim3 block, size_t dyn_smem,
                 A&&... args) {
  return launch_on(nullptr, name, kernel, grid, block, dyn_smem, std::forward<A>(args)...);
}
template <class... P, class... A>
int launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t dyn_smem, A&&... args) {
  return launch_on(nullptr, nullptr, kernel, grid, block, dyn_smem, std::forward<A>(args)...);
}

// Target of the `k<<<g, b, s, st>>>(args)` rewrite.
template <class... P>
struct Launcher {
  void (*k)(P...);
  const char* name;
  dim3 grid, block;
  size_t smem;
  cudaStream_t stream;
  template <class... A>
  void operator()(A&&... args) const {
    launch_on(stream, name, k, grid, block, smem, std::forward<A>(args)...);
  }
};
template <class... P, class S = void*>
Launcher<P...> launcher(void (*k)(P...), const char* name, dim3 grid, dim3 block, size_t smem = 0, S stream = nullptr) {
  cudaStream_t st = nullptr; // a literal 0 stream is the default stream
  if constexpr (std::is_convertible<S, cudaStream_t>::value && !std::is_integral<S>::value) st = stream;
  return Launcher<P...>{k, name, grid, block, smem, st};
}

}  // namespace cudasim

#define CUDASIM_LAUNCH(kernel, grid, block, smem, ...) \
  ::cudasim::launch_named(#kernel, kernel, grid, block, smem, __VA_ARGS__)

#define threadIdx (::cudasim::detail::cur_thread_idx())
#define blockIdx (static_cast<const uint3&>(::cudasim::detail::g_blockIdx))
#define blockDim (static_cast<const uint3&>(::cudasim::detail::g_blockDim))
#define gridDim (static_cast<const uint3&>(::cudasim::detail::g_gridDim))
static constexpr int warpSize = 32;

// ----------------------------------------------------------- synchronisation
static inline void __syncthreads(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::cudasim::detail::syncthreads(file, line);
}
static inline int __syncthreads_count(int p, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return ::cudasim::detail::syncthreads_op(0, p, file, line);
}
static inline int __syncthreads_and(int p, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return ::cudasim::detail::syncthreads_op(1, p, file, line);
}
static inline int __syncthreads_or(int p, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return ::cudasim::detail::syncthreads_op(2, p, file, line);
}
static inline void __syncwarp(unsigned mask = 0xffffffffu, const char* file = __builtin_FILE(),
                              int line = __builtin_LINE()) {
  ::cudasim::detail::warp_op(::cudasim::detail::W_SYNC, mask, 0, 0, 32, nullptr, file, line);
}
static inline unsigned __activemask() { return ::cudasim::detail::activemask(); }
static inline void __threadfence() { __asm__ __volatile__("" ::: "memory"); }
static inline void __threadfence_block() { __asm__ __volatile__("" ::: "memory"); }
static inline void __threadfence_system() { __asm__ __volatile__("" ::: "memory"); }
static inline void __nanosleep(unsigned) { ::cudasim::detail::yield_point(); }
static inline void __trap(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::cudasim::detail::trap(file, line);
}
static inline long long clock64() { return ::cudasim::detail::clock_tick(); }

namespace cudasim { namespace detail {
template <class T>
static inline uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value,
                "warp intrinsics move scalars of at most 8 bytes");
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}
template <class T>
static inline T from_bits(uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}
}}  // namespace cudasim::detail

#define CUDASIM_LOC const char *file = __builtin_FILE(), int line = __builtin_LINE()
template <class T>
static inline T __shfl_sync(unsigned mask, T var, int srcLane, int width = 32, CUDASIM_LOC) {
  using namespace ::cudasim::detail;
  return from_bits<T>(warp_op(W_SHFL_IDX, mask, to_bits(var), srcLane, width, nullptr, file, line));
}
template <class T>
static inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32, CUDASIM_LOC) {
  using namespace ::cudasim::detail;
  return from_bits<T>(warp_op(W_SHFL_UP, mask, to_bits(var), (int)delta, width, nullptr, file, line));
}
template <class T>
static inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32, CUDASIM_LOC) {
  using namespace ::cudasim::detail;
  return from_bits<T>(warp_op(W_SHFL_DOWN, mask, to_bits(var), (int)delta, width, nullptr, file, line));
}
template <class T>
static inline T __shfl_xor_sync(unsigned mask, T var, int laneMask, int width = 32, CUDASIM_LOC) {
  using namespace ::cudasim::detail;
  return from_bits<T>(warp_op(W_SHFL_XOR, mask, to_bits(var), laneMask, width, nullptr, file, line));
}
static inline unsigned __ballot_sync(unsigned mask, int pred, CUDASIM_LOC) {
  return (unsigned)::cudasim::detail::warp_op(::cudasim::detail::W_BALLOT, mask, pred != 0, 0, 32, nullptr, file, line);
}
static inline int __any_sync(unsigned mask, int pred, CUDASIM_LOC) {
  return (int)::cudasim::detail::warp_op(::cudasim::detail::W_ANY, mask, pred != 0, 0, 32, nullptr, file, line);
}
static inline int __all_sync(unsigned mask, int pred, CUDASIM_LOC) {
  return (int)::cudasim::detail::warp_op(::cudasim::detail::W_ALL, mask, pred != 0, 0, 32, nullptr, file, line);
}
#define CUDASIM_REDUCE(NAME, T, OP) \
  static inline T NAME(unsigned mask, T v, CUDASIM_LOC) { \
    using namespace ::cudasim::detail; \
    return from_bits<T>(warp_op(OP, mask, to_bits(v), 0, 32, nullptr, file, line)); }
CUDASIM_REDUCE(__reduce_add_sync, int, W_ADD_I)
CUDASIM_REDUCE(__reduce_min_sync, int, W_MIN_I)
CUDASIM_REDUCE(__reduce_max_sync, int, W_MAX_I)
CUDASIM_REDUCE(__reduce_add_sync, unsigned, W_ADD_U)
CUDASIM_REDUCE(__reduce_min_sync, unsigned, W_MIN_U)
CUDASIM_REDUCE(__reduce_max_sync, unsigned, W_MAX_U)
CUDASIM_REDUCE(__reduce_and_sync, unsigned, W_AND)
CUDASIM_REDUCE(__reduce_or_sync, unsigned, W_OR)
CUDASIM_REDUCE(__reduce_xor_sync, unsigned, W_XOR)
#undef CUDASIM_REDUCE
template <class T>
static inline unsigned __match_any_sync(unsigned mask, T v, CUDASIM_LOC) {
  using namespace ::cudasim::detail;
  return (unsigned)warp_op(W_MATCH_ANY, mask, to_bits(v), 0, 32, nullptr, file, line);
}
template <class T>
static inline unsigned __match_all_sync(unsigned mask, T v, int* pred, CUDASIM_LOC) {
  using namespace ::cudasim::detail;
  return (unsigned)warp_op(W_MATCH_ALL, mask, to_bits(v), 0, 32, pred, file, line);
}
#undef CUDASIM_LOC

// ------------------------------------------------------------------- atomics
// Execution is cooperative (a simulated thread is never preempted inside an
// atomic), so plain read-modify-write is atomic.  The functions are excluded
// from the race detector's instrumentation: atomics never race.
#define CUDASIM_ATOMIC(NAME, T, EXPR) \
  CUDASIM_NOSAN static inline T NAME(T* a, T v) { T old = *a; *a = (EXPR); return old; } \
  CUDASIM_NOSAN static inline T NAME##_block(T* a, T v) { return NAME(a, v); } \
  CUDASIM_NOSAN static inline T NAME##_system(T* a, T v) { return NAME(a, v); }
#define CUDASIM_ATOMIC_INT(T) \
  CUDASIM_ATOMIC(atomicAdd, T, old + v) CUDASIM_ATOMIC(atomicExch, T, v) \
  CUDASIM_ATOMIC(atomicMin, T, v < old ? v : old) CUDASIM_ATOMIC(atomicMax, T, v > old ? v : old) \
  CUDASIM_ATOMIC(atomicAnd, T, old & v) CUDASIM_ATOMIC(atomicOr, T, old | v) \
  CUDASIM_ATOMIC(atomicXor, T, old ^ v)
CUDASIM_ATOMIC_INT(int)
CUDASIM_ATOMIC_INT(unsigned)
CUDASIM_ATOMIC_INT(unsigned long long)
CUDASIM_ATOMIC(atomicMin, long long, v < old ? v : old)
CUDASIM_ATOMIC(atomicMax, long long, v > old ? v : old)
CUDASIM_ATOMIC(atomicSub, int, old - v)
CUDASIM_ATOMIC(atomicSub, unsigned, old - v)
CUDASIM_ATOMIC(atomicAdd, float, old + v)
CUDASIM_ATOMIC(atomicAdd, double, old + v)
CUDASIM_ATOMIC(atomicExch, float, v)
CUDASIM_ATOMIC(atomicInc, unsigned, (old >= v) ? 0u : old + 1u)
CUDASIM_ATOMIC(atomicDec, unsigned, (old == 0u || old > v) ? v : old - 1u)
#undef CUDASIM_ATOMIC_INT
#undef CUDASIM_ATOMIC
#define CUDASIM_CAS(T) \
  CUDASIM_NOSAN static inline T atomicCAS(T* a, T cmp, T v) { T old = *a; if (old == cmp) *a = v; return old; } \
  CUDASIM_NOSAN static inline T atomicCAS_block(T* a, T cmp, T v) { return atomicCAS(a, cmp, v); }
CUDASIM_CAS(int)
CUDASIM_CAS(unsigned)
CUDASIM_CAS(unsigned long long)
CUDASIM_CAS(unsigned short)
#undef CUDASIM_CAS

// ---------------------------------------------------------- memory hints
template <class T> static inline T __ldg(const T* p) { return *p; }
template <class T> static inline T __ldcg(const T* p) { return *p; }
template <class T> static inline T __ldca(const T* p) { return *p; }
template <class T> static inline T __ldcs(const T* p) { return *p; }
template <class T> static inline T __ldlu(const T* p) { return *p; }
template <class T> static inline T __ldcv(const T* p) { return *p; }
template <class T> static inline void __stcg(T* p, T v) { *p = v; }
template <class T> static inline void __stcs(T* p, T v) { *p = v; }
template <class T> static inline void __stwb(T* p, T v) { *p = v; }
template <class T> static inline void __stwt(T* p, T v) { *p = v; }

// -------------------------------------------------------------------- math
// CUDA's fast intrinsics, evaluated at full precision.  <math.h> (glibc)
// already declares these names (noexcept) without exporting them, hence
// `inline ... noexcept` definitions; sincosf and exp10f are glibc's own.
inline float __expf(float x) noexcept { return std::exp(x); }
inline float __exp10f(float x) noexcept { return std::pow(10.0f, x); }
inline float __logf(float x) noexcept { return std::log(x); }
inline float __log2f(float x) noexcept { return std::log2(x); }
inline float __log10f(float x) noexcept { return std::log10(x); }
inline float __sinf(float x) noexcept { return std::sin(x); }
inline float __cosf(float x) noexcept { return std::cos(x); }
inline float __tanf(float x) noexcept { return std::tan(x); }
inline void __sincosf(float x, float* s, float* c) noexcept { *s = std::sin(x); *c = std::cos(x); }
inline float __powf(float x, float y) noexcept { return std::pow(x, y); }
static inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
static inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
static inline float __fdividef(float x, float y) { return x / y; }
static inline float __frcp_rn(float x) { return 1.0f / x; }
static inline float __fsqrt_rn(float x) { return std::sqrt(x); }
static inline float __frsqrt_rn(float x) { return 1.0f / std::sqrt(x); }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : (x != x ? 0.0f : x)); }
static inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
static inline unsigned __float_as_uint(float f) { unsigned i; std::memcpy(&i, &f, 4); return i; }
static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline float __uint_as_float(unsigned i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline long long __double_as_longlong(double d) { long long i; std::memcpy(&i, &d, 8); return i; }
static inline double __longlong_as_double(long long i) { double d; std::memcpy(&d, &i, 8); return d; }
static inline int __float2int_rn(float x) { return (int)std::nearbyint(x); }
static inline int __float2int_rz(float x) { return (int)x; }
static inline int __float2int_rd(float x) { return (int)std::floor(x); }
static inline int __float2int_ru(float x) { return (int)std::ceil(x); }
static inline unsigned __float2uint_rn(float x) { return (unsigned)std::nearbyint(x); }
static inline float __int2float_rn(int x) { return (float)x; }
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
static inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
static inline unsigned __brev(unsigned x) {
  x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
  x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
  x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
  x = ((x >> 8) & 0x00ff00ffu) | ((x & 0x00ff00ffu) << 8);
  return (x >> 16) | (x << 16);
}
static inline int __mul24(int a, int b) { return (int)((long long)(a << 8 >> 8) * (b << 8 >> 8)); }
static inline unsigned __umul24(unsigned a, unsigned b) { return (a & 0xffffffu) * (b & 0xffffffu); }
static inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
static inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
static inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned s) {
  unsigned long long v = ((unsigned long long)hi << 32) | lo; return (unsigned)((v << (s & 31)) >> 32); }
static inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s) {
  unsigned long long v = ((unsigned long long)hi << 32) | lo; return (unsigned)(v >> (s & 31)); }
// CUDA's min/max overloads (device code may call them unqualified).
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
static inline unsigned min(int a, unsigned b) { return min((unsigned)a, b); }
static inline unsigned max(int a, unsigned b) { return max((unsigned)a, b); }
static inline unsigned min(unsigned a, int b) { return min(a, (unsigned)b); }
static inline unsigned max(unsigned a, int b) { return max(a, (unsigned)b); }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
static inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
static inline float min(float a, float b) { return std::fmin(a, b); }
static inline float max(float a, float b) { return std::fmax(a, b); }
static inline double min(double a, double b) { return std::fmin(a, b); }
static inline double max(double a, double b) { return std::fmax(a, b); }
// expf, fmaxf, sqrtf, ... come from <math.h> in the global namespace.
using std::isnan;
using std::isinf;
using std::isfinite;

// ----------------------------------------------------- __half / __nv_bfloat16
namespace cudasim { namespace detail {
static inline uint16_t f32_to_f16(float f) {  // round to nearest even
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (ax < 0x38800000u) {                                     // half subnormal or zero
    if (ax < 0x33000000u) return (uint16_t)sign;
    uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u, sh = 126u - e;
    uint32_t r = m >> sh, rem = m & ((1u << sh) - 1u), half = 1u << (sh - 1u);
    if (rem > half || (rem == half && (r & 1u))) r++;
    return (uint16_t)(sign | r);
  }
  uint32_t r = (ax - 0x38000000u) >> 13, rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) r++;
  return (uint16_t)(sign | r);
}
static inline float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, bits;
  if (e == 0) {
    float f = (float)m * 5.9604644775390625e-08f;
    return sign ? -f : f;
  }
  bits = e == 31 ? (sign | 0x7f800000u | (m << 13)) : (sign | ((e + 112u) << 23) | (m << 13));
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
static inline uint16_t f32_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
static inline float bf16_to_f32(uint16_t b) {
  uint32_t x = (uint32_t)b << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}
}}  // namespace cudasim::detail

struct __attribute__((aligned(2))) __half {
  unsigned short __x;
  __half() = default;
  __half(float f) : __x(::cudasim::detail::f32_to_f16(f)) {}
  __half(double f) : __x(::cudasim::detail::f32_to_f16((float)f)) {}
  __half(int i) : __x(::cudasim::detail::f32_to_f16((float)i)) {}
  operator float() const { return ::cudasim::detail::f16_to_f32(__x); }
};
struct __attribute__((aligned(4))) __half2 {
  __half x, y;
  __half2() = default;
  __half2(__half a, __half b) : x(a), y(b) {}
};
typedef __half half;
typedef __half2 half2;
struct __half_raw { unsigned short x; };

static inline float __half2float(__half h) { return ::cudasim::detail::f16_to_f32(h.__x); }
static inline __half __float2half(float f) { return __half(f); }
static inline __half __float2half_rn(float f) { return __half(f); }
static inline __half __double2half(double f) { return __half((float)f); }
static inline unsigned short __half_as_ushort(__half h) { return h.__x; }
static inline short __half_as_short(__half h) { return (short)h.__x; }
static inline __half __ushort_as_half(unsigned short u) { __half h; h.__x = u; return h; }
static inline __half __short_as_half(short u) { __half h; h.__x = (unsigned short)u; return h; }
static inline __half2 __halves2half2(__half a, __half b) { return __half2(a, b); }
static inline __half2 make_half2(__half a, __half b) { return __half2(a, b); }
static inline __half2 __half2half2(__half a) { return __half2(a, a); }
static inline __half2 __float2half2_rn(float f) { return __half2(__half(f), __half(f)); }
static inline __half2 __floats2half2_rn(float a, float b) { return __half2(__half(a), __half(b)); }
static inline __half2 __float22half2_rn(float2 v) { return __half2(__half(v.x), __half(v.y)); }
static inline float2 __half22float2(__half2 h) { return make_float2(__half2float(h.x), __half2float(h.y)); }
static inline float __low2float(__half2 h) { return __half2float(h.x); }
static inline float __high2float(__half2 h) { return __half2float(h.y); }
static inline __half __low2half(__half2 h) { return h.x; }
static inline __half __high2half(__half2 h) { return h.y; }
static inline __half __hadd(__half a, __half b) { return __half(__half2float(a) + __half2float(b)); }
static inline __half __hsub(__half a, __half b) { return __half(__half2float(a) - __half2float(b)); }
static inline __half __hmul(__half a, __half b) { return __half(__half2float(a) * __half2float(b)); }
static inline __half __hdiv(__half a, __half b) { return __half(__half2float(a) / __half2float(b)); }
static inline __half __hneg(__half a) { return __ushort_as_half((unsigned short)(a.__x ^ 0x8000u)); }
static inline __half __hfma(__half a, __half b, __half c) {
  return __half(std::fma(__half2float(a), __half2float(b), __half2float(c))); }
static inline __half __hmax(__half a, __half b) { return __half2float(a) >= __half2float(b) ? a : b; }
static inline __half __hmin(__half a, __half b) { return __half2float(a) <= __half2float(b) ? a : b; }
static inline __half2 __hadd2(__half2 a, __half2 b) { return __half2(__hadd(a.x, b.x), __hadd(a.y, b.y)); }
static inline __half2 __hsub2(__half2 a, __half2 b) { return __half2(__hsub(a.x, b.x), __hsub(a.y, b.y)); }
static inline __half2 __hmul2(__half2 a, __half2 b) { return __half2(__hmul(a.x, b.x), __hmul(a.y, b.y)); }
static inline __half2 __hfma2(__half2 a, __half2 b, __half2 c) {
  return __half2(__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)); }
static inline __half operator+(__half a, __half b) { return __hadd(a, b); }
static inline __half operator-(__half a, __half b) { return __hsub(a, b); }
static inline __half operator*(__half a, __half b) { return __hmul(a, b); }
static inline __half operator/(__half a, __half b) { return __hdiv(a, b); }
static inline __half operator-(__half a) { return __hneg(a); }
static inline __half2 operator+(__half2 a, __half2 b) { return __hadd2(a, b); }
static inline __half2 operator*(__half2 a, __half2 b) { return __hmul2(a, b); }

struct __attribute__((aligned(2))) __nv_bfloat16 {
  unsigned short __x;
  __nv_bfloat16() = default;
  __nv_bfloat16(float f) : __x(::cudasim::detail::f32_to_bf16(f)) {}
  __nv_bfloat16(double f) : __x(::cudasim::detail::f32_to_bf16((float)f)) {}
  operator float() const { return ::cudasim::detail::bf16_to_f32(__x); }
};
struct __attribute__((aligned(4))) __nv_bfloat162 {
  __nv_bfloat16 x, y;
  __nv_bfloat162() = default;
  __nv_bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) : x(a), y(b) {}
};
typedef __nv_bfloat16 nv_bfloat16;
typedef __nv_bfloat162 nv_bfloat162;
static inline float __bfloat162float(__nv_bfloat16 b) { return ::cudasim::detail::bf16_to_f32(b.__x); }
static inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.__x; }
static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { __nv_bfloat16 b; b.__x = u; return b; }
static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
  return __nv_bfloat162(__nv_bfloat16(a), __nv_bfloat16(b)); }
static inline __nv_bfloat162 __float22bfloat162_rn(float2 v) {
  return __nv_bfloat162(__nv_bfloat16(v.x), __nv_bfloat16(v.y)); }
static inline float2 __bfloat1622float2(__nv_bfloat162 b) {
  return make_float2(__bfloat162float(b.x), __bfloat162float(b.y)); }
static inline float __low2float(__nv_bfloat162 b) { return __bfloat162float(b.x); }
static inline float __high2float(__nv_bfloat162 b) { return __bfloat162float(b.y); }

// ------------------------------------------------------ host runtime shims
typedef enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorIllegalState = 401,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorNotReady = 600,
  cudaErrorIllegalAddress = 700,
  cudaErrorLaunchOutOfResources = 701,
  cudaErrorAssert = 710,
  cudaErrorLaunchFailure = 719,
  cudaErrorUnknown = 999
} cudaError_t;
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4
};
enum cudaFuncAttribute {
  cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
  cudaFuncAttributePreferredSharedMemoryCarveout = 9
};
struct CUevent_st { double t; };
typedef CUevent_st* cudaEvent_t;
#define cudaStreamNonBlocking 0x01
#define cudaStreamDefault 0x00
#define cudaEventDefault 0x00
#define cudaEventDisableTiming 0x02
#define cudaHostAllocDefault 0x00
struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem, sharedMemPerBlock, sharedMemPerBlockOptin, sharedMemPerMultiprocessor;
  int regsPerBlock, warpSize, maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3];
  int major, minor, multiProcessorCount, maxThreadsPerMultiProcessor, l2CacheSize;
};

namespace cudasim { namespace detail {
int memcpy_checked(void* dst, const void* src, size_t n);
int memset_checked(void* dst, int v, size_t n);
int take_last_error(bool clear);
double now_ms();
}}  // namespace cudasim::detail

static inline const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure: return "unspecified launch failure (cudasim detected an error)";
    default: return "cudasim error";
  }
}
static inline const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    default: return "cudaErrorUnknown";
  }
}
static inline cudaError_t cudaMalloc(void** p, size_t n) {
  *p = ::cudasim::malloc(n);
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
template <class T> static inline cudaError_t cudaMalloc(T** p, size_t n) {
  return cudaMalloc(reinterpret_cast<void**>(p), n);
}
template <class T> static inline cudaError_t cudaMallocManaged(T** p, size_t n, unsigned = 1) {
  return cudaMalloc(reinterpret_cast<void**>(p), n);
}
template <class T> static inline cudaError_t cudaMallocAsync(T** p, size_t n, cudaStream_t) {
  return cudaMalloc(reinterpret_cast<void**>(p), n);
}
template <class T> static inline cudaError_t cudaMallocHost(T** p, size_t n) {
  *p = static_cast<T*>(std::malloc(n ? n : 1));
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
template <class T> static inline cudaError_t cudaHostAlloc(T** p, size_t n, unsigned) { return cudaMallocHost(p, n); }
static inline cudaError_t cudaFreeHost(void* p) { std::free(p); return cudaSuccess; }
static inline cudaError_t cudaFree(void* p) { ::cudasim::free(p); return cudaSuccess; }
static inline cudaError_t cudaFreeAsync(void* p, cudaStream_t) { ::cudasim::free(p); return cudaSuccess; }
static inline cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind) {
  return (cudaError_t)::cudasim::detail::memcpy_checked(d, s, n);
}
static inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind k, cudaStream_t st = nullptr) {
  return (cudaError_t)::cudasim::detail::submit(st, [=]() { return (int)cudaMemcpy(d, s, n, k); });
}
static inline cudaError_t cudaMemset(void* d, int v, size_t n) {
  return (cudaError_t)::cudasim::detail::memset_checked(d, v, n);
}
static inline cudaError_t cudaMemsetAsync(void* d, int v, size_t n, cudaStream_t st = nullptr) {
  return (cudaError_t)::cudasim::detail::submit(st, [=]() { return (int)cudaMemset(d, v, n); });
}
template <class T>
static inline cudaError_t cudaMemcpyToSymbol(T& sym, const void* src, size_t n, size_t off = 0,
                                             cudaMemcpyKind = cudaMemcpyHostToDevice) {
  if (off + n > sizeof(T)) return cudaErrorInvalidValue;
  std::memcpy(reinterpret_cast<char*>(&sym) + off, src, n);
  return cudaSuccess;
}
template <class T>
static inline cudaError_t cudaMemcpyFromSymbol(void* dst, const T& sym, size_t n, size_t off = 0,
                                               cudaMemcpyKind = cudaMemcpyDeviceToHost) {
  if (off + n > sizeof(T)) return cudaErrorInvalidValue;
  std::memcpy(dst, reinterpret_cast<const char*>(&sym) + off, n);
  return cudaSuccess;
}
static inline cudaError_t cudaDeviceSynchronize() { return (cudaError_t)::cudasim::detail::take_last_error(false); }
static inline cudaError_t cudaGetLastError() { return (cudaError_t)::cudasim::detail::take_last_error(true); }
static inline cudaError_t cudaPeekAtLastError() { return (cudaError_t)::cudasim::detail::take_last_error(false); }
static inline cudaError_t cudaDeviceReset() { return cudaSuccess; }
static inline cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : cudaErrorInvalidDevice; }
static inline cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
static inline cudaError_t cudaGetDeviceCount(int* n) { *n = 1; return cudaSuccess; }
// The simulated device's memory: CUDASIM_MEM_MB (default 1024) MiB, all of it free.
static inline cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  const char* mb = std::getenv("CUDASIM_MEM_MB");
  *total_bytes = *free_bytes = (size_t)(mb ? std::atol(mb) : 1024) << 20;
  return cudaSuccess;
}
static inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
  std::memset(p, 0, sizeof *p);
  std::snprintf(p->name, sizeof p->name, "cudasim (CPU simulation, sm_80 semantics)");
  p->totalGlobalMem = (size_t)8 << 30;
  p->sharedMemPerBlock = 48 * 1024;
  p->sharedMemPerBlockOptin = 232448;
  p->sharedMemPerMultiprocessor = 233472;
  p->regsPerBlock = 65536; p->warpSize = 32; p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = 1024; p->maxThreadsDim[1] = 1024; p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 0x7fffffff; p->maxGridSize[1] = 65535; p->maxGridSize[2] = 65535;
  p->major = 8; p->minor = 0; p->multiProcessorCount = 1; p->maxThreadsPerMultiProcessor = 2048;
  p->l2CacheSize = 40 << 20;
  return cudaSuccess;
}
template <class F> static inline cudaError_t cudaFuncSetAttribute(F*, cudaFuncAttribute, int) { return cudaSuccess; }
static inline cudaError_t cudaStreamCreate(cudaStream_t* s) { *s = new CUstream_st{1}; return cudaSuccess; }
static inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) { return cudaStreamCreate(s); }
static inline cudaError_t cudaStreamDestroy(cudaStream_t s) { delete s; return cudaSuccess; }
static inline cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  if (::cudasim::detail::capturing(s)) return cudaErrorStreamCaptureUnsupported; // as CUDA: no sync inside a capture
  return cudaDeviceSynchronize();
}
static inline cudaError_t cudaStreamQuery(cudaStream_t) { return cudaSuccess; }
static inline cudaError_t cudaEventCreate(cudaEvent_t* e) { *e = new CUevent_st{0}; return cudaSuccess; }
static inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) { return cudaEventCreate(e); }
static inline cudaError_t cudaEventDestroy(cudaEvent_t e) { delete e; return cudaSuccess; }
static inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t = nullptr) {
  e->t = ::cudasim::detail::now_ms(); return cudaSuccess; }
static inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
static inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  *ms = (float)(b->t - a->t); return cudaSuccess; }
static inline cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned = 0) { return cudaSuccess; }

// Stream capture and graphs (see cudasim::detail::submit): one capture at a time per host thread.
enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0, cudaStreamCaptureModeThreadLocal = 1, cudaStreamCaptureModeRelaxed = 2
};
struct CUgraph_st { std::vector<::cudasim::detail::Work> work; };
struct CUgraphExec_st { std::vector<::cudasim::detail::Work> work; };
typedef CUgraph_st* cudaGraph_t;
typedef CUgraphExec_st* cudaGraphExec_t;
static inline cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode) {
  ::cudasim::detail::Capture& c = ::cudasim::detail::capture();
  if (!s || c.work) return cudaErrorIllegalState; // the legacy stream cannot be captured; no nesting
  c.stream = s;
  c.work = new std::vector<::cudasim::detail::Work>();
  return cudaSuccess;
}
static inline cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* g) {
  ::cudasim::detail::Capture& c = ::cudasim::detail::capture();
  if (!c.work || c.stream != s) return cudaErrorIllegalState;
  *g = new CUgraph_st{std::move(*c.work)};
  delete c.work;
  c.work = nullptr;
  c.stream = nullptr;
  return cudaSuccess;
}
static inline cudaError_t cudaGraphInstantiate(cudaGraphExec_t* e, cudaGraph_t g, unsigned long long = 0) {
  if (!g) return cudaErrorInvalidValue;
  *e = new CUgraphExec_st{g->work};
  return cudaSuccess;
}
static inline cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s) {
  if (!e) return cudaErrorInvalidValue;
  return (cudaError_t)::cudasim::detail::submit(s, [e]() {
    for (const ::cudasim::detail::Work& w : e->work)
      if (const int r = w()) return r;
    return 0;
  });
}
static inline cudaError_t cudaGraphDestroy(cudaGraph_t g) { delete g; return cudaSuccess; }
static inline cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) { delete e; return cudaSuccess; }

#endif  // CUDASIM_H
