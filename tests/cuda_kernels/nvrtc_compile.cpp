// nvrtc_compile.cpp — compiles one kernel header with NVRTC (runtime compilation, as a generated model may do at load) to PTX, instantiating the named kernels.
//
//   nvrtc_compile ARCH INCLUDE_DIR HEADER [NAME_EXPR | -DMACRO=VALUE ...]
// ARCH: compute_80, compute_90, ...; the source is `#include "HEADER"`, and every NAME_EXPR
// (e.g. "&rmsnorm_kernel<576>") is instantiated through nvrtcAddNameExpression; -D arguments
// define macros (IG_KV_Q8=1: the q8_0 KV pool). Only INCLUDE_DIR
// is on the include path: a header that pulls in anything else fails. Prints the lowered
// (mangled) names and the PTX size; exit status 0 on success, 1 on a compile error (log printed).
#include <nvrtc.h>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#define NVRTC_CHECK(x)                                                                      \
  do {                                                                                      \
    nvrtcResult r_ = (x);                                                                   \
    if (r_ != NVRTC_SUCCESS) {                                                              \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, nvrtcGetErrorString(r_)); \
      return 2;                                                                             \
    }                                                                                       \
  } while (0)

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s ARCH INCLUDE_DIR HEADER [NAME_EXPR | -DMACRO=VALUE ...]\n", argv[0]);
    return 2;
  }
  const std::string arch = std::string("--gpu-architecture=") + argv[1];
  const std::string inc = std::string("--include-path=") + argv[2];
  const std::string src = std::string("#include \"") + argv[3] + "\"\n";
  nvrtcProgram prog;
  NVRTC_CHECK(nvrtcCreateProgram(&prog, src.c_str(), "ig_nvrtc_main.cu", 0, nullptr, nullptr));
  // -D arguments are macro definitions (a generated model's IG_KV_Q8, ...), the others kernel names
  std::vector<const char*> opts = {arch.c_str(), inc.c_str(), "-std=c++17", "--device-as-default-execution-space"};
  std::vector<const char*> names;
  for (int i = 4; i < argc; i++) (std::strncmp(argv[i], "-D", 2) == 0 ? opts : names).push_back(argv[i]);
  for (const char* n : names) NVRTC_CHECK(nvrtcAddNameExpression(prog, n));
  const nvrtcResult rc = nvrtcCompileProgram(prog, (int)opts.size(), opts.data());
  size_t log_n = 0;
  nvrtcGetProgramLogSize(prog, &log_n);
  std::string log(log_n, '\0');
  if (log_n > 1) nvrtcGetProgramLog(prog, &log[0]);
  if (rc != NVRTC_SUCCESS) {
    std::printf("NVRTC FAILED %s %s: %s\n%s\n", argv[3], argv[1], nvrtcGetErrorString(rc), log.c_str());
    return 1;
  }
  if (log_n > 1 && log[0]) std::printf("log: %s\n", log.c_str());
  for (const char* n : names) {
    const char* lowered = nullptr;
    NVRTC_CHECK(nvrtcGetLoweredName(prog, n, &lowered));
    std::printf("kernel %s -> %s\n", n, lowered);
  }
  size_t ptx_n = 0;
  NVRTC_CHECK(nvrtcGetPTXSize(prog, &ptx_n));
  std::vector<char> ptx(ptx_n);
  NVRTC_CHECK(nvrtcGetPTX(prog, ptx.data()));
  std::printf("NVRTC OK %s %s: %zu bytes of PTX, %d kernels\n", argv[3], argv[1], ptx_n, (int)names.size());
  NVRTC_CHECK(nvrtcDestroyProgram(&prog));
  return 0;
}
