#!/usr/bin/env bash
# Installs what ingot needs to build models and run its tests, from Debian's
# packages and PyPI only. Safe to run again: it installs only what is missing.
#   scripts/setup.sh           build dependencies and the test tools
#   scripts/setup.sh --check   also torch, transformers, accelerate and peft, the reference
#                              `ingot check` compares a models.lua entry with
#                              (what the default test tier needs: it checks
#                              every entry)
#   scripts/setup.sh --debian  the Debian packages building needs, only (scripts/test.sh
#                              installs the rest while it builds)
#   scripts/setup.sh --cross   what --target aarch64-linux needs on an x86-64 host: the cross
#                              compiler, the libraries' arm64 packages, and qemu-user registered
#                              with the kernel so that ARM binaries run here
#   scripts/setup.sh --wasm    what --target wasm32 needs: Debian's emscripten, and the libraries
#                              the runtime links built for WebAssembly (scripts/wasm_deps.sh)
#   scripts/setup.sh --oracles also the rest of the reference libraries
#                              (llama-cpp-python, sentencepiece, matplotlib)
#                              needed only to regenerate tests/fixtures, by
#                              `make test-full` and by bench/
# Python packages go into the interpreter `python3` names (activate a virtual environment
# first to keep them apart from the system's), at the exact versions of
# scripts/requirements/{test,check,oracles}.txt, with everything they pull in held to
# scripts/requirements/constraints.txt: a new upstream release changes nothing here until a
# pin is moved (scripts/requirements/README.md says how).
set -euo pipefail

# What building needs:
# libpcre2-dev: GPTQModel's per-module rules are Python regular expressions (runtime/load/quant_rules.c)
# clang, libclang-rt-14-dev: libFuzzer for the fuzz harnesses (tests/fuzz, make fuzz; the default tier replays their corpora)
# libedit-dev: line editing and history of `NAME chat` (runtime/core/chat_cli.c)
# libssl-dev: SHA-256 (libcrypto) for the front end's inputs key (tools/frontend/inputs_key.c)
APT_BUILD="gcc make clang libclang-rt-14-dev lua5.4 lua-penlight lua-cjson libcjson-dev libssl-dev libutf8proc-dev libevent-dev libpcre2-dev libedit-dev"
# What the tests use besides:
# prometheus: promtool checks /metrics; nginx-light: the gateway in front of several `serve` processes
# (tests/test_router.py, docs/deployment.md); chromium, chromium-driver: the chat page in a headless
# browser (tests/test_web_page.py)
APT_TEST="prometheus nginx-light chromium chromium-driver"
case "${1:-}" in
  "") tier=test ;;
  --check) tier=check ;;
  --oracles) tier=oracles ;;
  --debian) tier=debian ;;
  --cross) tier=cross ;;
  --wasm) tier=wasm ;;
  *) echo "usage: scripts/setup.sh [--check|--oracles|--debian|--cross|--wasm]" >&2; exit 2 ;;
esac
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo

# apt-get install of the packages named that are not installed yet; --no-remove: a package that
# would take another's place (an arm64 -dev package that cannot sit beside the host's) is an error,
# never a silent removal
apt_install_missing() {
  local missing="" p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
  done
  [ -n "$missing" ] || return 0
  echo "setup: apt-get install$missing" >&2
  $SUDO apt-get update -qq
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-remove $missing >/dev/null
}

if [ "$tier" = cross ]; then
  # the libraries a model binary links (APT_BUILD's -dev packages) in their arm64 builds, beside
  # the host's (Debian's multiarch; libevent's shared libraries alone, build/flags.mk says why);
  # qemu-user-binfmt tells the kernel to run ARM binaries with it
  APT_CROSS="gcc-aarch64-linux-gnu qemu-user qemu-user-binfmt libcjson-dev:arm64 libutf8proc-dev:arm64 libevent-2.1-7:arm64 libevent-pthreads-2.1-7:arm64 libpcre2-dev:arm64 libedit-dev:arm64"
  dpkg --print-foreign-architectures | grep -qx arm64 || $SUDO dpkg --add-architecture arm64
  # shellcheck disable=SC2086
  apt_install_missing $APT_CROSS
  # Without systemd (a container, a CI runner) nothing reads /usr/lib/binfmt.d at boot: mount the
  # kernel's binfmt_misc and register qemu-aarch64 from the package's own line.
  if ! grep -qx enabled /proc/sys/fs/binfmt_misc/qemu-aarch64 2>/dev/null; then
    [ -e /proc/sys/fs/binfmt_misc/register ] || $SUDO mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
    [ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || $SUDO sh -c 'cat /usr/lib/binfmt.d/qemu-aarch64.conf > /proc/sys/fs/binfmt_misc/register'
    grep -qx enabled /proc/sys/fs/binfmt_misc/qemu-aarch64 ||
      { echo "setup: qemu-aarch64 is not registered with the kernel (/proc/sys/fs/binfmt_misc)" >&2; exit 1; }
  fi
  exit 0
fi
if [ "$tier" = wasm ]; then
  # Debian's emscripten (3.1.6: clang 14 with its WebAssembly C library, prebuilt) and what it
  # compiles the runtime's libraries with (cmake: PCRE2's build); node runs its tools
  apt_install_missing emscripten cmake
  exec "$(dirname "$0")/wasm_deps.sh"
fi
APT_PACKAGES="$APT_BUILD"
[ "$tier" = debian ] || APT_PACKAGES="$APT_BUILD $APT_TEST"

# shellcheck disable=SC2086
apt_install_missing $APT_PACKAGES

[ "$tier" != debian ] || exit 0

# pip installs only what is missing or at another version; with every pin satisfied it
# takes a second or two and reaches no index
requirements="$(cd "$(dirname "$0")" && pwd)/requirements"
# llama-cpp-python (the oracle tier) builds from source: give its build every core
CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore \
  -r "$requirements/$tier.txt" -c "$requirements/constraints.txt"
