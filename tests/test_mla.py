"""Multi-head latent attention (the deepseek2 entry) beyond its logits.

tests/test_families.py compares both tiny DeepSeek-V2 fixtures with
transformers (prefill, chunked, decode; fused and unfused). Here: the KV
cache holds one shared row per layer and token (latent + RoPE key), which
--info states next to the bytes it costs, and the paged pool built on that
row gives every request exactly its solo tokens when requests share steps,
are preempted and recomputed under a pool far too small, and reuse cached
prefix blocks.
"""
import json
import random

import pytest

from modelbuild import FIXTURES, build, run_batch

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
    import subprocess
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
