#!/usr/bin/env bash
# MemorySanitizer needs every byte a program reads to have been written by instrumented code: a
# library built without it (Debian's cJSON, utf8proc, libevent) writes memory MSan then reports as
# uninitialized when the caller reads it. This builds the libraries the fuzz harnesses reach from
# Debian's own sources (the upstream tarballs of the versions Debian 12 ships, fetched from its
# archive and checked by SHA-256) with clang -fsanitize=memory, as static libraries under
# build/msan-deps/{include,lib}, which `make SAN=msan` puts before the system's.
#
#   scripts/msan_deps.sh        builds what is missing (a few minutes the first time, then nothing)
#
# PCRE2 (only the quantization config's module rules use it, and no harness reaches them) and
# libedit (the chat CLI's) stay Debian's: linked, never called under MSan.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
prefix=$root/build/msan-deps
[ -f "$prefix/.done-2" ] && exit 0
work=$prefix/src
mkdir -p "$work" "$prefix/include/cjson" "$prefix/lib"
msan=(-fsanitize=memory -fsanitize-memory-track-origins -fno-omit-frame-pointer -g -O1 -fPIC)

# fetch NAME URL SHA256: the tarball, checked, unpacked into $work
fetch() {
  local file
  file=$work/$(basename "$2")
  if [ ! -f "$file" ]; then curl -fsSL --retry 3 -o "$file.part" "$2" && mv "$file.part" "$file"; fi
  echo "$3  $file" | sha256sum -c --quiet - || { rm -f "$file"; echo "msan_deps: $1: checksum mismatch" >&2; exit 1; }
  tar xzf "$file" -C "$work"
}

pool=http://deb.debian.org/debian/pool/main
fetch cJSON $pool/c/cjson/cjson_1.7.15.orig.tar.gz 5308fd4bd90cef7aa060558514de6a1a4a0819974a26e6ed13973c5f624c24b2
fetch utf8proc $pool/u/utf8proc/utf8proc_2.8.0.orig.tar.gz a0a60a79fe6f6d54e7d411facbfcc867a6e198608f2cd992490e46f04b1bcecc
fetch libevent $pool/libe/libevent/libevent_2.1.12-stable.orig.tar.gz \
  92e6de1be9ec176428fd2367677e61ceffc2ee1cb119035037a27d346b0403bb

# cJSON and utf8proc: one source file each
clang "${msan[@]}" -c "$work/cJSON-1.7.15/cJSON.c" -o "$work/cJSON.o"
ar rcs "$prefix/lib/libcjson.a" "$work/cJSON.o"
cp "$work/cJSON-1.7.15/cJSON.h" "$prefix/include/cjson/"
clang "${msan[@]}" -DUTF8PROC_STATIC -c "$work/utf8proc-2.8.0/utf8proc.c" -o "$work/utf8proc.o"
ar rcs "$prefix/lib/libutf8proc.a" "$work/utf8proc.o"
cp "$work/utf8proc-2.8.0/utf8proc.h" "$prefix/include/"

# libevent: its own CMake build, static, without OpenSSL, tests or samples
cmake -S "$work/libevent-2.1.12-stable" -B "$work/libevent-build" -DCMAKE_C_COMPILER=clang \
  -DCMAKE_C_FLAGS="${msan[*]}" -DCMAKE_INSTALL_PREFIX="$prefix" -DEVENT__LIBRARY_TYPE=STATIC \
  -DEVENT__DISABLE_OPENSSL=ON -DEVENT__DISABLE_TESTS=ON \
  -DEVENT__DISABLE_BENCHMARK=ON -DEVENT__DISABLE_SAMPLES=ON -DEVENT__DISABLE_REGRESS=ON >/dev/null
cmake --build "$work/libevent-build" -j"$(nproc)" >/dev/null
cmake --install "$work/libevent-build" >/dev/null
touch "$prefix/.done-2"
