#!/usr/bin/env bash
# Runs every libFuzzer harness of tests/fuzz (or those named) for SECONDS each under ASan + UBSan,
# and prints one line per harness: executions, their rate, coverage (edges and features), the
# corpus size, and whether it crashed.
#
#   scripts/fuzz.sh [SECONDS] [HARNESS ...]    (`make fuzz`, FUZZ_SECONDS=60; `gbnf`, `jinja`, ...)
#   scripts/fuzz.sh --regress                  every committed seed and crash input and every
#                                              fixture once, no new inputs (what the default
#                                              tier runs; the columns count those runs)
#   FUZZ_RUNS=10000000 scripts/fuzz.sh 3600    a campaign: each harness until ten million
#                                              executions or an hour, whichever comes first
#   FUZZ_TIMEOUT=30 scripts/fuzz.sh ...        an input slower than this many seconds (10) is a
#                                              finding; more where the machine is shared
#   scripts/fuzz.sh --msan [--regress | SECONDS] [HARNESS ...]
#                                              the same under MemorySanitizer instead (reads of
#                                              memory never written), against cJSON, utf8proc and
#                                              libevent built instrumented (scripts/msan_deps.sh)
#
# A harness's corpus: its committed seeds (tests/fuzz/corpus/NAME), the test fixtures listed below
# (real GGUFs, tokenizer.json files, chat templates), and build/fuzz/corpus/NAME, which keeps what
# earlier runs found and grows with this one. A crash stops that harness, leaves its input in
# build/fuzz/crashes/ and fails the run: fix the bug, then commit the input to tests/fuzz/corpus/NAME
# so the regression run replays it from then on.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

regress=0
seconds=60
san=fuzz
if [ "${1:-}" = --msan ]; then san=msan; shift; fi
if [ "${1:-}" = --regress ]; then regress=1; shift
elif [[ "${1:-}" =~ ^[0-9]+$ ]]; then seconds=$1; shift; fi

if [ $san = msan ]; then
  "$root/scripts/msan_deps.sh" || exit 1
  export MSAN_OPTIONS=halt_on_error=1:abort_on_error=1:print_stacktrace=1
fi
make -s -j"$(nproc)" SAN=$san fuzzers || exit 1
bin=build/_obj-$san/fuzz
tag=$([ $san = msan ] && echo msan- || true)
harnesses=("$@")
if [ ${#harnesses[@]} -eq 0 ]; then
  for f in tests/fuzz/fuzz_*.c; do harnesses+=("$(basename "$f" .c | sed 's/^fuzz_//')"); done
fi

# fixtures that seed a harness: the file itself is an input of that kind
seeds_of() {
  case $1 in
    gguf) echo tests/fixtures/tokenizers/spm/spm.gguf tests/fixtures/gguf_families/qwen3/model.f32.gguf ;;
    tokenizer_json) echo tests/fixtures/tokenizers/trained-*/tokenizer.json tests/fixtures/tokenizers/spm/hf-*/tokenizer.json ;;
    jinja) echo tests/fixtures/chat_templates/*.jinja ;;
  esac
}
# inputs as large as the largest seed (a GGUF with its tensors); libFuzzer's default is 4 KiB
max_len_of() { case $1 in gguf|tokenizer_json|safetensors) echo 262144 ;; *) echo 65536 ;; esac; }

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
failed=0
printf '%-16s %12s %10s %8s %8s %8s  %s\n' harness executions exec/s edges features corpus result
for h in "${harnesses[@]}"; do
  exe=$bin/fuzz_$h
  [ -x "$exe" ] || { echo "fuzz: no harness '$h' (tests/fuzz/fuzz_$h.c)" >&2; failed=1; continue; }
  found=build/fuzz/corpus/$h seeds=build/fuzz/seeds/$h crashes=build/fuzz/crashes
  mkdir -p "$found" "$seeds" "$crashes"
  rm -f "$seeds"/*
  for f in $(seeds_of "$h"); do cp "$f" "$seeds/$(echo "$f" | tr / _)"; done
  dirs=("$found" "$seeds")
  [ -d tests/fuzz/corpus/$h ] && dirs+=("tests/fuzz/corpus/$h")
  log=build/fuzz/$tag$h.log
  : >"$log"
  rc=0
  if [ $regress = 1 ]; then
    # every committed and fixture input once (a crash fixed stays fixed), not the found ones
    "$exe" -runs=0 -max_len="$(max_len_of "$h")" -print_final_stats=1 "${dirs[@]:1}" >"$log" 2>&1 || rc=$?
  else
    "$exe" -max_total_time="$seconds" -runs="${FUZZ_RUNS:--1}" -timeout="${FUZZ_TIMEOUT:-10}" -rss_limit_mb=2048 -max_len="$(max_len_of "$h")" \
      -artifact_prefix="$crashes/$tag$h-" -print_final_stats=1 "${dirs[@]}" >>"$log" 2>&1 || rc=$?
  fi
  stats=$(grep -E '^#[0-9]+' "$log" | tail -1)
  execs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | tail -1 | grep -Eo '[0-9]+$' || echo 0)
  rate=$(grep -Eo 'stat::average_exec_per_sec: *[0-9]+' "$log" | tail -1 | grep -Eo '[0-9]+$' || echo 0)
  edges=$(echo "$stats" | grep -Eo 'cov: [0-9]+' | grep -Eo '[0-9]+' || echo 0)
  ft=$(echo "$stats" | grep -Eo 'ft: [0-9]+' | grep -Eo '[0-9]+' || echo 0)
  corp=$(echo "$stats" | grep -Eo 'corp: [0-9]+' | grep -Eo '[0-9]+' || echo 0)
  result=ok
  if [ $rc != 0 ]; then result="CRASH (exit $rc): $log"; failed=1; tail -40 "$log" >&2; fi
  printf '%-16s %12s %10s %8s %8s %8s  %s\n' "$h" "${execs:-0}" "${rate:-0}" "${edges:-0}" "${ft:-0}" "${corp:-0}" "$result"
done
exit $failed
