// cudasim.cpp -- scheduler, warp rendezvous, shared-memory management, race
// detector and host shims of the CUDA CPU simulator (see cudasim.h, README.md).
//
// This file is compiled WITHOUT -fsanitize=thread (it implements the __tsan_*
// hooks that the instrumented kernel translation unit calls) and must not
// contain thread_local variables: the executable's static TLS segment is
// treated as the shared memory of the running block.
//
// Threads and scheduling
//   A block of N threads is N fibers (ucontext_t, pooled mmap'd stacks with a
//   PROT_NONE guard page).  The block scheduler (running on the launching OS
//   thread's own stack) keeps a ready queue; it resumes one ready fiber, which
//   runs until it blocks at a synchronisation point or exits, and repeats.  In
//   deterministic mode the queue is FIFO (threads in thread-index order after
//   every barrier); with a seed the next fiber is drawn at random, the block
//   order is shuffled, and race builds also yield at random shared accesses.
//   When the queue runs dry while threads are still alive the block is
//   deadlocked: that is reported with every thread's waiting site.
//
// __syncthreads
//   Arrival records the call site; the first arrival of a phase fixes the site
//   and later arrivals must match it (else: divergent barrier).  Arriving after
//   a thread of the block exited, or exiting while others wait, is reported
//   (the barrier could never complete with all threads).  The last arrival
//   releases everybody and starts a new race-detection epoch.
//
// Warp intrinsics
//   Lane L calling op(mask) checks that L is in mask and that every lane of the
//   mask exists and has not exited, deposits (op, mask, operand, arg, width) and
//   blocks.  When every lane of the mask is blocked on the same mask, the group
//   completes: results are computed from the deposited operands (shuffle source
//   lanes outside the width segment return the caller's own value, as in CUDA;
//   a source lane outside the mask is an error) and the lanes become ready.
//
// Race detection (kernel TU built with -fsanitize=thread; libtsan not linked)
//   Every instrumented load/store calls __tsan_readN/writeN(addr) below.  For
//   addresses in the shared segment, and in cudasim::malloc buffers, a shadow
//   cell per byte remembers the last writer and two last readers as
//   (block serial, barrier epoch, thread, warp-sync stamp, pc).  Two accesses,
//   at least one a write, by different threads of a block in the same barrier
//   epoch are a race unless both threads are in one warp and took part in a
//   common warp intrinsic (__syncwarp, shuffle, vote) between the two accesses
//   (pairwise warp-sync stamps).  For global memory, a conflicting access from
//   another block of the same launch is a race too (CUDASIM_RACE_GLOBAL=2, the
//   default; 1 = within a block only; 0 = shared memory only).  Atomics are
//   not instrumented (they never race).  Accesses into a buffer's guard zone
//   and beyond the launch's dynamic shared size are reported as out of bounds.
//
// Limits: see README.md.
#include "cudasim.h"

#include <cxxabi.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define CUDASIM_ASAN 1
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#else
#define CUDASIM_ASAN 0
#endif

// The dynamic shared memory region.  Every `extern __shared__` symbol of the
// kernels is aliased to it at link time (--defsym NAME=cudasim_dyn_smem).
static constexpr size_t kMaxDynSmem = 232448;  // sm_90 opt-in maximum (227 KiB)
alignas(128) thread_local unsigned char cudasim_dyn_smem[kMaxDynSmem];

// Fiber switches. swapcontext saves and restores the signal mask with a system call on every
// switch (~1 us), and under ASan its interceptor also clears the shadow of the whole new stack;
// a block of 128 threads switches thousands of times per launch. On x86-64 a switch is instead
// this: push the callee-saved registers and the SSE/x87 control words, swap stack pointers, pop
// (ASan builds keep their __sanitizer_*_switch_fiber annotations around it).
#if defined(__x86_64__)
#define CUDASIM_FAST_SWITCH 1
extern "C" void cudasim_ctx_switch(void** save_sp, void* new_sp);
asm(R"(
  .text
  .globl cudasim_ctx_switch
  .type cudasim_ctx_switch,@function
cudasim_ctx_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size cudasim_ctx_switch,.-cudasim_ctx_switch
)");
#else
#define CUDASIM_FAST_SWITCH 0
#endif

namespace cudasim {
namespace detail {

// ------------------------------------------------------------------ state
enum State { READY, RUNNING, AT_BARRIER, AT_WARP, EXITED };

struct Fiber {
  ucontext_t ctx;
  void* sp = nullptr;  // saved stack pointer (fast switch)
  char* stack_lo = nullptr;  // usable stack (above the guard page)
  size_t stack_size = 0;
  uint3 tid{0, 0, 0};
  int linear = 0, lane = 0, warp = 0;
  int state = EXITED;
  const char* file = "";
  int line = 0;
  int op = 0, arg = 0, width = 32, pred = 0;
  unsigned mask = 0;
  uint64_t val = 0, result = 0;
  int bar_pred = 0, bar_result = 0;
  void* asan_fake = nullptr;
};

Fiber* g_cur = nullptr;
uint3 g_blockIdx{0, 0, 0}, g_blockDim{1, 1, 1}, g_gridDim{1, 1, 1};

namespace {

struct Acc {
  uint32_t gen;    // barrier epoch (globally unique); 0 = never accessed
  int32_t tid;     // linear thread index in the block
  uint32_t wstamp; // warp-sync stamp of the thread's warp at the access
  uint32_t block;  // global block serial
  const void* pc;
};
struct Cell { Acc w, r1, r2; };

struct Alloc {
  char* raw;
  char* user;
  size_t size;
  size_t guard;
  Cell* shadow;  // race builds, lazily
};

Config g_cfg;
bool g_cfg_init = false;
int g_last_err = 0;
int g_errors = 0;
std::string g_last_text;

[[maybe_unused]] ucontext_t g_sched;
[[maybe_unused]] void* g_sched_sp = nullptr;
[[maybe_unused]] void* g_sched_fake = nullptr;
[[maybe_unused]] const void* g_sched_bottom = nullptr;
[[maybe_unused]] size_t g_sched_size = 0;
std::vector<Fiber*> g_pool;
bool g_stacks_dirty = false;

// current launch / block
const KernelCall* g_call = nullptr;
bool g_in_kernel = false;
bool g_abort = false;
int g_nthreads = 0, g_nlive = 0, g_nexited = 0, g_nbar = 0;
int g_first_exited = -1;
const char* g_bar_file = "";
int g_bar_line = 0, g_bar_kind = -1, g_bar_first = -1;
std::deque<int> g_ready;
uint64_t g_rng = 0;
size_t g_dyn_smem = 0;
long long g_clock = 0;

// race detection
bool g_instrumented = false;  // set by __tsan_init: some TU is instrumented
uint32_t g_gen = 1;
uint32_t g_block_serial = 0, g_launch_first_block = 1;
std::vector<uint32_t> g_wstamp, g_pairsync;  // per warp; per warp x lane x lane
// Per warp of the running block: lanes waiting in a warp intrinsic, and the exited lanes (a
// rendezvous is only scanned once enough lanes wait; masks are checked against exits in O(1)).
std::vector<int> g_warp_waiting;
std::vector<unsigned> g_warp_exited;
std::vector<Cell> g_smem_shadow;
std::set<std::pair<const void*, const void*>> g_race_seen;
std::set<const void*> g_oob_seen;
int g_reports = 0;
int g_launch_errors = 0;

// shared segment = the executable's static TLS block on this OS thread
char* g_tls_lo = nullptr;
size_t g_tls_size = 0;
char* g_dyn_lo = nullptr;

std::map<uintptr_t, Alloc> g_allocs;  // keyed by raw (guard-inclusive) start

// ----------------------------------------------------------------- helpers
uint64_t rng_next() {
  uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

const char* env(const char* k) {
  const char* v = getenv(k);
  return v && *v ? v : nullptr;
}

void init_config() {
  if (g_cfg_init) return;
  g_cfg_init = true;
  if (const char* v = env("CUDASIM_SEED")) g_cfg.seed = strtoull(v, nullptr, 0);
  if (const char* v = env("CUDASIM_RACE_GLOBAL")) g_cfg.race_global = atoi(v);
  if (const char* v = env("CUDASIM_ON_ERROR")) {
    if (!strcmp(v, "abort")) g_cfg.on_error = OnError::Abort;
    else if (!strcmp(v, "return")) g_cfg.on_error = OnError::Return;
    else g_cfg.on_error = OnError::Exit;
  }
  g_cfg.stack_bytes = CUDASIM_ASAN ? 256 * 1024 : 64 * 1024;
  if (const char* v = env("CUDASIM_STACK_KB")) g_cfg.stack_bytes = (size_t)atoi(v) * 1024;
  if (const char* v = env("CUDASIM_POISON")) g_cfg.poison = atoi(v) != 0;
}

// ------------------------------------------------------- symbolisation
struct Sym { uintptr_t lo; size_t size; std::string name; };
bool g_syms_loaded = false;
std::vector<Sym> g_funcs, g_tlsyms;
uintptr_t g_exe_bias = 0;

int phdr_exe_cb(struct dl_phdr_info* info, size_t, void* data) {
  // The first object reported is the main program.
  auto* out = static_cast<struct dl_phdr_info*>(data);
  *out = *info;
  return 1;
}

std::string demangle(const char* n) {
  int st = 0;
  char* d = abi::__cxa_demangle(n, nullptr, nullptr, &st);
  std::string s = (st == 0 && d) ? d : n;
  std::free(d);
  return s;
}

void load_syms() {
  if (g_syms_loaded) return;
  g_syms_loaded = true;
  struct dl_phdr_info info;
  memset(&info, 0, sizeof info);
  dl_iterate_phdr(phdr_exe_cb, &info);
  g_exe_bias = info.dlpi_addr;
  int fd = open("/proc/self/exe", O_RDONLY);
  if (fd < 0) return;
  struct stat st;
  if (fstat(fd, &st) != 0) { close(fd); return; }
  void* m = mmap(nullptr, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (m == MAP_FAILED) return;
  const auto* eh = static_cast<const Elf64_Ehdr*>(m);
  const auto* sh = reinterpret_cast<const Elf64_Shdr*>(static_cast<const char*>(m) + eh->e_shoff);
  for (int i = 0; i < eh->e_shnum; i++) {
    if (sh[i].sh_type != SHT_SYMTAB) continue;
    const auto* syms = reinterpret_cast<const Elf64_Sym*>(static_cast<const char*>(m) + sh[i].sh_offset);
    const char* strs = static_cast<const char*>(m) + sh[sh[i].sh_link].sh_offset;
    size_t n = sh[i].sh_size / sizeof(Elf64_Sym);
    for (size_t k = 0; k < n; k++) {
      int t = ELF64_ST_TYPE(syms[k].st_info);
      if (t == STT_FUNC && syms[k].st_value)
        g_funcs.push_back({syms[k].st_value + g_exe_bias, syms[k].st_size, demangle(strs + syms[k].st_name)});
      else if (t == STT_TLS)
        g_tlsyms.push_back({syms[k].st_value, syms[k].st_size, demangle(strs + syms[k].st_name)});
    }
  }
  munmap(m, (size_t)st.st_size);
}

std::map<const void*, std::string> g_pc_cache;

// "file:line (function)" for a return address inside the executable.
std::string where(const void* pc) {
  if (!pc) return "?";
  auto it = g_pc_cache.find(pc);
  if (it != g_pc_cache.end()) return it->second;
  load_syms();
  uintptr_t a = (uintptr_t)pc - 1;
  std::string fn;
  for (const Sym& s : g_funcs)
    if (a >= s.lo && a < s.lo + std::max<size_t>(s.size, 1)) { fn = s.name; break; }
  std::string loc;
  char cmd[512];
  snprintf(cmd, sizeof cmd, "addr2line -e /proc/%d/exe 0x%lx 2>/dev/null", (int)getpid(),
           (unsigned long)(a - g_exe_bias));
  if (FILE* p = popen(cmd, "r")) {
    char buf[1024];
    if (fgets(buf, sizeof buf, p)) {
      buf[strcspn(buf, "\n")] = 0;
      if (char* d = strstr(buf, " (discriminator")) *d = 0;
      if (strncmp(buf, "??", 2) != 0) loc = buf;
    }
    pclose(p);
  }
  char pcs[32];
  snprintf(pcs, sizeof pcs, "pc %p", pc);
  std::string r = loc.empty() ? std::string(pcs) : loc;
  if (!fn.empty()) r += " (" + fn + ")";
  g_pc_cache[pc] = r;
  return r;
}

std::string kernel_name() {
  if (!g_call) return "?";
  if (g_call->name) return g_call->name;
  load_syms();
  for (const Sym& s : g_funcs)
    if ((uintptr_t)g_call->fn == s.lo) return s.name;
  char b[40];
  snprintf(b, sizeof b, "kernel@%p", g_call->fn);
  return b;
}

std::string tid_str(int linear) {
  unsigned x = (unsigned)linear % g_blockDim.x, y = ((unsigned)linear / g_blockDim.x) % g_blockDim.y,
           z = (unsigned)linear / (g_blockDim.x * g_blockDim.y);
  char b[96];
  snprintf(b, sizeof b, "thread (%u,%u,%u) [tid %d, warp %d lane %d]", x, y, z, linear, linear / 32, linear % 32);
  return b;
}

std::string block_str() {
  char b[64];
  snprintf(b, sizeof b, "block (%u,%u,%u)", g_blockIdx.x, g_blockIdx.y, g_blockIdx.z);
  return b;
}

// Name of a shared-memory address: "sym+0xoff" when the TLS symbol is known.
std::string smem_name(uintptr_t a) {
  char b[256];
  uintptr_t off = a - (uintptr_t)g_tls_lo;
  if (a >= (uintptr_t)g_dyn_lo && a < (uintptr_t)g_dyn_lo + kMaxDynSmem) {
    snprintf(b, sizeof b, "dynamic shared memory (extern __shared__) +0x%lx", (unsigned long)(a - (uintptr_t)g_dyn_lo));
    return b;
  }
  load_syms();
  // Validate the TLS symbol offsets against a variable whose address we know.
  uintptr_t delta = 0;
  bool ok = false;
  for (const Sym& s : g_tlsyms)
    if (s.name == "cudasim_dyn_smem") { delta = (uintptr_t)g_dyn_lo - (uintptr_t)g_tls_lo - s.lo; ok = true; }
  if (ok)
    for (const Sym& s : g_tlsyms)
      if (off >= s.lo + delta && off < s.lo + delta + s.size) {
        snprintf(b, sizeof b, "__shared__ `%s` +0x%lx", s.name.c_str(), (unsigned long)(off - s.lo - delta));
        return b;
      }
  snprintf(b, sizeof b, "static shared memory, segment offset 0x%lx", (unsigned long)off);
  return b;
}

void vreport(const char* kind, const char* fmt, va_list ap) {
  char buf[4096];
  vsnprintf(buf, sizeof buf, fmt, ap);
  g_last_text = buf;
  g_errors++;
  g_launch_errors++;
  if (g_reports++ < 20) fprintf(stderr, "cudasim: %s: %s\n", kind, buf);
  else if (g_reports == 21) fprintf(stderr, "cudasim: (further reports suppressed)\n");
}

void report(const char* kind, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void report(const char* kind, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vreport(kind, fmt, ap);
  va_end(ap);
}

void to_sched(Fiber* f, bool exiting);

// Fatal misuse detected inside a simulated thread or by the scheduler: report,
// abandon the launch (the scheduler returns; blocked fibers are dropped).
[[noreturn]] void fail_in_fiber(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void fail_in_fiber(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vreport("ERROR", fmt, ap);
  va_end(ap);
  g_abort = true;
  to_sched(g_cur, true);
  abort();  // never resumed
}

// ------------------------------------------------------------ fibers
void to_sched(Fiber* f, bool exiting) {
#if CUDASIM_ASAN
  __sanitizer_start_switch_fiber(exiting ? nullptr : &f->asan_fake, g_sched_bottom, g_sched_size);
#else
  (void)exiting;
#endif
#if CUDASIM_FAST_SWITCH
  cudasim_ctx_switch(&f->sp, g_sched_sp);
#else
  swapcontext(&f->ctx, &g_sched);
#endif
#if CUDASIM_ASAN
  __sanitizer_finish_switch_fiber(f->asan_fake, nullptr, nullptr);
#endif
}

void switch_to(Fiber* f) {
  g_cur = f;
  f->state = RUNNING;
#if CUDASIM_ASAN
  __sanitizer_start_switch_fiber(&g_sched_fake, f->stack_lo, f->stack_size);
#endif
#if CUDASIM_FAST_SWITCH
  cudasim_ctx_switch(&g_sched_sp, f->sp);
#else
  swapcontext(&g_sched, &f->ctx);
#endif
#if CUDASIM_ASAN
  __sanitizer_finish_switch_fiber(g_sched_fake, nullptr, nullptr);
#endif
  g_cur = nullptr;
}

void warp_check_exit(Fiber* f);

void fiber_main() {
#if CUDASIM_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &g_sched_bottom, &g_sched_size);
#endif
  g_call->thunk(g_call->ctx);
  Fiber* f = g_cur;
  f->state = EXITED;
  g_warp_exited[(size_t)f->warp] |= 1u << f->lane;
  g_nlive--;
  g_nexited++;
  if (g_first_exited < 0) g_first_exited = f->linear;
  if (g_nbar > 0)
    fail_in_fiber("kernel `%s` %s: %s exited while %d thread(s) wait at __syncthreads (%s:%d); "
                  "the barrier can never be reached by all threads of the block",
                  kernel_name().c_str(), block_str().c_str(), tid_str(f->linear).c_str(), g_nbar, g_bar_file,
                  g_bar_line);
  warp_check_exit(f);
  to_sched(f, true);
  abort();
}

void release_pool() {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  for (Fiber* f : g_pool) {
    munmap(f->stack_lo - page, f->stack_size + page);
    delete f;
  }
  g_pool.clear();
}

Fiber* new_fiber() {
  static bool registered = false;
  if (!registered) {
    registered = true;
    atexit(release_pool);
  }
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t sz = (g_cfg.stack_bytes + page - 1) / page * page;
  void* m = mmap(nullptr, sz + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) {
    fprintf(stderr, "cudasim: cannot allocate fiber stack\n");
    abort();
  }
  mprotect(m, page, PROT_NONE);  // stack overflow -> SIGSEGV instead of corruption
  Fiber* f = new Fiber;
  f->stack_lo = static_cast<char*>(m) + page;
  f->stack_size = sz;
  return f;
}

// ------------------------------------------------------ shared segment
int phdr_tls_cb(struct dl_phdr_info* info, size_t, void*) {
  for (int i = 0; i < info->dlpi_phnum; i++)
    if (info->dlpi_phdr[i].p_type == PT_TLS) {
      char* lo = static_cast<char*>(info->dlpi_tls_data);
      size_t n = info->dlpi_phdr[i].p_memsz;
      if (lo && (char*)cudasim_dyn_smem >= lo && (char*)cudasim_dyn_smem < lo + n) {
        g_tls_lo = lo;
        g_tls_size = n;
        return 1;
      }
    }
  return 0;
}

void find_shared_segment() {
  g_dyn_lo = reinterpret_cast<char*>(cudasim_dyn_smem);
  if (g_tls_lo) return;
  dl_iterate_phdr(phdr_tls_cb, nullptr);
  if (!g_tls_lo) {
    fprintf(stderr, "cudasim: cannot locate the static TLS segment holding shared memory "
                    "(cudasim.cpp must be linked into the executable)\n");
    abort();
  }
}

void poison_shared() {
  if (!g_cfg.poison) return;
  char* dyn_end = g_dyn_lo + kMaxDynSmem;
  memset(g_tls_lo, 0xff, (size_t)(g_dyn_lo - g_tls_lo));
  memset(g_dyn_lo, 0xff, g_dyn_smem);
  memset(dyn_end, 0xff, (size_t)(g_tls_lo + g_tls_size - dyn_end));
}

// ---------------------------------------------------------- race shadow
inline bool conflicts(const Acc& p, const Fiber* f, bool shared) {
  if (p.gen == 0) return false;
  if (p.block == g_block_serial) {
    if (p.gen != g_gen || p.tid == f->linear) return false;
    if (p.tid / 32 == f->warp &&
        g_pairsync[((size_t)f->warp * 32 + (size_t)f->lane) * 32 + (size_t)(p.tid % 32)] > p.wstamp)
      return false;  // ordered by a common warp intrinsic
    return true;
  }
  if (shared) return false;
  return g_cfg.race_global >= 2 && p.block >= g_launch_first_block;
}

void race_report(const char* kind, const Acc& p, const Fiber* f, bool write, size_t n, const void* pc,
                 const std::string& what) {
  if (!g_race_seen.insert({p.pc, pc}).second) {
    g_errors++;
    g_launch_errors++;
    return;
  }
  bool cross = p.block != g_block_serial;
  std::string prev = cross ? "a thread of another block of the same launch (" + std::to_string(p.tid) + " in that block)"
                           : tid_str(p.tid);
  report("RACE", "kernel `%s`: %s on %s\n    %s: %s %s %zu byte(s) at %s\n    previous %s by %s at %s\n"
         "    with no %s in between",
         kernel_name().c_str(), kind, what.c_str(), block_str().c_str(), tid_str(f->linear).c_str(),
         write ? "writes" : "reads", n, where(pc).c_str(), strstr(kind, "after-read") ? "read" : "write",
         prev.c_str(), where(p.pc).c_str(), cross ? "grid-wide synchronisation (blocks are unordered)"
               : "__syncthreads() (nor, within a warp, __syncwarp() or a warp intrinsic)");
}

void check_cells(Cell* cells, uintptr_t a, size_t n, bool write, const Fiber* f, const void* pc, bool shared) {
  Acc cur{g_gen, f->linear, g_wstamp[(size_t)f->warp], g_block_serial, pc};
  bool reported = false;
  for (size_t i = 0; i < n; i++) {
    Cell& c = cells[i];
    if (!reported) {
      const Acc* p = nullptr;
      const char* kind = nullptr;
      if (conflicts(c.w, f, shared)) { p = &c.w; kind = write ? "write-after-write" : "read-after-write"; }
      else if (write && conflicts(c.r1, f, shared)) { p = &c.r1; kind = "write-after-read"; }
      else if (write && conflicts(c.r2, f, shared)) { p = &c.r2; kind = "write-after-read"; }
      if (p) {
        reported = true;
        std::string what;
        if (shared) what = smem_name(a + i);
        else {
          char b[128];
          snprintf(b, sizeof b, "global memory %p", (void*)(a + i));
          what = b;
        }
        race_report(kind, *p, f, write, n, pc, what);
      }
    }
    if (write) {
      c.w = cur;
    } else {
      auto stale = [&](const Acc& r) { return r.gen != g_gen || r.block != g_block_serial || r.tid == f->linear; };
      if (stale(c.r1)) c.r1 = cur;
      else c.r2 = cur;
    }
  }
}

Alloc* find_alloc(uintptr_t a) {
  auto it = g_allocs.upper_bound(a);
  if (it == g_allocs.begin()) return nullptr;
  --it;
  Alloc& al = it->second;
  if (a < (uintptr_t)al.user + al.size + al.guard) return &al;
  return nullptr;
}

void on_access(void* addr, size_t n, bool write, const void* pc) {
  Fiber* f = g_cur;
  if (!f || !g_in_kernel) return;
  uintptr_t a = (uintptr_t)addr;
  if (a - (uintptr_t)g_tls_lo < g_tls_size) {
    if (a >= (uintptr_t)g_dyn_lo + g_dyn_smem && a < (uintptr_t)g_dyn_lo + kMaxDynSmem) {
      if (g_oob_seen.insert(pc).second)
        report("OUT-OF-BOUNDS", "kernel `%s` %s: %s %s %zu byte(s) at dynamic shared offset 0x%lx, beyond the "
               "launch's %zu bytes of dynamic shared memory, at %s",
               kernel_name().c_str(), block_str().c_str(), tid_str(f->linear).c_str(), write ? "writes" : "reads", n,
               (unsigned long)(a - (uintptr_t)g_dyn_lo), g_dyn_smem, where(pc).c_str());
      return;
    }
    if (g_smem_shadow.empty()) g_smem_shadow.resize(g_tls_size);
    size_t off = a - (uintptr_t)g_tls_lo;
    check_cells(&g_smem_shadow[off], a, std::min(n, g_tls_size - off), write, f, pc, true);
    if (g_cfg.seed && (rng_next() & 7) == 0) yield_point();
    return;
  }
  Alloc* al = find_alloc(a);
  if (!al) al = find_alloc(a + n - 1);
  if (!al) return;
  uintptr_t ulo = (uintptr_t)al->user, uhi = ulo + al->size;
  if (a < ulo || a + n > uhi) {
    if (g_oob_seen.insert(pc).second)
      report("OUT-OF-BOUNDS", "kernel `%s` %s: %s %s %zu byte(s) at offset %ld of a %zu-byte cudaMalloc buffer at %s",
             kernel_name().c_str(), block_str().c_str(), tid_str(f->linear).c_str(), write ? "writes" : "reads", n,
             (long)(a - ulo), al->size, where(pc).c_str());
    else {
      g_errors++;
      g_launch_errors++;
    }
    return;
  }
  if (g_cfg.race_global <= 0) return;
  if (!al->shadow) al->shadow = static_cast<Cell*>(calloc(al->size ? al->size : 1, sizeof(Cell)));
  check_cells(al->shadow + (a - ulo), a, n, write, f, pc, false);
}

// -------------------------------------------------------- warp rendezvous
const char* op_name(int op) {
  static const char* names[] = {"__syncwarp", "__shfl_sync", "__shfl_up_sync", "__shfl_down_sync",
                                "__shfl_xor_sync", "__ballot_sync", "__any_sync", "__all_sync",
                                "__reduce_add_sync", "__reduce_min_sync", "__reduce_max_sync",
                                "__reduce_add_sync", "__reduce_min_sync", "__reduce_max_sync",
                                "__reduce_and_sync", "__reduce_or_sync", "__reduce_xor_sync",
                                "__match_any_sync", "__match_all_sync"};
  return op >= 0 && op <= W_MATCH_ALL ? names[op] : "?";
}

int warp_lanes(int warp) { return std::min(32, g_nthreads - warp * 32); }

// A lane exits: any lane waiting on a warp intrinsic whose mask names it can
// never complete.
void warp_check_exit(Fiber* f) {
  int base = f->warp * 32;
  for (int j = 0; j < warp_lanes(f->warp); j++) {
    Fiber* g = g_pool[(size_t)(base + j)];
    if (g->state == AT_WARP && ((g->mask >> f->lane) & 1u))
      fail_in_fiber("kernel `%s` %s: %s waits in %s(mask 0x%08x) at %s:%d, but lane %d named by the mask "
                    "exited without arriving",
                    kernel_name().c_str(), block_str().c_str(), tid_str(g->linear).c_str(), op_name(g->op), g->mask,
                    g->file, g->line, f->lane);
  }
}

void complete_group(Fiber* f) {
  unsigned mask = f->mask;
  int base = f->warp * 32;
  if (g_warp_waiting[(size_t)f->warp] < __builtin_popcount(mask)) return;  // not everyone is here yet
  Fiber* lanes[32] = {};
  for (int j = 0; j < 32; j++) {
    if (!((mask >> j) & 1u)) continue;
    Fiber* g = g_pool[(size_t)(base + j)];
    if (g->state != AT_WARP || g->mask != mask) return;  // not everyone is here yet
    lanes[j] = g;
  }
  for (int j = 0; j < 32; j++)
    if (lanes[j] && lanes[j]->op != f->op)
      fail_in_fiber("kernel `%s` %s: lanes of mask 0x%08x execute different warp intrinsics: lane %d %s at %s:%d, "
                    "lane %d %s at %s:%d",
                    kernel_name().c_str(), block_str().c_str(), mask, f->lane, op_name(f->op), f->file, f->line, j,
                    op_name(lanes[j]->op), lanes[j]->file, lanes[j]->line);
  unsigned ballot = 0;
  for (int j = 0; j < 32; j++)
    if (lanes[j] && lanes[j]->val) ballot |= 1u << j;
  for (int j = 0; j < 32; j++) {
    Fiber* g = lanes[j];
    if (!g) continue;
    uint64_t r = 0;
    int op = g->op;
    if (op >= W_SHFL_IDX && op <= W_SHFL_XOR) {
      int w = g->width, seg = j & ~(w - 1), src = j;
      switch (op) {
        case W_SHFL_IDX: src = seg + (g->arg & (w - 1)); break;
        case W_SHFL_UP: src = j - g->arg; if (src < seg) src = j; break;
        case W_SHFL_DOWN: src = j + g->arg; if (src >= seg + w) src = j; break;
        default: src = j ^ g->arg; if (src < seg || src >= seg + w) src = j; break;
      }
      if (src < 0 || src > 31 || !lanes[src])
        fail_in_fiber("kernel `%s` %s: lane %d %s(mask 0x%08x) at %s:%d reads lane %d, which is not in the mask "
                      "(undefined value in CUDA)",
                      kernel_name().c_str(), block_str().c_str(), j, op_name(op), mask, g->file, g->line, src);
      r = lanes[src]->val;
    } else if (op == W_BALLOT) {
      r = ballot;
    } else if (op == W_ANY) {
      r = ballot != 0;
    } else if (op == W_ALL) {
      r = ballot == mask;
    } else if (op >= W_ADD_I && op <= W_XOR) {
      bool first = true;
      uint32_t acc = 0;
      for (int k = 0; k < 32; k++) {
        if (!lanes[k]) continue;
        uint32_t v = (uint32_t)lanes[k]->val;
        if (first) { acc = v; first = false; continue; }
        switch (op) {
          case W_ADD_I: case W_ADD_U: acc += v; break;
          case W_MIN_I: acc = (int32_t)v < (int32_t)acc ? v : acc; break;
          case W_MAX_I: acc = (int32_t)v > (int32_t)acc ? v : acc; break;
          case W_MIN_U: acc = std::min(acc, v); break;
          case W_MAX_U: acc = std::max(acc, v); break;
          case W_AND: acc &= v; break;
          case W_OR: acc |= v; break;
          default: acc ^= v; break;
        }
      }
      r = acc;
    } else if (op == W_MATCH_ANY) {
      unsigned m = 0;
      for (int k = 0; k < 32; k++)
        if (lanes[k] && lanes[k]->val == g->val) m |= 1u << k;
      r = m;
    } else if (op == W_MATCH_ALL) {
      bool all = true;
      for (int k = 0; k < 32; k++)
        if (lanes[k] && lanes[k]->val != g->val) all = false;
      r = all ? mask : 0;
      g->pred = all;
    }
    g->result = r;
  }
  if (g_instrumented) {  // pairwise happens-before for the race detector
    uint32_t s = ++g_wstamp[(size_t)f->warp];
    for (int i = 0; i < 32; i++)
      if (lanes[i])
        for (int j = 0; j < 32; j++)
          if (lanes[j]) g_pairsync[((size_t)f->warp * 32 + (size_t)i) * 32 + (size_t)j] = s;
  }
  for (int j = 0; j < 32; j++)
    if (lanes[j]) {
      lanes[j]->state = READY;
      g_warp_waiting[(size_t)f->warp]--;
      g_ready.push_back(base + j);
    }
}

// ----------------------------------------------------------- block runner
void run_block(unsigned bx, unsigned by, unsigned bz) {
  g_blockIdx = uint3{bx, by, bz};
  g_nlive = g_nthreads;
  g_nexited = g_nbar = 0;
  g_first_exited = -1;
  g_bar_kind = -1;
  g_ready.clear();
  g_gen++;
  g_block_serial++;
  int nwarps = (g_nthreads + 31) / 32;
  if (g_instrumented) {
    g_wstamp.assign((size_t)nwarps, 1);
    g_pairsync.assign((size_t)nwarps * 32 * 32, 0);
  } else if (g_wstamp.size() < (size_t)nwarps) {
    g_wstamp.assign((size_t)nwarps, 1);
  }
  g_warp_waiting.assign((size_t)nwarps, 0);
  g_warp_exited.assign((size_t)nwarps, 0u);
  poison_shared();
  for (int i = 0; i < g_nthreads; i++) {
    Fiber* f = g_pool[(size_t)i];
    f->linear = i;
    f->tid = uint3{(unsigned)i % g_blockDim.x, ((unsigned)i / g_blockDim.x) % g_blockDim.y,
                   (unsigned)i / (g_blockDim.x * g_blockDim.y)};
    f->lane = i % 32;
    f->warp = i / 32;
    f->state = READY;
    f->asan_fake = nullptr;
#if CUDASIM_FAST_SWITCH
    {
      // The first switch "returns" into fiber_main as if called: control words, six zeroed
      // registers, the return address, and a null return address for fiber_main (never used).
      uint64_t* top = (uint64_t*)(((uintptr_t)(f->stack_lo + f->stack_size)) & ~(uintptr_t)15);
      uint64_t* sp = top - 11;  // fiber_main's entry rsp = sp + 8 words = top - 24: 8 mod 16, as after a call
#if CUDASIM_ASAN
      __asan_unpoison_memory_region(f->stack_lo, f->stack_size);  // frames of the fiber's previous life
#endif
      sp[0] = 0x1F80u | ((uint64_t)0x037Fu << 32);  // MXCSR default | x87 control word default
      for (int r = 1; r <= 6; r++) sp[r] = 0;
      sp[7] = (uint64_t)(uintptr_t)&fiber_main;
      sp[8] = 0;
      f->sp = sp;
    }
#else
    getcontext(&f->ctx);
    f->ctx.uc_stack.ss_sp = f->stack_lo;
    f->ctx.uc_stack.ss_size = f->stack_size;
    f->ctx.uc_link = nullptr;
    makecontext(&f->ctx, fiber_main, 0);
#endif
    g_ready.push_back(i);
  }
  while (!g_ready.empty() && !g_abort) {
    int idx;
    if (g_cfg.seed) {
      size_t k = (size_t)(rng_next() % g_ready.size());
      idx = g_ready[k];
      g_ready[k] = g_ready.back();
      g_ready.pop_back();
    } else {
      idx = g_ready.front();
      g_ready.pop_front();
    }
    switch_to(g_pool[(size_t)idx]);
  }
  if (g_abort || g_nlive == 0) return;
  // Deadlock: describe who waits where.
  std::string d;
  int shown = 0;
  for (int i = 0; i < g_nthreads && shown < 12; i++) {
    Fiber* g = g_pool[(size_t)i];
    char b[512];
    if (g->state == AT_WARP) {
      std::string missing;
      for (int j = 0; j < 32; j++) {
        if (!((g->mask >> j) & 1u)) continue;
        Fiber* h = g_pool[(size_t)(g->warp * 32 + j)];
        if (h->state == AT_WARP && h->mask == g->mask) continue;
        missing += " " + std::to_string(j) + (h->state == AT_BARRIER ? "(at __syncthreads)"
                                              : h->state == AT_WARP ? "(in another warp intrinsic)" : "");
      }
      snprintf(b, sizeof b, "\n    %s waits in %s(mask 0x%08x) at %s:%d; lanes not there:%s", tid_str(i).c_str(),
               op_name(g->op), g->mask, g->file, g->line, missing.c_str());
      d += b;
      shown++;
    }
  }
  if (g_nbar) {
    char b[256];
    snprintf(b, sizeof b, "\n    %d thread(s) wait at __syncthreads (%s:%d)", g_nbar, g_bar_file, g_bar_line);
    d += b;
  }
  report("ERROR", "kernel `%s` %s: deadlock, %d live thread(s) all blocked:%s", kernel_name().c_str(),
         block_str().c_str(), g_nlive, d.c_str());
  g_abort = true;
}

}  // namespace

// ---------------------------------------------------------------- API
const uint3& cur_thread_idx() {
  static const uint3 zero{0, 0, 0};
  return g_cur ? g_cur->tid : zero;
}

void yield_point() {
  Fiber* f = g_cur;
  if (!f) return;
  f->state = READY;
  g_ready.push_back(f->linear);
  to_sched(f, false);
}

long long clock_tick() { return g_clock += 1; }

void trap(const char* file, int line) {
  if (!g_cur) { fprintf(stderr, "cudasim: __trap() on the host at %s:%d\n", file, line); abort(); }
  fail_in_fiber("kernel `%s` %s: %s called __trap() at %s:%d", kernel_name().c_str(), block_str().c_str(),
                tid_str(g_cur->linear).c_str(), file, line);
}

unsigned activemask() {
  Fiber* f = g_cur;
  if (!f) return 0;
  unsigned m = 0;
  for (int j = 0; j < warp_lanes(f->warp); j++)
    if (g_pool[(size_t)(f->warp * 32 + j)]->state != EXITED) m |= 1u << j;
  return m;
}

int lane_id() { return g_cur ? g_cur->lane : 0; }

int syncthreads_op(int kind, int pred, const char* file, int line) {
  Fiber* f = g_cur;
  if (!f) {
    fprintf(stderr, "cudasim: __syncthreads() called outside a kernel at %s:%d\n", file, line);
    abort();
  }
  if (g_nexited > 0)
    fail_in_fiber("kernel `%s` %s: %s reached __syncthreads at %s:%d, but %d thread(s) of the block already exited "
                  "(first: %s); the barrier can never be reached by all threads",
                  kernel_name().c_str(), block_str().c_str(), tid_str(f->linear).c_str(), file, line, g_nexited,
                  tid_str(g_first_exited).c_str());
  if (g_nbar == 0) {
    g_bar_file = file;
    g_bar_line = line;
    g_bar_kind = kind;
    g_bar_first = f->linear;
  } else if (line != g_bar_line || strcmp(file, g_bar_file) != 0 || kind != g_bar_kind) {
    fail_in_fiber("kernel `%s` %s: divergent __syncthreads: %s waits at %s:%d while %s waits at %s:%d",
                  kernel_name().c_str(), block_str().c_str(), tid_str(f->linear).c_str(), file, line,
                  tid_str(g_bar_first).c_str(), g_bar_file, g_bar_line);
  }
  for (int j = 0; j < warp_lanes(f->warp); j++) {
    Fiber* g = g_pool[(size_t)(f->warp * 32 + j)];
    if (g->state == AT_WARP && ((g->mask >> f->lane) & 1u))
      fail_in_fiber("kernel `%s` %s: %s reached __syncthreads at %s:%d while lane %d waits for it in %s(mask 0x%08x) "
                    "at %s:%d",
                    kernel_name().c_str(), block_str().c_str(), tid_str(f->linear).c_str(), file, line, j,
                    op_name(g->op), g->mask, g->file, g->line);
  }
  f->state = AT_BARRIER;
  f->bar_pred = pred != 0;
  f->file = file;
  f->line = line;
  if (++g_nbar == g_nlive) {
    int count = 0;
    for (int i = 0; i < g_nthreads; i++) count += g_pool[(size_t)i]->bar_pred;
    int res = kind == 0 ? count : kind == 1 ? (count == g_nlive) : kind == 2 ? (count > 0) : 0;
    g_gen++;  // new race-detection epoch
    g_nbar = 0;
    for (int i = 0; i < g_nthreads; i++) {
      Fiber* g = g_pool[(size_t)i];
      g->state = READY;
      g->bar_result = res;
      g_ready.push_back(i);
    }
  }
  to_sched(f, false);
  return f->bar_result;
}

void syncthreads(const char* file, int line) { syncthreads_op(3, 0, file, line); }

uint64_t warp_op(int op, unsigned mask, uint64_t value, int arg, int width, int* pred_out, const char* file,
                 int line) {
  Fiber* f = g_cur;
  if (!f) {
    fprintf(stderr, "cudasim: %s called outside a kernel at %s:%d\n", op_name(op), file, line);
    abort();
  }
  if (op >= W_SHFL_IDX && op <= W_SHFL_XOR && (width < 1 || width > 32 || (width & (width - 1))))
    fail_in_fiber("kernel `%s`: %s at %s:%d with width %d (must be a power of two <= 32)", kernel_name().c_str(),
                  op_name(op), file, line, width);
  if (!((mask >> f->lane) & 1u))
    fail_in_fiber("kernel `%s` %s: %s calls %s at %s:%d with mask 0x%08x that does not include its own lane",
                  kernel_name().c_str(), block_str().c_str(), tid_str(f->linear).c_str(), op_name(op), file, line,
                  mask);
  int nl = warp_lanes(f->warp);
  const unsigned exist = nl >= 32 ? 0xffffffffu : (1u << nl) - 1u;
  const unsigned bad = mask & (~exist | g_warp_exited[(size_t)f->warp]);  // lanes that cannot take part
  if (bad) {
    const int j = __builtin_ctz(bad);
    if (j >= nl)
      fail_in_fiber("kernel `%s` %s: %s calls %s at %s:%d with mask 0x%08x naming lane %d, which does not exist "
                    "(the block has %d threads)",
                    kernel_name().c_str(), block_str().c_str(), tid_str(f->linear).c_str(), op_name(op), file, line,
                    mask, j, g_nthreads);
    fail_in_fiber("kernel `%s` %s: %s calls %s at %s:%d with mask 0x%08x naming lane %d, which has exited",
                  kernel_name().c_str(), block_str().c_str(), tid_str(f->linear).c_str(), op_name(op), file, line,
                  mask, j);
  }
  f->op = op;
  f->mask = mask;
  f->val = value;
  f->arg = arg;
  f->width = width;
  f->file = file;
  f->line = line;
  f->pred = 0;
  f->state = AT_WARP;
  g_warp_waiting[(size_t)f->warp]++;
  complete_group(f);
  to_sched(f, false);
  if (pred_out) *pred_out = f->pred;
  return f->result;
}

int launch(const KernelCall& call, dim3 grid, dim3 block, size_t dyn_smem) {
  init_config();
  if (g_cur || g_in_kernel) {
    fprintf(stderr, "cudasim: kernel launch from inside a kernel (dynamic parallelism) is not supported\n");
    abort();
  }
  unsigned long long nt = (unsigned long long)block.x * block.y * block.z;
  if (nt == 0 || nt > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64 || grid.x == 0 || grid.y == 0 ||
      grid.z == 0 || grid.y > 65535 || grid.z > 65535 || dyn_smem > kMaxDynSmem) {
    g_last_err = cudaErrorInvalidConfiguration;
    fprintf(stderr, "cudasim: invalid launch configuration grid (%u,%u,%u) block (%u,%u,%u) smem %zu\n", grid.x,
            grid.y, grid.z, block.x, block.y, block.z, dyn_smem);
    return cudaErrorInvalidConfiguration;
  }
  find_shared_segment();
  if (g_stacks_dirty) {
#if CUDASIM_ASAN
    for (Fiber* f : g_pool) __asan_unpoison_memory_region(f->stack_lo, f->stack_size);
#endif
    g_stacks_dirty = false;
  }
  while (g_pool.size() < nt) g_pool.push_back(new_fiber());
  g_call = &call;
  g_gridDim = uint3{grid.x, grid.y, grid.z};
  g_blockDim = uint3{block.x, block.y, block.z};
  g_nthreads = (int)nt;
  g_dyn_smem = dyn_smem;
  g_abort = false;
  g_launch_errors = 0;
  g_launch_first_block = g_block_serial + 1;
  g_rng = g_cfg.seed * 0x2545f4914f6cdd1dull + 12345;
  size_t nblocks = (size_t)grid.x * grid.y * grid.z;
  std::vector<size_t> order;
  if (g_cfg.seed) {
    order.resize(nblocks);
    for (size_t i = 0; i < nblocks; i++) order[i] = i;
    for (size_t i = nblocks; i > 1; i--) std::swap(order[i - 1], order[(size_t)(rng_next() % i)]);
  }
  g_in_kernel = true;
  for (size_t i = 0; i < nblocks && !g_abort; i++) {
    size_t b = g_cfg.seed ? order[i] : i;
    run_block((unsigned)(b % grid.x), (unsigned)((b / grid.x) % grid.y), (unsigned)(b / ((size_t)grid.x * grid.y)));
  }
  g_in_kernel = false;
  if (g_abort) g_stacks_dirty = true;
  check_guards();
  std::string kname = kernel_name();
  g_call = nullptr;
  if (g_launch_errors == 0) return cudaSuccess;
  fprintf(stderr, "cudasim: kernel `%s`: %d error(s) detected\n", kname.c_str(), g_launch_errors);
  fflush(stderr);
  if (g_cfg.on_error == OnError::Abort) abort();
  if (g_cfg.on_error == OnError::Exit) { fflush(stdout); _exit(86); }
  g_last_err = cudaErrorLaunchFailure;
  return cudaErrorLaunchFailure;
}

int take_last_error(bool clear) {
  int e = g_last_err;
  if (clear) g_last_err = 0;
  return e;
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// --------------------------------------------------------- host memory
int range_check(const void* p, size_t n, const char* what) {
  Alloc* al = find_alloc((uintptr_t)p);
  if (!al) return 0;
  uintptr_t a = (uintptr_t)p, lo = (uintptr_t)al->user;
  if (a < lo || a + n > lo + al->size) {
    report("OUT-OF-BOUNDS", "%s of %zu bytes at offset %ld of a %zu-byte cudaMalloc buffer", what, n,
           (long)(a - lo), al->size);
    return cudaErrorInvalidValue;
  }
  return 0;
}

int memcpy_checked(void* d, const void* s, size_t n) {
  if (n == 0) return 0;
  if (range_check(d, n, "cudaMemcpy destination") || range_check(s, n, "cudaMemcpy source")) {
    g_last_err = cudaErrorInvalidValue;
    return cudaErrorInvalidValue;
  }
  memmove(d, s, n);
  return 0;
}

int memset_checked(void* d, int v, size_t n) {
  if (n == 0) return 0;
  if (range_check(d, n, "cudaMemset")) {
    g_last_err = cudaErrorInvalidValue;
    return cudaErrorInvalidValue;
  }
  memset(d, v, n);
  return 0;
}

void sticky(int err) { g_last_err = err; }

}  // namespace detail

using namespace detail;

Config& config() {
  init_config();
  return g_cfg;
}

// Buffers are 256-byte aligned like cudaMalloc.  Without ASan each buffer has
// 256-byte guard zones filled with 0xcd on both sides, verified after every
// launch and at free.  Under ASan no guard is added: ASan's own redzones around
// the malloc'd block catch the overflow at the faulting instruction.
static constexpr size_t kGuard = CUDASIM_ASAN ? 0 : 256;

void* malloc(size_t bytes) {
  init_config();
  void* raw = nullptr;
  if (posix_memalign(&raw, 256, bytes + 2 * kGuard + (bytes == 0)) != 0) return nullptr;
  char* user = static_cast<char*>(raw) + kGuard;
  memset(raw, 0xcd, kGuard);
  memset(user + bytes, 0xcd, kGuard);
  if (g_cfg.poison) memset(user, 0xff, bytes);  // device memory is not zeroed
  g_allocs[(uintptr_t)raw] = Alloc{static_cast<char*>(raw), user, bytes, kGuard, nullptr};
  return user;
}

static bool guard_ok(const Alloc& al) {
  for (size_t i = 0; i < al.guard; i++)
    if ((unsigned char)al.raw[i] != 0xcd || (unsigned char)al.user[al.size + i] != 0xcd) return false;
  return true;
}

void free(void* p) {
  if (!p) return;
  Alloc* al = find_alloc((uintptr_t)p);
  if (!al || al->user != p) {
    report("ERROR", "cudaFree(%p): not a pointer returned by cudaMalloc", p);
    return;
  }
  if (!guard_ok(*al))
    report("OUT-OF-BOUNDS", "guard zone of the %zu-byte cudaMalloc buffer %p was overwritten (detected at cudaFree)",
           al->size, p);
  std::free(al->shadow);
  char* raw = al->raw;
  g_allocs.erase((uintptr_t)raw);
  std::free(raw);
}

bool check_guards() {
  bool ok = true;
  for (auto& kv : g_allocs) {
    Alloc& al = kv.second;
    if (guard_ok(al)) continue;
    ok = false;
    size_t first = 0;
    long off = 0;
    for (first = 0; first < al.guard; first++)
      if ((unsigned char)al.raw[first] != 0xcd) { off = (long)first - (long)al.guard; break; }
    if (first == al.guard)
      for (size_t i = 0; i < al.guard; i++)
        if ((unsigned char)al.user[al.size + i] != 0xcd) { off = (long)(al.size + i); break; }
    report("OUT-OF-BOUNDS", "kernel `%s` wrote outside the %zu-byte cudaMalloc buffer %p (first damaged byte at "
           "offset %ld, in the guard zone)",
           kernel_name().c_str(), al.size, (void*)al.user, off);
    memset(al.raw, 0xcd, al.guard);  // re-arm so the damage is reported once
    memset(al.user + al.size, 0xcd, al.guard);
  }
  return ok;
}

const char* last_error_text() { return g_last_text.c_str(); }
int error_count() { return g_errors; }

}  // namespace cudasim

// ------------------------------------------------------------ __tsan hooks
// Called by code compiled with -fsanitize=thread (the kernel TU of a race
// build).  No libtsan: these are the whole "runtime".
#define CUDASIM_PC __builtin_return_address(0)
extern "C" {
void __tsan_init(void) { cudasim::detail::g_instrumented = true; }
void __tsan_func_entry(void*) {}
void __tsan_func_exit(void) {}
void __tsan_ignore_thread_begin(void) {}
void __tsan_ignore_thread_end(void) {}
#define CUDASIM_HOOK(N)                                                                                    \
  void __tsan_read##N(void* a) { cudasim::detail::on_access(a, N, false, CUDASIM_PC); }                   \
  void __tsan_write##N(void* a) { cudasim::detail::on_access(a, N, true, CUDASIM_PC); }                   \
  void __tsan_unaligned_read##N(void* a) { cudasim::detail::on_access(a, N, false, CUDASIM_PC); }         \
  void __tsan_unaligned_write##N(void* a) { cudasim::detail::on_access(a, N, true, CUDASIM_PC); }         \
  void __tsan_volatile_read##N(void* a) { cudasim::detail::on_access(a, N, false, CUDASIM_PC); }          \
  void __tsan_volatile_write##N(void* a) { cudasim::detail::on_access(a, N, true, CUDASIM_PC); }
CUDASIM_HOOK(1)
CUDASIM_HOOK(2)
CUDASIM_HOOK(4)
CUDASIM_HOOK(8)
CUDASIM_HOOK(16)
#undef CUDASIM_HOOK
void __tsan_read_range(void* a, unsigned long n) { cudasim::detail::on_access(a, n, false, CUDASIM_PC); }
void __tsan_write_range(void* a, unsigned long n) { cudasim::detail::on_access(a, n, true, CUDASIM_PC); }
void __tsan_vptr_update(void**, void*) {}
void __tsan_vptr_read(void**) {}
void __tsan_atomic_thread_fence(int) {}
void __tsan_atomic_signal_fence(int) {}
}
