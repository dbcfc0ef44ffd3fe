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
#
# Prints the folder holding the binaries (build/llama-cpp/bin). Needs cmake and a C++ compiler.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=${1:-$(python3 -c "import llama_cpp; print(llama_cpp.__version__)" 2>/dev/null || echo 0.3.36)}
work="$root/build/llama-cpp"
src="$work/llama_cpp_python-$version/vendor/llama.cpp"
mkdir -p "$work"
if [ ! -f "$src/tools/llama-bench/llama-bench.cpp" ]; then
  python3 -m pip download "llama-cpp-python==$version" --no-binary :all: --no-deps -d "$work" >&2
  tar xzf "$work/llama_cpp_python-$version.tar.gz" -C "$work"
fi
# no curl and no tests; the tools folder holds llama-bench, llama-server and llama-quantize
cmake -S "$src" -B "$work/cmake" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DGGML_NATIVE=ON \
  -DBUILD_SHARED_LIBS=OFF >&2
cmake --build "$work/cmake" --target llama-bench llama-server llama-quantize -j "$(nproc)" >&2
mkdir -p "$work/bin"
for tool in llama-bench llama-server llama-quantize; do cp "$work/cmake/bin/$tool" "$work/bin/$tool"; done
echo "$work/bin"
