"""Multi-head latent attention (the deepseek2 entry) beyond its CPU logits.

tests/test_families.py compares both tiny DeepSeek-V2 fixtures with
transformers (prefill, chunked, decode; fused and unfused) on the CPU. Here:
the KV cache holds one shared row per layer and token (latent + RoPE key),
which --info states next to the bytes it costs; the paged pool built on that
row gives every request exactly its solo tokens when requests share steps,
are preempted and recomputed under a pool far too small, and reuse cached
prefix blocks; the CUDA backend on cudasim matches transformers within 1e-4
too (the second fixture, unfused builds and the paged batches: full tier), and
nvcc compiles its kernels without spills.
"""
import json
import random
import subprocess

import numpy as np
import pytest

from conftest import BREADTH, SAN
from modelbuild import FIXTURES, build, logits, run_batch

FAMILIES = FIXTURES / "families"
MODEL = "deepseek2_qlora_yarn"


@pytest.fixture(scope="module")
def mla(built):
    return build(FAMILIES / MODEL, f"f-{MODEL}")  # the binary test_families builds


def config():
    return json.loads((FAMILIES / MODEL / "config.json").read_text())


def requests(n, seed, vocab, temperature=0.0):
    rng = random.Random(seed)
    return [{"prompt": [rng.randrange(vocab) for _ in range(rng.randrange(3, 50))],
             "max_tokens": rng.randrange(8, 30), "ignore_eos": True, "temperature": temperature, "seed": 100 + i}
            for i in range(n)]


def solo(binary, reqs, tmp_path):
    return [run_batch(binary, [r], tmp_path=tmp_path)[0][0]["tokens"] for r in reqs]


def test_info_states_the_cached_row(mla):
    out = subprocess.run([str(mla), "--info"], capture_output=True, text=True, timeout=60).stdout
    c = config()
    row = c["kv_lora_rank"] + c["qk_rope_head_dim"]
    assert f"one row of {row} per layer and kv head (1), its first {c['kv_lora_rank']} columns the values" in out, out
    # f32 cache (the tests' builds): one row per layer, nothing per head
    assert f"KV cache:        {4 * row * c['num_hidden_layers']} bytes/token (f32)" in out, out


def test_preemption_and_batching_change_nothing(mla, tmp_path):
    """Greedy and sampled requests in shared steps through a pool of 10 blocks:
    sequences are preempted and recomputed from the cache row they rebuild."""
    reqs = requests(16, 5, config()["vocab_size"]) + requests(8, 6, config()["vocab_size"], temperature=0.8)
    together, stats = run_batch(mla, reqs, "--kv-blocks", "10", "--max-batch-tokens", "48", tmp_path=tmp_path)
    assert stats["preemptions"] > 0
    for i, (t, a) in enumerate(zip(together, solo(mla, reqs, tmp_path))):
        assert t["tokens"] == a, f"request {i} differs when batched / preempted"


def test_prefix_cache_reuses_latent_blocks(mla, tmp_path):
    rng = random.Random(9)
    vocab = config()["vocab_size"]
    system = [rng.randrange(vocab) for _ in range(40)]  # 2 full blocks shared
    reqs = [{"prompt": system + [rng.randrange(vocab) for _ in range(3 + i)], "max_tokens": 10, "ignore_eos": True}
            for i in range(4)]
    cached, stats = run_batch(mla, reqs, "--max-running", "1", tmp_path=tmp_path)
    uncached, stats_off = run_batch(mla, reqs, "--max-running", "1", "--no-prefix-cache", tmp_path=tmp_path)
    assert stats["prefix_hit_tokens"] >= 3 * 32 and stats_off["prefix_hit_tokens"] == 0
    assert [r["tokens"] for r in cached] == [r["tokens"] for r in uncached]


def reference(model):
    ref = json.loads((FAMILIES / model / "reference.json").read_text())
    return ref["tokens"], np.fromfile(FAMILIES / model / ref["logits_file"], dtype="<f4").reshape(ref["shape"])


@pytest.mark.skipif(SAN, reason="cudasim runs in the optimized pass")
@pytest.mark.parametrize("model, opts", [(MODEL, ()), pytest.param("deepseek2_mha_greedy", (), marks=BREADTH),
                                         pytest.param(MODEL, ("--no-fuse",), marks=BREADTH)],
                         ids=["fused", "greedy-fused", "unfused"])
def test_cudasim_matches_transformers(built, tmp_path, model, opts):
    """The CUDA kernels (head_linear.cuh, attn_rows_kernel reading the values from the cached
    rows, group-limited routing) on cudasim: prefill, chunks of 5, token by token."""
    tokens, want = reference(model)
    n = 24 if not opts and model == MODEL else len(tokens)  # the default tier keeps cudasim short
    sim = build(FAMILIES / model, f"cuf-{model}{''.join(opts)}", "--backend", "cuda", "--cudasim", *opts)
    for mode in ((), ("--chunk", "5"), ("--decode",)):
        err = float(np.abs(logits(sim, tokens[:n], *mode, tmp_path=tmp_path) - want[:n]).max())
        assert err <= 1e-4, f"{model} {mode}: max |delta| {err:.3g}"


@pytest.mark.skipif(SAN, reason="cudasim runs in the optimized pass")
def test_cudasim_launches_per_decode_step_are_what_info_says(built, tmp_path):
    """--info gives the launches of each layer kind (the dense first layer, the MoE ones); a
    decode step launches exactly their sum."""
    import os
    import re
    sim = build(FAMILIES / MODEL, f"cuf-{MODEL}", "--backend", "cuda", "--cudasim")
    info = subprocess.run([str(sim), "--info"], capture_output=True, text=True, timeout=120).stdout
    m = re.search(r"(\d+) launches per decode step: (\d+) per layer \(layer 0\), (\d+) per layer \(layers 1, 2\) "
                  r"\+ (\d+) outside the layers;", info)
    assert m, info
    per_step, dense, moe, outside = map(int, m.groups())
    assert per_step == dense + 2 * moe + outside and moe > dense  # route + experts on top of a dense layer
    tokens, _ = reference(MODEL)
    r = subprocess.run([str(sim), "logits", "--tokens", ",".join(map(str, tokens[:6])), "--decode", "--out",
                        str(tmp_path / "l.f32")], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "INGOT_CUDA_GRAPHS": "0", "INGOT_CUDA_STATS": "1"})
    assert r.returncode == 0, r.stderr
    steps, launches = map(int, re.search(r"cuda: (\d+) steps, \d+ graphs captured, \d+ graph replays, (\d+) kernel launches",
                                         r.stderr).groups())
    assert steps == 6 and launches == per_step * steps, r.stderr


@pytest.mark.full
@pytest.mark.skipif(SAN, reason="cudasim runs in the optimized pass")
def test_cudasim_paged_batches_match_cpu(built, tmp_path, mla):
    """The device KV pool of shared rows through the scheduler: preemption and prefix hits, the
    same tokens as the CPU build."""
    sim = build(FAMILIES / MODEL, f"cuf-{MODEL}", "--backend", "cuda", "--cudasim")
    vocab = config()["vocab_size"]
    pressure = requests(6, 11, vocab)
    rng = random.Random(12)
    shared = [rng.randrange(vocab) for _ in range(20)]
    prefix = [{"prompt": shared + [i + 1] * (i + 1), "max_tokens": 4, "ignore_eos": True} for i in range(3)]
    for reqs, opts, stat in ((pressure, ("--kv-blocks", "6", "--max-batch-tokens", "32"), "preemptions"),
                             (prefix, ("--max-running", "1"), "prefix_hit_tokens")):
        want, _ = run_batch(mla, reqs, *opts, tmp_path=tmp_path)
        got, stats = run_batch(sim, reqs, *opts, tmp_path=tmp_path)
        assert [g["tokens"] for g in got] == [w["tokens"] for w in want]
        assert stats[stat] > 0, stats


@pytest.mark.parametrize("edit, at, words", [
    (("value_dim = lora,", ""), "local a = attention(q, k, nil", ["attention: without v, value_dim"]),
    (("rows = c.v_dim}", "rows = c.v_dim + 1}"), "rows = c.v_dim}", ["head_linear: rows", "do not fit weight kv_b"]),
    (("{heads = H}), rope_opts(c, H))", "{heads = H + 1}), rope_opts(c, H))"), "{heads = H}), rope_opts(c, H))",
     ["columns:", "group(s)"]),
    (('rows = "v_dim"}', 'rows = "kv_lora"}'), "kv_b        = {hf", ["weight 'kv_b'", "rows in parts", "rows declared"]),
], ids=["no-value-dim", "head-rows", "columns", "gguf-parts-rows"])
def test_description_mistakes_name_their_line(mla, tmp_path, edit, at, words):
    """A wrong MLA description stops the generator at the models.lua line that made it."""
    from conftest import ROOT
    text = (ROOT / "models.lua").read_text()
    old, new = edit
    assert text.count(old) == 1
    bad = tmp_path / "models.lua"
    bad.write_text(text.replace(old, new))
    line = text[:text.index(at)].count("\n") + 1
    r = subprocess.run(["lua5.4", str(ROOT / "generator" / "main.lua"), "--inspect", str(mla.parent / "inspect.json"),
                        "--source", str(FAMILIES / MODEL), "--hf-config", str(FAMILIES / MODEL / "config.json"),
                        "--name", "x", "--out", str(tmp_path / "out"), "--models", str(bad), "--dry-run"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and f"models.lua:{line}: error:" in r.stderr, r.stderr
    for w in words:
        assert w in r.stderr, r.stderr
