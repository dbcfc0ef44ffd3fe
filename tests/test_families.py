"""Every family in models.lua against transformers: Qwen2, Qwen3, Mistral (sliding
window), Gemma 2, Phi-3, Mixtral, Llama with linear / llama3 / yarn rope scaling,
OLMo 2, Granite 3, SmolLM3 (NoPE layers), Qwen3-MoE, Gemma 3 (two RoPE tables),
DeepSeek-V2 (multi-head latent attention, tests/test_mla.py has the rest), GPT-NeoX, StableLM and
gpt-oss (attention sinks, biased routers and experts, the clamped SwiGLU, experts stacked and
transposed in the checkpoint) and LFM2 (short convolutions whose last inputs are each sequence's
recurrent state: the chunked and token-by-token modes carry it across steps) and Granite 4.0's
hybrid (Mamba-2 layers: a convolution and a selective scan, each with per-sequence state) and
Qwen3-Next (Gated DeltaNet: a convolution and the gated delta rule, gated attention, a MoE with a
gated shared expert).

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

from conftest import BREADTH, SAN
from modelbuild import FIXTURES, build, logits, run_batch

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
            "GraniteForCausalLM", "SmolLM3ForCausalLM", "Qwen3MoeForCausalLM", "Gemma3ForCausalLM",
            "DeepseekV2ForCausalLM", "GPTNeoXForCausalLM", "StableLmForCausalLM", "GptOssForCausalLM",
            "Lfm2ForCausalLM", "GraniteMoeHybridForCausalLM", "Qwen3NextForCausalLM"} <= families


def family_of(name):
    return json.loads((FAMILIES / name / "reference.json").read_text())["family"]


# The unfused builds (one kernel per op) of each family's first fixture in the default tier: the
# other fixtures of a family have the same ops, unfused alike; make test-full builds every one.
FIRST_OF_FAMILY = {family_of(m): m for m in reversed(MODELS)}
CASES = [pytest.param(model, mode, fused, id=f"{model}-{mode}-{'fused' if fused else 'unfused'}",
                      marks=() if fused or FIRST_OF_FAMILY[family_of(model)] == model else BREADTH)
         for fused in (True, False) for mode in MODES for model in MODELS]


@pytest.mark.parametrize("model, mode, fused", CASES)
def test_family_logits_match_transformers(model, mode, fused, tmp_path, built):
    if SAN and (not fused or mode == "prefill" or FIRST_OF_FAMILY[family_of(model)] != model):
        pytest.skip("sanitizer pass: each family's first fixture, fused, chunked and decode (its other fixtures "
                    "run the same kernels; the optimized pass runs them all)")
    ref, expected = reference(model)
    assert len(ref["tokens"]) >= 48
    opts = () if fused else ("--no-fuse",)
    binary = build(FAMILIES / model, f"f-{model}{'' if fused else '-nofuse'}", *opts)
    got = logits(binary, ref["tokens"], *MODES[mode], tmp_path=tmp_path)
    err = np.abs(got - expected).max()
    assert err <= 1e-4, f"{model} {mode}: max |delta| {err:.3g}"


@pytest.mark.parametrize("model", [m for m in MODELS if m.startswith(("mixtral", "qwen3moe", "gptoss"))])
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


# one fixture of every models.lua entry (DeepSeek-V2 also in test_mla)
BATCH_MODELS = ["qwen2_gqa", "qwen3_hd24", "mistral_4h2kv_sw16", "gemma2_gqa", "gemma3_gqa", "phi3_gqa", "mixtral_8e_top2",
                "llama_rope_yarn", "qwen3moe_16e_top4", "olmo2_gqa", "granite_gqa", "smollm3_interval",
                "deepseek2_mha_greedy", "gptoss_sinks"]


@pytest.mark.parametrize("model", BATCH_MODELS)
def test_family_batch_invariance(model, tmp_path, built):
    """Through the continuous-batching scheduler (the serving path): 16
    requests, greedy and seeded sampling, four of them sharing a 40-token
    prefix, in shared steps of chunked prefill through a pool of 10 blocks
    (sequences are preempted and recomputed; the shared prefix's blocks are
    reused from the prefix cache): each returns exactly what it returns run
    alone, one request at a time with no prefix cache."""
    import random
    ref, _ = reference(model)
    vocab = ref["shape"][1]
    binary = build(FAMILIES / model, f"f-{model}")
    rng = random.Random(7)
    system = [rng.randrange(vocab) for _ in range(40)]
    reqs = []
    for i in range(16):
        prompt = [rng.randrange(vocab) for _ in range(rng.randrange(4, 40))]
        req = {"prompt": system + prompt[:8] if i >= 12 else prompt, "max_tokens": rng.randrange(6, 30),
               "ignore_eos": True}
        if i % 2:
            req.update(temperature=0.8, seed=i)
        reqs.append(req)
    together, stats = run_batch(binary, reqs, "--max-batch-tokens", "40", "--kv-blocks", "10", tmp_path=tmp_path)
    alone, _ = run_batch(binary, reqs, "--max-running", "1", "--no-prefix-cache", tmp_path=tmp_path)
    assert stats["preemptions"] > 0 and stats["prefix_hit_tokens"] > 0, stats
    for i, (t, a) in enumerate(zip(together, alone)):
        assert t["tokens"] == a["tokens"], f"{model}: request {i} differs when batched / preempted / prefix-cached"


def write_moe_gguf(src, path, arch):
    """The tiny Mixtral-style checkpoint `src` as an F32 GGUF the way
    llama.cpp's converter writes one: architecture `arch` ("llama" with an
    expert count for Mixtral), q/k rows permuted to interleaved RoPE pairs, and
    each layer's experts stacked into ffn_{gate,up,down}_exps [experts, rows,
    cols]."""
    import sys

    import gguf
    from safetensors.numpy import load_file
    sys.path.insert(0, str(FIXTURES))
    from make_kquant_models import gpt2_vocabulary, permute_qk
    cfg = json.loads((src / "config.json").read_text())
    W = load_file(str(src / "model.safetensors"))
    heads, kv_heads, experts = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["num_local_experts"]
    wr = gguf.GGUFWriter(str(path), arch)
    wr.add_context_length(cfg["max_position_embeddings"])
    wr.add_embedding_length(cfg["hidden_size"])
    wr.add_block_count(cfg["num_hidden_layers"])
    wr.add_feed_forward_length(cfg["intermediate_size"])
    wr.add_head_count(heads)
    wr.add_head_count_kv(kv_heads)
    wr.add_key_length(cfg["head_dim"])
    wr.add_value_length(cfg["head_dim"])
    wr.add_rope_dimension_count(cfg["head_dim"])
    wr.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    wr.add_rope_freq_base(cfg["rope_parameters"]["rope_theta"])
    wr.add_expert_count(experts)
    wr.add_expert_used_count(cfg["num_experts_per_tok"])
    wr.add_file_type(gguf.LlamaFileType.ALL_F32)
    gpt2_vocabulary(wr, {"vocab": cfg["vocab_size"]})
    wr.add_tensor("token_embd.weight", W["model.embed_tokens.weight"])
    wr.add_tensor("output_norm.weight", W["model.norm.weight"])
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        wr.add_tensor(f"blk.{i}.attn_norm.weight", W[p + "input_layernorm.weight"])
        wr.add_tensor(f"blk.{i}.attn_q.weight", permute_qk(W[p + "self_attn.q_proj.weight"], heads))
        wr.add_tensor(f"blk.{i}.attn_k.weight", permute_qk(W[p + "self_attn.k_proj.weight"], kv_heads))
        wr.add_tensor(f"blk.{i}.attn_v.weight", W[p + "self_attn.v_proj.weight"])
        wr.add_tensor(f"blk.{i}.attn_output.weight", W[p + "self_attn.o_proj.weight"])
        wr.add_tensor(f"blk.{i}.ffn_norm.weight", W[p + "post_attention_layernorm.weight"])
        wr.add_tensor(f"blk.{i}.ffn_gate_inp.weight", W[p + "block_sparse_moe.gate.weight"])
        for gguf_name, hf_name in (("gate", "w1"), ("up", "w3"), ("down", "w2")):
            stack = np.stack([W[f"{p}block_sparse_moe.experts.{j}.{hf_name}.weight"] for j in range(experts)])
            wr.add_tensor(f"blk.{i}.ffn_{gguf_name}_exps.weight", stack)
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()


@pytest.mark.parametrize("arch", ["llama", "mixtral"])
def test_moe_gguf_with_stacked_experts(arch, tmp_path, built):
    """A Mixtral GGUF as llama.cpp writes it (each layer's experts stacked in
    one ffn_*_exps tensor; general.architecture "llama" with an expert count,
    or "mixtral") casts as the mixtral entry, each expert a row range of the
    stacked tensor, and matches transformers on the same f32 weights as the
    safetensors build does (1e-4; the GGUF's q/k rows are permuted, which the
    description's adjacent RoPE pairs undo). llama.cpp (llama-cpp-python
    0.3.36) reads the same file and gives transformers' logits within 3e-6,
    so the writer above is llama.cpp's layout, not one of ours."""
    src = FAMILIES / "mixtral_4e_top2"
    path = tmp_path / f"mixtral-{arch}.gguf"
    write_moe_gguf(src, path, arch)
    ref, expected = reference("mixtral_4e_top2")
    tokens = ref["tokens"]
    binary = build(path, f"f-mixtral-gguf-{arch}")
    info = subprocess.run([str(binary), "--info"], capture_output=True, text=True, timeout=120)
    assert "architecture:    mixtral" in info.stdout, info.stdout
    for mode in (), ("--chunk", "7"), ("--decode",):
        err = np.abs(logits(binary, tokens, *mode, tmp_path=tmp_path) - expected).max()
        assert err <= 1e-4, f"{arch} {mode}: max |delta| {err:.3g}"


@pytest.mark.full
def test_moe_gguf_with_stacked_experts_on_cudasim(tmp_path, built):
    """The same file cast for CUDA and run on cudasim (the host slices the
    stacked experts before uploading them)."""
    path = tmp_path / "mixtral-llama.gguf"
    write_moe_gguf(FAMILIES / "mixtral_4e_top2", path, "llama")
    ref, expected = reference("mixtral_4e_top2")
    binary = build(path, "cuf-mixtral-gguf", "--backend", "cuda", "--cudasim")
    err = np.abs(logits(binary, ref["tokens"][:16], tmp_path=tmp_path) - expected[:16]).max()
    assert err <= 1e-4, f"max |delta| {err:.3g}"
