#!/usr/bin/env bash
# build_llama_server.sh — builds llama.cpp's llama-server for bench/bench_serve.py --llama-server.
#
# llama-server is not on PyPI or in Debian; llama-cpp-python's source distribution on PyPI carries
# llama.cpp's whole tree (vendor/llama.cpp, tools/server included), so the server is built from
# the same llama.cpp version the other benchmarks run through llama-cpp-python. Not a test and
# not part of CI: minutes of compiling on 2 cores.
#
#   bench/build_llama_server.sh [VERSION]     (default: the installed llama-cpp-python's version)
#
# Prints the binary's path (build/llama-server/bin/llama-server). Needs cmake and a C++ compiler.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=${1:-$(python3 -c "import llama_cpp; print(llama_cpp.__version__)" 2>/dev/null || echo 0.3.36)}
work="$root/build/llama-server"
src="$work/llama_cpp_python-$version/vendor/llama.cpp"
mkdir -p "$work"
if [ ! -f "$src/tools/server/server.cpp" ]; then
  python3 -m pip download "llama-cpp-python==$version" --no-binary :all: --no-deps -d "$work" >&2
  tar xzf "$work/llama_cpp_python-$version.tar.gz" -C "$work"
fi
# native code for this CPU (as pip builds llama-cpp-python); no curl, tests or examples
cmake -S "$src" -B "$work/cmake" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF >&2
cmake --build "$work/cmake" --target llama-server -j "$(nproc)" >&2
mkdir -p "$work/bin"
cp "$work/cmake/bin/llama-server" "$work/bin/llama-server"
echo "$work/bin/llama-server"
