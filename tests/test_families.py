"""Every family in models.lua against transformers: Qwen2, Qwen3, Mistral (sliding
window), Gemma 2, Phi-3, Mixtral, Llama with linear / llama3 / yarn rope scaling,
OLMo 2, Granite 3, SmolLM3 (NoPE layers), Qwen3-MoE and Gemma 3 (two RoPE tables).

Fixtures: tests/fixtures/families/ (tests/fixtures/make_tiny_families.py),
two tiny random models per family, 64 teacher-forced tokens, windows shorter
than the sequence. Each is built fused and --no-fuse and run with the prompt
in one chunk, in chunks of 7, and token by token. Tolerance 1e-4 on f32
weights: the engines differ only in summation order (observed ~1e-5; Gemma's
logits reach +-8, hence its 1e-5 rather than 3e-6).
"""
import json
import subprocess

import numpy as np
import pytest

from conftest import SAN
from modelbuild import FIXTURES, build, logits

FAMILIES = FIXTURES / "families"
MODELS = sorted(p.name for p in FAMILIES.iterdir() if (p / "reference.json").exists())
MODES = {"prefill": (), "chunked": ("--chunk", "7"), "decode": ("--decode",)}


def reference(name):
    ref = json.loads((FAMILIES / name / "reference.json").read_text())
    exp = np.fromfile(FAMILIES / name / ref["logits_file"], dtype="<f4").reshape(ref["shape"])
    return ref, exp


def test_every_family_has_fixtures():
    families = {json.loads((FAMILIES / m / "reference.json").read_text())["architecture"] for m in MODELS}
    assert {"Qwen2ForCausalLM", "Qwen3ForCausalLM", "MistralForCausalLM", "Gemma2ForCausalLM",
            "Phi3ForCausalLM", "MixtralForCausalLM", "LlamaForCausalLM", "Olmo2ForCausalLM",
            "GraniteForCausalLM", "SmolLM3ForCausalLM", "Qwen3MoeForCausalLM", "Gemma3ForCausalLM"} <= families


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("model", MODELS)
def test_family_logits_match_transformers(model, mode, fused, tmp_path, built):
    if SAN and (not fused or mode == "prefill"):
        pytest.skip("sanitizer pass: fused builds, chunked and decode modes (the optimized pass runs all six)")
    ref, expected = reference(model)
    assert len(ref["tokens"]) >= 48
    opts = () if fused else ("--no-fuse",)
    binary = build(FAMILIES / model, f"f-{model}{'' if fused else '-nofuse'}", *opts)
    got = logits(binary, ref["tokens"], *MODES[mode], tmp_path=tmp_path)
    err = np.abs(got - expected).max()
    assert err <= 1e-4, f"{model} {mode}: max |delta| {err:.3g}"


@pytest.mark.parametrize("model", [m for m in MODELS if m.startswith(("mixtral", "qwen3moe"))])
def test_moe_routing_matches_transformers(model, tmp_path, built):
    """The experts each token chose, per MoE layer (routing[j]: the j-th layer with a router)."""
    ref, _ = reference(model)
    binary = build(FAMILIES / model, f"f-{model}")
    routing = tmp_path / "routing.jsonl"
    r = subprocess.run([str(binary), "logits", "--tokens", ",".join(map(str, ref["tokens"])), "--out", "/dev/null",
                        "--routing-out", str(routing)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    ours = {}
    for line in routing.read_text().splitlines():
        rec = json.loads(line)
        ours[(rec["layer"], rec["pos"])] = rec["experts"]
    want = ref["routing"]  # [layer][token] -> expert ids, best first
    for layer, per_token in enumerate(want):
        for pos, experts in enumerate(per_token):
            assert ours[(layer, pos)] == experts, f"layer {layer} token {pos}: {ours[(layer, pos)]} != {experts}"
    assert len(ours) == len(want) * len(want[0])


def test_sliding_window_changes_results(tmp_path, built):
    """The window is real: the same checkpoint with the window widened gives
    different logits past the window (so the fixture test above is sensitive)."""
    import shutil
    src = FAMILIES / "mistral_4h2kv_sw16"
    wide = tmp_path / "mistral_wide"
    shutil.copytree(src, wide)
    cfg = json.loads((wide / "config.json").read_text())
    cfg["sliding_window"] = 4096
    (wide / "config.json").write_text(json.dumps(cfg))
    ref, expected = reference("mistral_4h2kv_sw16")
    got = logits(build(wide, "f-mistral-wide-window"), ref["tokens"], tmp_path=tmp_path)
    assert np.abs(got[:16] - expected[:16]).max() <= 1e-4
    assert np.abs(got[16:] - expected[16:]).max() > 0.01


def test_smollm3_nope_interval_without_list(tmp_path, built):
    """SmolLM3 without a no_rope_layers list falls back to no_rope_layer_interval
    (every interval-th layer without RoPE), as transformers' config does; and
    RoPE on every layer gives other logits (so the NoPE layers are real)."""
    import shutil
    ref, expected = reference("smollm3_interval")
    for name, edit, same in (("interval", lambda c: c.pop("no_rope_layers"), True),
                             ("rope-everywhere", lambda c: c.update(no_rope_layers=[1] * c["num_hidden_layers"]), False)):
        d = tmp_path / f"smollm3_{name}"
        shutil.copytree(FAMILIES / "smollm3_interval", d)
        cfg = json.loads((d / "config.json").read_text())
        edit(cfg)
        (d / "config.json").write_text(json.dumps(cfg))
        err = np.abs(logits(build(d, f"f-smollm3-{name}"), ref["tokens"], tmp_path=tmp_path) - expected).max()
        assert (err <= 1e-4) if same else (err > 0.05), f"{name}: max |delta| {err:.3g}"


BATCH_MODELS = ["qwen2_gqa", "qwen3_hd24", "mistral_4h2kv_sw16", "gemma2_gqa", "phi3_gqa", "mixtral_8e_top2",
                "llama_rope_yarn", "qwen3moe_16e_top4"]


@pytest.mark.parametrize("model", BATCH_MODELS)
def test_family_batch_invariance(model, tmp_path, built):
    """Through the continuous-batching scheduler (the serving path): 12
    concurrent requests, greedy and seeded sampling, chunked prefill, each
    returns exactly what it returns alone."""
    import random
    ref, _ = reference(model)
    vocab = ref["shape"][1]
    binary = build(FAMILIES / model, f"f-{model}")
    rng = random.Random(7)
    reqs = []
    for i in range(12):
        req = {"prompt": [rng.randrange(vocab) for _ in range(rng.randrange(4, 40))],
               "max_tokens": rng.randrange(6, 30), "ignore_eos": True}
        if i % 2:
            req.update(temperature=0.8, seed=i)
        reqs.append(req)

    def run(requests, *opts):
        f = tmp_path / f"r{len(requests)}-{abs(hash(json.dumps(requests)))}.jsonl"
        f.write_text("".join(json.dumps(r) + "\n" for r in requests))
        r = subprocess.run([str(binary), "batch", "-f", str(f), *opts], capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        return [json.loads(line)["tokens"] for line in r.stdout.splitlines()[:-1]]

    together = run(reqs, "--max-batch-tokens", "40")
    for i, req in enumerate(reqs):
        assert run([req]) == [together[i]], f"{model}: request {i} differs when batched"
