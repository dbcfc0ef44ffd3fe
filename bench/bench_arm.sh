#!/usr/bin/env bash
# bench_arm.sh — instructions per decoded token on 64-bit ARM, for ingot and for llama.cpp, on the
# same GGUF files, counted under qemu-user by QEMU's own instruction-counting plugin.
#
# An x86-64 machine cannot time ARM code: qemu translates every instruction, so its wall time says
# nothing of a real core's. What it can count exactly is how many AArch64 instructions each engine
# executes per token. That is not speed (an sdot and a load take different times, and memory
# bandwidth bounds decode on real hardware), but at the same level and on the same file it
# compares the work the two engines' kernels do. bench/bench_arm_native.sh measures wall time on a
# real ARM machine.
#
#   bench/bench_arm.sh [GGUF ...]     (default: SmolLM2 Q4_1 and the 1.1B llama's Q4_0 and Q4_K_M)
#
# Both engines run one thread (thread pools that spin would add instructions that are not work),
# on QEMU_CPU=max (sdot and smmla): ingot's --isa all build runs its i8mm level there, llama.cpp is
# built for armv8.6-a+i8mm (bench/build_llama_cpp.sh --target aarch64-linux: GGML_NATIVE cannot
# apply to a cross build). Per token: the count of a run of N2 tokens minus that of N1 tokens,
# over N2 - N1 (load, prefill and exit cancel): ingot `generate --ignore-eos` after a 5-token
# prompt, llama.cpp `llama-bench -p 0 -n N -r 1 --no-warmup` (its text-generation test).
#
# Needs: scripts/setup.sh --cross; QEMU's plugins are built here from Debian's qemu source package
# (deb-src is enabled for it if apt has none) with libglib2.0-dev; llama.cpp's aarch64 build.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
N1=${N1:-4}
N2=${N2:-12}
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo

scripts/setup.sh --cross
need=""
for p in bc libglib2.0-dev dpkg-dev libgomp1:arm64 libstdc++6:arm64 g++-aarch64-linux-gnu; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need="$need $p"
done
[ -z "$need" ] || { $SUDO apt-get update -qq; DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $need >/dev/null; }

# QEMU's tests/plugin/insn.c, from the source of the qemu-user installed (its plugin interface)
plugins="$root/build/qemu-plugins"
if [ ! -f "$plugins/libinsn.so" ]; then
  mkdir -p "$plugins" && cd "$plugins"
  if ! apt-get source --download-only qemu >/dev/null 2>&1; then
    for f in /etc/apt/sources.list.d/debian.sources; do
      [ -f "$f" ] && sed 's/^Types: deb$/Types: deb-src/' "$f" | $SUDO tee /etc/apt/sources.list.d/ingot-deb-src.sources >/dev/null
    done
    $SUDO apt-get update -qq
    apt-get source --download-only qemu >/dev/null
  fi
  tar xJf qemu_*.orig.tar.xz --wildcards '*/include/qemu/qemu-plugin.h' '*/tests/plugin/insn.c'
  src=$(ls -d qemu-*/ | head -1)
  # shellcheck disable=SC2046
  gcc -shared -fPIC -O2 -I "$src/include/qemu" $(pkg-config --cflags glib-2.0) "$src/tests/plugin/insn.c" \
    -o libinsn.so $(pkg-config --libs glib-2.0)
  cd "$root"
fi
llama_bin=$(bench/build_llama_cpp.sh --target aarch64-linux)

# count LOG COMMAND...: the AArch64 instructions COMMAND executes on QEMU_CPU=max
count() {
  local log=$1; shift
  rm -f "$log"
  QEMU_CPU=max QEMU_PLUGIN="$plugins/libinsn.so,inline=on" QEMU_LOG=plugin QEMU_LOG_FILENAME="$log" "$@" >/dev/null 2>&1 ||
    { echo "bench_arm.sh: failed: $*" >&2; exit 1; }
  sed -n 's/^insns: \([0-9]*\)$/\1/p' "$log"
}

models=("$@")
[ ${#models[@]} -gt 0 ] || models=("$(scripts/fetch_smollm2.sh)" models/synthetic/tinyllama-1.1b-random.Q4_0.gguf
                                   models/synthetic/tinyllama-1.1b-random.Q4_K_M.gguf)
tmp=$(mktemp -d)
echo "host: $(lscpu | sed -n 's/^Model name: *//p'), qemu $(qemu-aarch64 --version | head -1 | awk '{print $3}'), -cpu max"
llama_ver=$(cd build/llama-cpp && ls -d llama_cpp_python-*/ | head -1 | sed 's/^llama_cpp_python-//; s/\/$//')
echo "llama.cpp: $("$llama_bin/llama-bench" --version 2>&1 | head -1 || true) (llama-cpp-python $llama_ver, armv8.6-a+i8mm)"
echo "decode instructions per token, tokens $N1 -> $N2, 1 thread"
echo
printf '| %-36s | %10s | %10s | %10s | %10s | %10s | %7s | %7s |\n' model "ingot" "ingot q8" "dotprod" "armv8" "llama.cpp" "ratio" "q8"
printf '|%s|%s|%s|%s|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..38})" "------------" "------------" "------------" \
  "------------" "------------" "---------" "---------"
# per_token LOG_PREFIX COMMAND...: instructions per decoded token of an ingot binary
per_token() {
  local a b
  a=$(count "$tmp/i1" "$@" --threads 1 generate -p "The capital of France is" -n "$N1" --temp 0 --ignore-eos)
  b=$(count "$tmp/i2" "$@" --threads 1 generate -p "The capital of France is" -n "$N2" --temp 0 --ignore-eos)
  echo $(( (b - a) / (N2 - N1) ))
}
mega() { echo "$1 / 1000000" | bc -l; }
for m in "${models[@]}"; do
  [ -f "$m" ] || { echo "bench_arm.sh: no file $m" >&2; exit 1; }
  name=$(basename "$m" .gguf | tr 'A-Z' 'a-z' | tr -c 'a-z0-9_.\n-' '-')
  bin=$(./ingot build "$m" --name "bench-arm-$name" --target aarch64-linux | tail -1)
  bin8=$(./ingot build "$m" --name "bench-arm-$name-a8" --target aarch64-linux --act-quant q8 | tail -1)
  i8mm=$(per_token "$bin.i8mm"); dotprod=$(per_token "$bin.dotprod"); armv8=$(per_token "$bin.armv8")
  a8=$(per_token "$bin8.i8mm")
  a=$(count "$tmp/l1" "$llama_bin/llama-bench" -m "$m" -t 1 -p 0 -n "$N1" -r 1 --no-warmup)
  b=$(count "$tmp/l2" "$llama_bin/llama-bench" -m "$m" -t 1 -p 0 -n "$N2" -r 1 --no-warmup)
  llama=$(( (b - a) / (N2 - N1) ))
  printf '| %-36s | %9.1fM | %9.1fM | %9.1fM | %9.1fM | %9.1fM | %6.2fx | %6.2fx |\n' "$(basename "$m")" \
    "$(mega "$i8mm")" "$(mega "$a8")" "$(mega "$dotprod")" "$(mega "$armv8")" "$(mega "$llama")" \
    "$(echo "$i8mm / $llama" | bc -l)" "$(echo "$a8 / $llama" | bc -l)"
done
rm -rf "$tmp"
echo
echo "ingot: the default build (--act-quant auto: 15-bit activations for Q4_0/Q4_1/Q8_0, int8 per 256 for"
echo "K-quant matmuls) at its i8mm level; ingot q8: --act-quant q8 (int8 activations everywhere, llama.cpp's"
echo "numerics); dotprod, armv8: the default build's lower levels on the same CPU. ratio: ingot over llama.cpp,"
echo "q8: ingot q8 over llama.cpp (below 1: fewer instructions per token)"
