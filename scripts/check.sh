#!/usr/bin/env bash
# `make check`: the edit-compile-test loop, in well under a minute once built.
#   1. builds the runtime, tools, the front end (tools/frontend) and C test programs (incrementally);
#   2. runs every C test program (tests/c/test_*.c: kernels, scheduler, grammar, intake, ...);
#   3. runs the generator alone (--dry-run: the graph, fusion and plan passes, no C written or
#      compiled) on every checkpoint of tests/fixtures/{tiny,families}, which between them hold
#      every architecture of every models.lua entry; an entry no fixture covers is an error.
# What it does not do: compile a model or compare logits with a reference (make test).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
jobs=$(nproc)
start=$(date +%s)
failed=0

make -s -j"$jobs" all tests || exit 1
make -s -f tools/frontend/frontend.mk || exit 1
# the fixture weights the tree does not track (torch remakes them from their seeds, once)
python3 tests/fixtures/regenerate.py || exit 1

for t in build/_obj/tests/test_*; do
  if out=$("$t" 2>&1); then
    echo "ok    ${t#build/_obj/}"
  else
    echo "FAIL  ${t#build/_obj/}"; echo "$out" | tail -20; failed=$((failed + 1))
  fi
done

# every Hugging Face architecture models.lua names must have a fixture to dry-run
lua_arches='for _, e in pairs(dofile("models.lua")) do for _, a in ipairs(e.hf or {}) do print(a) end end'
fixtures=$(ls -d tests/fixtures/tiny/*/ tests/fixtures/families/*/)
have=$(for d in $fixtures; do tr -d ' \n' <"$d/config.json" | sed -n 's/.*"architectures":\["\([A-Za-z0-9]*\)".*/\1\n/p'; done | sort -u)
for a in $(lua5.4 -e "$lua_arches" | sort -u); do
  grep -qx "$a" <<<"$have" || { echo "FAIL  no fixture in tests/fixtures/{tiny,families} is a $a"; failed=$((failed + 1)); }
done

dry_run() { # fixture folder: inspect, then the generator with --dry-run
  local d=${1%/} tmp
  tmp=$(mktemp -d)
  if build/_obj/tools/ingot-inspect "$d" >"$tmp/inspect.json" 2>"$tmp/err" &&
     lua5.4 generator/main.lua --inspect "$tmp/inspect.json" --source "$d" --hf-config "$d/config.json" --name check \
       --out "$tmp/out" --dry-run >/dev/null 2>>"$tmp/err"; then
    echo "ok    generator --dry-run ${d#tests/fixtures/}"
  else
    echo "FAIL  generator --dry-run ${d#tests/fixtures/}"; tail -5 "$tmp/err"
  fi
  rm -rf "$tmp"
}
export -f dry_run
out=$(printf '%s\n' $fixtures | xargs -P "$jobs" -I{} bash -c 'dry_run {}')
echo "$out" | sort
failed=$((failed + $(grep -c '^FAIL' <<<"$out")))

echo "make check: $failed failed, $(( $(date +%s) - start )) s"
[ "$failed" -eq 0 ]
