#!/usr/bin/env bash
# The libraries the runtime links, built for WebAssembly (./ingot build --target wasm32): a page
# cannot load Debian's shared libraries, so Emscripten's compiler (Debian's emscripten package)
# builds cJSON, utf8proc and PCRE2 from Debian's own sources (scripts/debian_source.sh: the
# upstream tarballs of the versions Debian 12 ships, its patches applied, checked by SHA-256) as
# static libraries under build/wasm-deps/{include,lib}, which build/flags.mk's TARGET=wasm32 reads.
# PCRE2 is its 8-bit library without the JIT (WebAssembly runs no generated machine code); only
# the quantization config's module rules use it (runtime/load/quant_rules.c). Debian's
# pcre2_10.42-1 diff adds packaging only, so the upstream tarball is the source.
#
#   scripts/wasm_deps.sh        builds what is missing (under a minute the first time, then nothing)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
prefix=$root/build/wasm-deps
[ -f "$prefix/.done-1" ] && exit 0
command -v emcc >/dev/null || { echo "wasm_deps: emcc not found: scripts/setup.sh --wasm installs Debian's emscripten" >&2; exit 1; }
# Emscripten's tools are node programs that require Debian's node-acorn (/usr/share/nodejs), which
# a node installed from elsewhere does not search
export NODE_PATH=/usr/share/nodejs${NODE_PATH:+:$NODE_PATH}
work=$prefix/src
mkdir -p "$work" "$prefix/include/cjson" "$prefix/lib"
. "$root/scripts/debian_source.sh"
pool=$debian_pool
fetch cJSON-1.7.15 $pool/c/cjson/cjson_1.7.15.orig.tar.gz 5308fd4bd90cef7aa060558514de6a1a4a0819974a26e6ed13973c5f624c24b2 \
  $pool/c/cjson/cjson_1.7.15-1+deb12u4.debian.tar.xz afd19a970966cf534ff1e9ec077d710a5e7e78eb4ec9b499c8bdc32e55da12cb
fetch utf8proc-2.8.0 $pool/u/utf8proc/utf8proc_2.8.0.orig.tar.gz a0a60a79fe6f6d54e7d411facbfcc867a6e198608f2cd992490e46f04b1bcecc \
  $pool/u/utf8proc/utf8proc_2.8.0-1.debian.tar.xz eae4af835e46ccd258d3eebb501b3610330a434ec6194a0d11c0569fe4c8480b
fetch pcre2-10.42 $pool/p/pcre2/pcre2_10.42.orig.tar.gz c33b418e3b936ee3153de2c61cc638e7e4fe3156022a5c77d0711bcbb9d64f1f

cflags=(-O2 -msimd128)
build_cjson_utf8proc emcc emar "${cflags[@]}"

# PCRE2: its own CMake build through emcmake, static, 8-bit, no JIT, no tools or tests
rm -rf "$work/pcre2-build"
emcmake cmake -S "$work/pcre2-10.42" -B "$work/pcre2-build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS="${cflags[*]}" \
  -DCMAKE_INSTALL_PREFIX="$prefix" -DBUILD_SHARED_LIBS=OFF -DPCRE2_BUILD_PCRE2_8=ON -DPCRE2_SUPPORT_JIT=OFF \
  -DPCRE2_SUPPORT_UNICODE=ON -DPCRE2_BUILD_PCRE2GREP=OFF -DPCRE2_BUILD_TESTS=OFF >/dev/null
cmake --build "$work/pcre2-build" -j"$(nproc)" >/dev/null
cmake --install "$work/pcre2-build" >/dev/null
touch "$prefix/.done-1"
