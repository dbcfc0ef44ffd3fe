#!/usr/bin/env bash
# MemorySanitizer needs every byte a program reads to have been written by instrumented code: a
# library built without it (Debian's cJSON, utf8proc, libevent) writes memory MSan then reports as
# uninitialized when the caller reads it. This builds the libraries the fuzz harnesses reach from
# Debian's own sources (the upstream tarballs of the versions Debian 12 ships and Debian's patches,
# fetched from its archive and checked by SHA-256) with clang -fsanitize=memory, as static
# libraries under build/msan-deps/{include,lib}, which `make SAN=msan` puts before the system's.
# Debian's patches (its security fixes among them) are applied, so what is tested is what Debian
# ships: upstream cJSON 1.7.15 without them over-reads an object that ends after a comma, which
# MSan finds in seconds and Debian fixed.
#
#   scripts/msan_deps.sh        builds what is missing (a minute or two the first time, then nothing)
#
# PCRE2 (only the quantization config's module rules use it, and no harness reaches them) and
# libedit (the chat CLI's) stay Debian's: linked, never called under MSan.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
prefix=$root/build/msan-deps
[ -f "$prefix/.done-3" ] && exit 0
work=$prefix/src
mkdir -p "$work" "$prefix/include/cjson" "$prefix/lib"
msan=(-fsanitize=memory -fsanitize-memory-track-origins -fno-omit-frame-pointer -g -O1 -fPIC)

. "$root/scripts/debian_source.sh"

pool=$debian_pool
security=$debian_security
fetch cJSON-1.7.15 $pool/c/cjson/cjson_1.7.15.orig.tar.gz 5308fd4bd90cef7aa060558514de6a1a4a0819974a26e6ed13973c5f624c24b2 \
  $pool/c/cjson/cjson_1.7.15-1+deb12u4.debian.tar.xz afd19a970966cf534ff1e9ec077d710a5e7e78eb4ec9b499c8bdc32e55da12cb
fetch utf8proc-2.8.0 $pool/u/utf8proc/utf8proc_2.8.0.orig.tar.gz a0a60a79fe6f6d54e7d411facbfcc867a6e198608f2cd992490e46f04b1bcecc \
  $pool/u/utf8proc/utf8proc_2.8.0-1.debian.tar.xz eae4af835e46ccd258d3eebb501b3610330a434ec6194a0d11c0569fe4c8480b
fetch libevent-2.1.12-stable $pool/libe/libevent/libevent_2.1.12-stable.orig.tar.gz \
  92e6de1be9ec176428fd2367677e61ceffc2ee1cb119035037a27d346b0403bb \
  $security/libe/libevent/libevent_2.1.12-stable-8+deb12u1.debian.tar.xz \
  0c721f8a55e6a9e225f62f151f477675ed901400b56003bb424ef2eea74f370d

build_cjson_utf8proc clang ar "${msan[@]}"

# libevent: its own CMake build, static, without OpenSSL, tests or samples
rm -rf "$work/libevent-build"
cmake -S "$work/libevent-2.1.12-stable" -B "$work/libevent-build" -DCMAKE_C_COMPILER=clang \
  -DCMAKE_C_FLAGS="${msan[*]}" -DCMAKE_INSTALL_PREFIX="$prefix" -DEVENT__LIBRARY_TYPE=STATIC \
  -DEVENT__DISABLE_OPENSSL=ON -DEVENT__DISABLE_TESTS=ON -DEVENT__DISABLE_BENCHMARK=ON \
  -DEVENT__DISABLE_SAMPLES=ON -DEVENT__DISABLE_REGRESS=ON >/dev/null
cmake --build "$work/libevent-build" -j"$(nproc)" >/dev/null
cmake --install "$work/libevent-build" >/dev/null
touch "$prefix/.done-3"
