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
#   bench/build_llama_cpp.sh --target wasm32 [VERSION]
#                                          libllama for WebAssembly with SIMD128 (Debian's
#                                          emscripten) and bench/llama_wasm_bench.c on it, into
#                                          build/llama-cpp-wasm32 (bench/bench_wasm.py runs it)
#
# A cross build has no "native": GGML_NATIVE would compile for the build machine, so the ARM build
# names its level instead, GGML_CPU_ARM_ARCH=armv8.6-a+i8mm (LLAMA_ARM_ARCH overrides it): sdot
# and smmla, which llama.cpp's repacked Q4_0/Q8_0/IQ4_NL kernels and its K-quant dot products
# use; ingot's --isa all build runs its i8mm level on the same emulated CPU.
#
# llama.cpp's CMake builds no tool for Emscripten, so the WebAssembly build is its library and a
# driver that times it as llama-bench does (bench/llama_wasm_bench.c). Two defaults are changed, each
# because it fails here: LLAMA_WASM_MEM64 (64-bit memory: Debian's clang 14 crashes compiling ggml.c
# for it, "Cannot select ... extract_vector_elt") goes off, and Emscripten 3.1.6 names its platform
# x86, which llama.cpp takes for no architecture it knows (its generic C, no SIMD128), so the
# platform is named wasm32 (EMSCRIPTEN_SYSTEM_PROCESSOR), which selects ggml's wasm kernels.
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
  wasm32)
    command -v emcmake > /dev/null || { echo "build_llama_cpp.sh: no emcmake (scripts/setup.sh --wasm)" >&2; exit 1; }
    export NODE_PATH=/usr/share/nodejs${NODE_PATH:+:$NODE_PATH} # Emscripten's tools need Debian's node-acorn
    out="$root/build/llama-cpp-wasm32"
    emcmake cmake -S "$src" -B "$out/cmake" -DCMAKE_BUILD_TYPE=Release -DEMSCRIPTEN_SYSTEM_PROCESSOR=wasm32 \
      -DLLAMA_WASM_MEM64=OFF -DGGML_NATIVE=OFF -DGGML_OPENMP=OFF -DGGML_CCACHE=OFF -DLLAMA_CURL=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF \
      -DBUILD_SHARED_LIBS=OFF -DCMAKE_C_FLAGS=-msimd128 -DCMAKE_CXX_FLAGS=-msimd128 >&2
    cmake --build "$out/cmake" --target llama -j "$(nproc)" >&2
    mkdir -p "$out/bin"
    em++ -O3 -msimd128 -x c "$root/bench/llama_wasm_bench.c" -x none -I"$src/include" -I"$src/ggml/include" \
      "$out/cmake/src/libllama.a" "$out/cmake/ggml/src/libggml.a" "$out/cmake/ggml/src/libggml-cpu.a" \
      "$out/cmake/ggml/src/libggml-base.a" -o "$out/bin/llama_wasm_bench.js" -sALLOW_MEMORY_GROWTH=1 \
      -sMAXIMUM_MEMORY=4GB -sNODERAWFS=1 -sTOTAL_STACK=8MB >&2
    echo "$out/bin"
    exit 0;;
  *) echo "build_llama_cpp.sh: unknown --target '$target' (host, aarch64-linux or wasm32)" >&2; exit 2;;
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
