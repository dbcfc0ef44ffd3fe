#!/usr/bin/env bash
# Runs every test: the C unit tests and the oracle, end-to-end and bad-input
# tests (pytest), first optimized, then again under AddressSanitizer +
# UndefinedBehaviorSanitizer. Prints a closing "N passed, N failed" line.
#   scripts/test.sh            everything
#   scripts/test.sh --fast     optimized pass only
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

"$root/scripts/setup.sh"
"$root/scripts/fetch_smollm2.sh" >/dev/null

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

passed=0; failed=0
run_suite() { # label, env...
  local label=$1; shift
  echo "== $label"
  local log
  log=$(mktemp)
  env "$@" python3 -m pytest tests -q -p no:cacheprovider 2>&1 | tee "$log"
  local p f
  p=$(grep -Eo '[0-9]+ passed' "$log" | tail -1 | grep -Eo '[0-9]+' || echo 0)
  f=$(grep -Eo '[0-9]+ (failed|error|errors)' "$log" | awk '{s+=$1} END {print s+0}')
  if ! grep -Eq '[0-9]+ passed' "$log"; then f=$((f + 1)); fi
  passed=$((passed + p)); failed=$((failed + f))
  rm -f "$log"
}

make -s -j2 all tests || { echo "0 passed, 1 failed"; exit 1; }
run_suite "optimized" INGOT_SAN=0
if [ "${1:-}" != "--fast" ]; then
  make -s -j2 SAN=1 all tests || { echo "$passed passed, $((failed + 1)) failed"; exit 1; }
  run_suite "ASan+UBSan" INGOT_SAN=1
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
