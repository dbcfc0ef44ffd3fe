"""Builds model binaries with ./ingot for the tests, once per (model, options) per session."""
import functools
import json
import os
import pathlib
import subprocess

import numpy as np

from conftest import ROOT, SAN, locked

FIXTURES = ROOT / "tests" / "fixtures"
TINY = FIXTURES / "tiny"


def smollm2_gguf():
    """The real SmolLM2-135M-Instruct Q4_1 GGUF (scripts/fetch_smollm2.sh fetches it once)."""
    r = subprocess.run([str(ROOT / "scripts" / "fetch_smollm2.sh")], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


# The tests' builds keep the KV cache in f32 (the exact mode their oracle
# bounds assume) unless they ask for another; the default f16 cache is tested
# by name (test_models.py, test_smollm2.py, test_kernels.py).
EXACT_KV = ("--kv-dtype", "f32")


def serving_binary(request):
    """The SmolLM2 binary the serving tests share (build "smollm2"), or the one
    INGOT_SERVER_BIN names (an already built binary, while iterating on the server)."""
    if os.environ.get("INGOT_SERVER_BIN"):
        return os.environ["INGOT_SERVER_BIN"]
    request.getfixturevalue("built")
    return build(smollm2_gguf(), "smollm2")


@functools.lru_cache(maxsize=None)
def build(model, name, *options):
    """./ingot build MODEL --name NAME OPTIONS... (--kv-dtype f32 unless OPTIONS set it); returns the binary's path."""
    if "--kv-dtype" not in options:
        options = options + EXACT_KV
    cmd = [str(ROOT / "ingot"), "build", str(model), "--name", name, *options]
    if SAN:
        cmd.append("--san")
    with locked(f"model-{name}{'-san' if SAN else ''}"):
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"build failed: {' '.join(cmd)}\n{r.stderr}"
    return pathlib.Path(r.stdout.strip().splitlines()[-1])


def reference(model_dir):
    """The transformers fixture of a tiny model: (tokens, logits[n, vocab])."""
    ref = json.loads((model_dir / "reference.json").read_text())
    logits = np.fromfile(model_dir / ref["logits_file"], dtype="<f4").reshape(ref["shape"])
    return ref["tokens"], logits


def logits(binary, tokens, *mode, weights=None, tmp_path, lora=None, lora_merge=None):
    """Teacher-forced logits from a model binary: [len(tokens), vocab] (with a LoRA adapter applied
    per step, or merged into the weights at load)."""
    out = tmp_path / f"logits-{abs(hash((str(binary), mode, str(lora), str(lora_merge))))}.f32"
    cmd = [str(binary)]
    if weights:
        cmd += ["--weights", str(weights)]
    if lora:
        cmd += ["--lora", str(lora)]
    if lora_merge:
        cmd += ["--lora-merge", str(lora_merge)]
    cmd += ["logits", "--tokens", ",".join(map(str, tokens)), "--out", str(out), *mode]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return np.fromfile(out, dtype="<f4").reshape(len(tokens), -1)


def run_batch(binary, requests, *opts, tmp_path):
    """`NAME batch`: the requests (dicts) through the scheduler; (per-request results, stats)."""
    f = tmp_path / f"req-{abs(hash(json.dumps(requests)))}.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in requests))
    r = subprocess.run([str(binary), "batch", "-f", str(f), *map(str, opts)], capture_output=True, text=True,
                       timeout=1200)
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    return lines[:-1], lines[-1]["stats"]


def assert_greedy_near_ties(ours, theirs, bound, what=""):
    """The greedy rule against another engine's logits: where the argmax of `ours` differs from that
    of `theirs`, the two candidates are within 2 * bound in `theirs` (a near-tie that a difference
    of at most `bound` per logit can flip). Returns how many positions differ."""
    a, b = ours.argmax(1), theirs.argmax(1)
    for t in np.flatnonzero(a != b):
        gap = theirs[t, b[t]] - theirs[t, a[t]]
        assert gap <= 2 * bound, f"{what}position {t}: argmax differs by {gap:.3f}, not a near-tie"
    return int((a != b).sum())
