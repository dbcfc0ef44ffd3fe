"""`ingot check ENTRY`: a description checked against transformers on random tiny models.

Every entry of models.lua runs here (the list is read from models.lua, so a new entry is checked
without editing this file), in two `ingot check` runs of half the entries each: one random model per Hugging Face architecture the entry lists, cast
fused on the CPU backend, prefill, chunked prefill and decode against transformers' logits within
the check's bound (the unfused builds of every family are checked against transformers in
test_families.py); `make test-full` runs three random models each, fused and unfused, on both
backends (`--cudasim`: the CUDA backend on cudasim). In the default tier the CUDA backend
runs the families' fixture models on cudasim instead (test_cuda_models, test_mla). The references are computed live, so the tests need torch and transformers, which
`scripts/setup.sh --check` installs for the default tier (`make test` runs it); where they are
missing (pytest run by hand on a machine without them) the tests are skipped with that reason.
"""
import importlib.util
import re
import subprocess

import pytest

from conftest import FULL, ROOT

ORACLES = all(importlib.util.find_spec(m) for m in ("torch", "transformers"))
needs_oracles = pytest.mark.skipif(not ORACLES, reason="needs torch and transformers (scripts/setup.sh --check)")


def entries():
    lua = 'for name in pairs(dofile("models.lua")) do print(name) end'
    r = subprocess.run(["lua5.4", "-e", lua], cwd=ROOT, capture_output=True, text=True, check=True)
    return sorted(r.stdout.split())


# the entries in two groups, one `ingot check` each: one process imports torch and transformers
# once (about 7 s) for all its entries, and the two groups run on the two workers
GROUPS = 2


@needs_oracles
@pytest.mark.parametrize("group", range(GROUPS))
def test_entries_match_transformers(built, group):
    names = entries()[group::GROUPS]
    opts = ["--seeds", "3", "--cudasim"] if FULL else ["--seeds", "1", "--no-unfused"]
    r = subprocess.run([str(ROOT / "ingot"), "check", *names, *opts], capture_output=True, text=True, timeout=3600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.rstrip().endswith("all passed") and "skipped" not in r.stdout, r.stdout
    # each entry's section ("== NAME"): every architecture it lists, fused (and unfused in the
    # full tier) on each backend
    sections = re.split(r"^== (\w+)$", r.stdout, flags=re.M)
    rows_of = {name: [line.split() for line in text.splitlines() if line.rstrip().endswith("PASS")]
               for name, text in zip(sections[1::2], sections[2::2])}
    assert sorted(rows_of) == sorted(names), r.stdout
    backends = ("cpu", "cudasim") if FULL else ("cpu",)
    fusions = ("fused", "unfused") if FULL else ("fused",)
    for name, rows in rows_of.items():
        assert {(row[-7], row[-6]) for row in rows} == {(b, f) for b in backends for f in fusions}, (name, r.stdout)


def test_unknown_entry_is_a_usage_error():
    r = subprocess.run([str(ROOT / "ingot"), "check", "llama", "no_such_entry"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and "no entry 'no_such_entry'" in r.stderr
    r = subprocess.run([str(ROOT / "ingot"), "check"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "name the entries to check, or --all" in r.stderr


def test_entry_sizes_in_the_docs_are_true():
    """docs/adding-an-architecture.md's table of entry sizes lists every entry with its line count
    (from `M.NAME = {` to the closing brace at column 0), each within the 60 lines an entry may
    take."""
    lines = (ROOT / "models.lua").read_text().split("\n")
    sizes = {}
    for i, line in enumerate(lines):
        m = re.match(r"^M\.(\w+) = ", line)
        if m:
            end = next(j for j in range(i, len(lines)) if lines[j] == "}")
            sizes[m.group(1)] = end - i + 1
    doc = (ROOT / "docs" / "adding-an-architecture.md").read_text()
    table = {m.group(1): int(m.group(2)) for m in re.finditer(r"^\| (\w+) \| (\d+) \|$", doc, re.M)}
    assert table == sizes
    assert set(sizes) == set(entries()) and max(sizes.values()) <= 60, sizes


@needs_oracles
def test_failed_build_shows_its_error_and_leaves_nothing(built, tmp_path):
    """An entry that does not build (here: a misspelled op, in a copy given by --models) fails
    the check with the generator's whole message under its row, and leaves no build folder."""
    text = (ROOT / "models.lua").read_text()
    old = "local qkv = linear(layernorm(x,"
    assert text.count(old) == 1
    bad = tmp_path / "models.lua"
    bad.write_text(text.replace(old, "local qkv = linear(layer_norm(x,"))
    # `ingot check` execs the checker, so the process id is the one its builds are named by
    proc = subprocess.Popen([str(ROOT / "ingot"), "check", "gptneox", "--seeds", "1", "--no-unfused", "--models",
                             str(bad)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 1 and "FAIL (build)" in out, out + err
    assert "unknown op or name 'layer_norm' (ops: " in out, out
    assert not list((ROOT / "build").glob(f"check-{proc.pid}-*")), "a failed check left its build folder"
