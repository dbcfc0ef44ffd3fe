"""`ingot check ENTRY`: a description checked against transformers on random tiny models.

Needs the oracle packages (torch, transformers: scripts/setup.sh --oracles,
which `make test-full` runs); where they are missing these tests are skipped
by name. The llama entry runs in the default tier (LlamaForCausalLM and
MistralForCausalLM, one random model each, fused); every entry runs in
make test-full.
"""
import importlib.util
import subprocess

import pytest

from conftest import BREADTH, ROOT

ORACLES = all(importlib.util.find_spec(m) for m in ("torch", "transformers"))
pytestmark = pytest.mark.skipif(not ORACLES, reason="needs torch and transformers (scripts/setup.sh --oracles)")

ENTRIES = ["llama"] + [pytest.param(e, marks=BREADTH) for e in
                       ("qwen2", "qwen3", "gemma2", "phi3", "mixtral", "olmo2", "granite", "smollm3", "qwen3moe",
                        "gemma3", "deepseek2")]


def entries():
    lua = 'for name in pairs(dofile("models.lua")) do print(name) end'
    return subprocess.run(["lua5.4", "-e", lua], cwd=ROOT, capture_output=True, text=True).stdout.split()


@pytest.mark.parametrize("entry", ENTRIES)
def test_entry_matches_transformers(built, entry):
    if entry not in entries():
        pytest.skip(f"models.lua has no entry '{entry}'")
    r = subprocess.run([str(ROOT / "ingot"), "check", entry, "--seeds", "1", "--no-unfused"],
                       capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [line for line in r.stdout.splitlines() if line.rstrip().endswith("PASS")]
    assert rows and r.stdout.rstrip().endswith("all passed"), r.stdout


def test_unknown_entry_is_a_usage_error():
    r = subprocess.run([str(ROOT / "ingot"), "check", "no_such_entry"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "no entry 'no_such_entry'" in r.stderr
