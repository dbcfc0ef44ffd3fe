#!/usr/bin/env bash
# build_llama_cpp.sh — builds llama.cpp's own tools (llama-bench, llama-server, llama-quantize) for
# the benchmarks that compare against it.
#
# Neither tool is on PyPI or in Debian; llama-cpp-python's source distribution on PyPI carries
# llama.cpp's whole tree (vendor/llama.cpp), so the tools are built from the same llama.cpp version
# the oracle tests run through llama-cpp-python. Every llama.cpp default is kept: GGML_NATIVE (code
# for this CPU, as pip builds llama-cpp-python), its repacked CPU kernels and, where the CPU has
# them, its AMX kernels. Not a test and not part of CI: minutes of compiling on 2 cores.
#
#   bench/build_llama_cpp.sh [VERSION]     (default: the installed llama-cpp-python's version)
#   bench/build_llama_cpp.sh --target aarch64-linux [VERSION]
#                                          the same tools for 64-bit ARM Linux with Debian's
#                                          g++-aarch64-linux-gnu, into build/llama-cpp-aarch64
#                                          (bench/bench_arm.sh runs them under qemu-user)
#
# A cross build has no "native": GGML_NATIVE would compile for the build machine, so the ARM build
# names its level instead, GGML_CPU_ARM_ARCH=armv8.6-a+i8mm (LLAMA_ARM_ARCH overrides it): sdot
# and smmla, which llama.cpp's repacked Q4_0/Q8_0/IQ4_NL kernels and its K-quant dot products
# use; ingot's --isa all build runs its i8mm level on the same emulated CPU.
#
# Prints the folder holding the binaries (build/llama-cpp/bin). Needs cmake and a C++ compiler.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
target=host
if [ "${1:-}" = --target ]; then target=${2:?--target needs a value}; shift 2; fi
version=${1:-$(python3 -c "import llama_cpp; print(llama_cpp.__version__)" 2>/dev/null || echo 0.3.36)}
work="$root/build/llama-cpp"
src="$work/llama_cpp_python-$version/vendor/llama.cpp"
mkdir -p "$work"
if [ ! -f "$src/tools/llama-bench/llama-bench.cpp" ]; then
  python3 -m pip download "llama-cpp-python==$version" --no-binary :all: --no-deps -d "$work" >&2
  tar xzf "$work/llama_cpp_python-$version.tar.gz" -C "$work"
fi
out="$work"
flags=(-DGGML_NATIVE=ON)
case "$target" in
  host) ;;
  aarch64-linux)
    command -v aarch64-linux-gnu-g++ > /dev/null ||
      { echo "build_llama_cpp.sh: no aarch64-linux-gnu-g++ (apt-get install g++-aarch64-linux-gnu)" >&2; exit 1; }
    out="$root/build/llama-cpp-aarch64"
    flags=(-DGGML_NATIVE=OFF "-DGGML_CPU_ARM_ARCH=${LLAMA_ARM_ARCH:-armv8.6-a+i8mm}" -DCMAKE_SYSTEM_NAME=Linux
           -DCMAKE_SYSTEM_PROCESSOR=aarch64 -DCMAKE_C_COMPILER=aarch64-linux-gnu-gcc
           -DCMAKE_CXX_COMPILER=aarch64-linux-gnu-g++);;
  *) echo "build_llama_cpp.sh: unknown --target '$target' (host or aarch64-linux)" >&2; exit 2;;
esac
# no curl and no tests; the tools folder holds llama-bench, llama-server and llama-quantize
cmake -S "$src" -B "$out/cmake" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON "${flags[@]}" \
  -DBUILD_SHARED_LIBS=OFF >&2
tools=(llama-bench llama-server llama-quantize)
[ "$target" = host ] || tools=(llama-bench)
cmake --build "$out/cmake" --target "${tools[@]}" -j "$(nproc)" >&2
mkdir -p "$out/bin"
for tool in "${tools[@]}"; do cp "$out/cmake/bin/$tool" "$out/bin/$tool"; done
echo "$out/bin"
