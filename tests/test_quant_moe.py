"""GPTQ, AWQ and FP8 checkpoints of mixture-of-experts models (runtime/load/quant_ckpt.c, quant_rules.c).

Models: tiny random Mixtral, Qwen3-MoE and DeepSeek-V2 models (transformers)
whose linears, the experts' among them, are quantized by tests/quant_ref.py as
the published checkpoints are: routers (`mlp.gate`, `block_sparse_moe.gate`),
embeddings and the LM head stay in float, and so does whatever the
configuration's modules_to_not_convert / ignored_layers / dynamic rules leave
out (GPTQModel's dynamic rules may also give a module its own bits and group
size, which the packer follows with Python's re.match, the rules' own
semantics); one breadth model quantizes its routers too (the route reads any
weight type). ingot's logits (prefill, chunked, token by token) are compared
with transformers and with ingot's own f32 build, both running the
dequantized weights: the same weights, so the bound is summation order: 1e-5
against ingot's f32 build (measured 2e-6), 2e-5 against transformers (measured
2e-6), 1e-4 for DeepSeek-V2, whose f32 build itself differs from transformers
by 4e-5 on this random configuration (docs/architectures.md: MLA's observed deltas).
transformers reads FP8 block checkpoints itself on the CPU (it dequantizes
them), so the [128, 128] ones (DeepSeek-V3's and Qwen3-FP8's) are also
compared with transformers loading the quantized folder as it is (its CPU
dequantizer takes a partial last block's width from the shapes, which
differs from weight_block_size for [32, 64] over 96 columns). On cudasim the CUDA MoE kernels (GEMV for decode, GEMM tiles
for prefill, act-order experts read through their input orders) must match the
CPU build.

Loader: act-order experts of one layer all come reordered (one expert whose
stored order needs it is enough), per-module bits from dynamic rules, and bad
checkpoints (a missing expert part, experts that disagree in shape or type, a
module the configuration leaves unquantized stored quantized, rules ingot
cannot read) fail with one line naming the tensor or key.
"""
import json
import os
import re
import shutil

import numpy as np
import pytest

import quant_ref as qr
from conftest import BREADTH, ROOT, SAN, locked, run
from modelbuild import build, logits
from test_quant_ckpt import TOKENS, bad, dump, inspect, quant_config, quantize, save

CACHE = ROOT / "build" / "_quant_moe"  # checkpoints shared by the test workers (written once, under a lock)
SAME_BOUND = 1e-5                  # ingot on the quantized checkpoint against ingot's f32 build of its weights
TF_BOUND = {"deepseek2": 1e-4}     # against transformers; 2e-5 for the others

ARCHS = {
    # tiny configurations whose linears have inputs in multiples of 32 (the block types' block)
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", dict(
        intermediate_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        num_local_experts=4, num_experts_per_tok=2, router_jitter_noise=0.0, sliding_window=None)),
    "qwen3moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", dict(
        intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, num_experts=8, num_experts_per_tok=2, norm_topk_prob=True,
        mlp_only_layers=[1], decoder_sparse_step=1, router_jitter_noise=0.0, use_sliding_window=False)),
    "deepseek2": ("DeepseekV2Config", "DeepseekV2ForCausalLM", dict(
        intermediate_size=64, moe_intermediate_size=32, num_attention_heads=4, num_key_value_heads=4,
        q_lora_rank=64, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=16, v_head_dim=16,
        n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1, n_group=4, topk_group=2,
        topk_method="group_limited_greedy", routed_scaling_factor=1.0, first_k_dense_replace=1,
        attention_bias=False)),
}
ROUTER = re.compile(r".*\.(mlp|block_sparse_moe)\.gate$")  # routers stay in float in every published checkpoint

MODELS = {
    # name: (architecture, method, quantization, quantization_config fields beyond the method's)
    "gptq4-act-order-mixtral": ("mixtral", "gptq", dict(bits=4, group_size=32, desc_act=True), {}),
    "awq-qwen3moe": ("qwen3moe", "awq", dict(group_size=32), {"modules_to_not_convert": ["gate"]}),
    "fp8-block-deepseek2": ("deepseek2", "fp8", dict(block=[128, 128]), {"modules_to_not_convert": ["lm_head"]}),
    # down_proj at 8 bits in groups of 32 beside 4 bits in groups of 64; routers excluded by rule
    "gptq-dynamic-qwen3moe": ("qwen3moe", "gptq", dict(bits=4, group_size=64),
                              {"dynamic": {r"-:.*\.mlp\.gate$": {}, r"+:.*\.down_proj$": {"bits": 8, "group_size": 32}}}),
    "gptq8-sym-v2-mixtral": ("mixtral", "gptq", dict(bits=8, group_size=-1, sym=True, v2=True), {}),
    "awq-mixtral": ("mixtral", "awq", dict(group_size=64), {"modules_to_not_convert": ["gate"]}),
    "fp8-block-mixtral": ("mixtral", "fp8", dict(block=[128, 128]), {}),
    "fp8-tensor-qwen3moe": ("qwen3moe", "fp8", dict(), {"ignored_layers": ["lm_head"]}),
    "fp8-block32-qwen3moe": ("qwen3moe", "fp8", dict(block=[32, 64]), {}),
    # the shared experts left in float by a rule (as some DeepSeek conversions keep them)
    "gptq4-act-order-deepseek2": ("deepseek2", "gptq", dict(bits=4, group_size=32, desc_act=True),
                                  {"dynamic": {"-:.*shared_experts.*": {}}}),
    "awq-deepseek2": ("deepseek2", "awq", dict(group_size=32), {}),
    # a checkpoint that quantizes its routers too (no published one does; the route reads any type)
    "fp8-block-mixtral-router": ("mixtral", "fp8", dict(block=[128, 128]), {}),
}
QUANTIZED_ROUTERS = {"fp8-block-mixtral-router"}
DEFAULT_MODELS = ("gptq4-act-order-mixtral", "awq-qwen3moe", "fp8-block-deepseek2", "gptq-dynamic-qwen3moe")


def names_module(entry, module):
    """modules_to_not_convert / ignored_layers: the entry is a run of whole components of the name."""
    return re.search(r"(^|\.)" + re.escape(entry) + r"(\.|$)", module) is not None


def module_settings(module, method, q, extra, routers=False):
    """None when the module stays in float, else the quantization it gets (GPTQModel's dynamic rules:
    the first matching rule decides, re.match from the start)."""
    if ROUTER.match(module) and not routers:
        return None
    for key in ("modules_to_not_convert", "ignored_layers"):
        if any(names_module(e, module) for e in extra.get(key, [])):
            return None
    for rule, over in extra.get("dynamic", {}).items():
        pattern = rule[2:] if rule.startswith(("-:", "+:")) else rule
        if re.match(pattern, module):
            return None if rule.startswith("-:") else {**q, **over}
    return q


def tiny_model(arch):
    import torch
    import transformers
    cfg_name, model_name, kw = ARCHS[arch]
    common = dict(vocab_size=256, hidden_size=64, num_hidden_layers=2, max_position_embeddings=128,
                  initializer_range=0.1, tie_word_embeddings=False, rms_norm_eps=1e-5)
    torch.manual_seed(11)
    cfg = getattr(transformers, cfg_name)(attn_implementation="eager", **{**common, **kw})
    return getattr(transformers, model_name)(cfg).float().eval()


def quantized_model(name):
    """(the quantized checkpoint folder, the f32 folder of its dequantized weights, transformers' logits for
    TOKENS with those weights); the folders are written once."""
    import torch
    from safetensors.numpy import load_file
    arch, method, q, extra = MODELS[name]
    d, f32 = CACHE / name, CACHE / f"{name}-f32"
    with locked(f"quant-moe-{name}"):
        if not (d / "config.json").exists():
            model = tiny_model(arch)
            tmp = CACHE / f".{name}-{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            model.save_pretrained(tmp / "src")  # the checkpoint's own names (one tensor per expert)
            state = load_file(tmp / "src" / "model.safetensors")
            stored, deq = {}, {}
            for k, v in state.items():
                module = k[:-len(".weight")]
                how = module_settings(module, method, q, extra, name in QUANTIZED_ROUTERS) if k.endswith(".weight") and v.ndim == 2 and \
                    module.startswith("model.layers.") else None
                if how is None:
                    stored[k] = deq[k] = v
                    continue
                parts, w = quantize(method, v, how)
                stored.update({f"{module}.{s}": t for s, t in parts.items()})
                deq[k] = w
            cfg = json.loads((tmp / "src" / "config.json").read_text())
            for folder, tensors, qcfg in ((tmp / "q", stored, {**quant_config(method, q), **extra}), (tmp / "f", deq, None)):
                folder.mkdir()
                save(folder / "model.safetensors", tensors)
                (folder / "config.json").write_text(json.dumps({**cfg, "quantization_config": qcfg} if qcfg else cfg))
            shutil.rmtree(f32, ignore_errors=True)
            (tmp / "f").rename(f32)
            (tmp / "q").rename(d)
            shutil.rmtree(tmp)
    model = transformers_model(f32)
    with torch.no_grad():
        ref = model(torch.tensor([TOKENS])).logits[0].numpy()
    return d, f32, ref


def transformers_model(folder):
    import torch
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, device_map="cpu").eval()


def expected_dtypes(name):
    arch, method, q, extra = MODELS[name]
    if method == "fp8":
        return {"f8_b32"}
    bits = {q.get("bits", 4)} | {r.get("bits", q.get("bits", 4)) for r in extra.get("dynamic", {}).values() if r}
    return {"q8_z" if b == 8 else "q4_z" for b in bits}


@pytest.mark.parametrize("name", [n if n in DEFAULT_MODELS else pytest.param(n, marks=BREADTH) for n in MODELS])
def test_quantized_moe_matches_transformers(name, built, tmp_path):
    d, f32, ref = quantized_model(name)
    binary = build(d, f"qm-{name}")
    r = run([binary, "--info"])
    assert r.returncode == 0, r.stderr
    listed = {t["name"]: t["dtype"] for t in json.loads(inspect(built, d).stdout)["tensors"]}
    experts = {dt for n, dt in listed.items() if ".experts." in n and n.endswith(".weight")}
    assert experts == expected_dtypes(name), experts  # every expert linear repacked
    routers = {dt for n, dt in listed.items() if ROUTER.match(n[:-len(".weight")])}
    assert routers == (expected_dtypes(name) if name in QUANTIZED_ROUTERS else {"f32"}), routers
    if MODELS[name][2].get("desc_act"):  # act-order: a layer's experts of one matrix all come reordered, or none
        families = {}
        for n in listed:
            if ".experts." in n and n.endswith(".weight"):
                families.setdefault(re.sub(r"\.experts\.\d+\.", ".experts.*.", n), set()).add(n + ".perm" in listed)
        assert all(len(v) == 1 for v in families.values()) and {True} in families.values(), families
    plain = build(f32, f"qm-{name}-f32")
    bound = TF_BOUND.get(MODELS[name][0], 2e-5)
    modes = [("--decode",)] if SAN else [(), ("--chunk", "7"), ("--decode",)]
    for mode in modes:
        got = logits(binary, TOKENS, *mode, weights=d, tmp_path=tmp_path)
        err = float(np.abs(got - ref).max())
        assert err <= bound, f"{name} {mode}: max |ingot - transformers| {err:.3g}"
        same = float(np.abs(got - logits(plain, TOKENS, *mode, weights=f32, tmp_path=tmp_path)).max())
        assert same <= SAME_BOUND, f"{name} {mode}: max |quantized - dequantized f32 build| {same:.3g}"
    if MODELS[name][1] == "fp8" and MODELS[name][2].get("block") == [128, 128]:
        # transformers reads the FP8 folder itself (dequantized on the CPU): an oracle independent of quant_ref
        import torch
        with torch.no_grad():
            theirs = transformers_model(d)(torch.tensor([TOKENS])).logits[0].float().numpy()
        err = float(np.abs(logits(binary, TOKENS, weights=d, tmp_path=tmp_path) - theirs).max())
        assert err <= bound, f"{name}: max |ingot - transformers on the FP8 checkpoint| {err:.3g}"


@pytest.mark.parametrize("name", [n if n == DEFAULT_MODELS[0] else pytest.param(n, marks=BREADTH) for n in MODELS])
def test_cudasim_quantized_moe_matches_cpu(name, built, tmp_path):
    """kernels/cuda/moe.cuh's expert GEMV (decode) and GEMM tiles (prefill: 20 tokens) with each
    repacked type; act-order experts read X through ig_moe_pick's per-expert input order."""
    if SAN and name != DEFAULT_MODELS[0]:
        pytest.skip("the sanitizer pass runs one quantized MoE model on cudasim")
    d, _, ref = quantized_model(name)
    cpu = build(d, f"qm-{name}")
    sim = build(d, f"qm-{name}-cu", "--backend", "cuda", "--cudasim")
    want = logits(cpu, TOKENS, weights=d, tmp_path=tmp_path)
    for mode in [("--decode",)] if SAN else [(), ("--chunk", "7"), ("--decode",)]:
        got = logits(sim, TOKENS, *mode, weights=d, tmp_path=tmp_path)
        assert np.abs(got - want).max() <= 5e-5, f"{name} {mode}: max |cuda - cpu| {np.abs(got - want).max():.3g}"
        assert np.abs(got - ref).max() <= max(5e-5, TF_BOUND.get(MODELS[name][0], 0)), f"{name} {mode}: max |cuda - transformers| {np.abs(got - ref).max():.3g}"


@pytest.mark.full
@pytest.mark.skipif(SAN, reason="nvcc builds are the same under sanitizers")
def test_nvcc_builds_quantized_moe_without_spills(built):
    """nvcc compiles the act-order and FP8 MoE kernels (PERM instances of the expert GEMV/GEMM) for
    sm_80..sm_90 without spills."""
    from test_cuda_models import nvcc_check
    names = ("gptq4-act-order-mixtral", "fp8-block-deepseek2")
    nvcc_check([(quantized_model(n)[0], f"qm-{n}-cuda", ()) for n in names], "quant_moe_ptxas.txt")


# ------------------------------------------------------------------ loader

def test_rules_unit(built):
    """tests/c/test_quant_rules.c: list entries as whole components ("gate" is the router, not
    gate_proj), dynamic rules in order from the start of the name (Python's syntax through PCRE2:
    lookarounds, named groups, \\b, escapes in classes), and every refusal naming its rule or key."""
    r = run([built / "tests" / "test_quant_rules"])
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert r.stdout.strip().splitlines()[-1].endswith(" 0 failed")


E_IN, E_OUT = 64, 32


def expert_checkpoint(d, method, q, qcfg_extra=None, edit=None, experts=2, module="model.layers.0.mlp.experts.%d.up_proj",
                      extra_tensors=None):
    """A checkpoint of one layer's expert linears (and whatever extra_tensors adds); edit(e, parts) may change
    expert e's parts. Returns the dequantized weights per expert."""
    rng = np.random.default_rng(5)
    tensors, deq = {}, []
    for e in range(experts):
        w = (rng.standard_normal((E_OUT, E_IN)) * 0.05).astype(np.float32)
        parts, wd = quantize(method, w, q)
        if edit:
            parts = edit(e, dict(parts))
        tensors.update({f"{module % e}.{k}": v for k, v in parts.items()})
        deq.append(wd)
    tensors.update(extra_tensors or {})
    d.mkdir(parents=True, exist_ok=True)
    save(d / "model.safetensors", tensors)
    (d / "config.json").write_text(json.dumps({"quantization_config": {**quant_config(method, q), **(qcfg_extra or {})}}))
    return deq


def test_act_order_reorders_every_expert_of_a_layer(built, tmp_path):
    """Expert 0's g_idx mixes groups inside blocks of 32, expert 1's is in order: both are reordered
    (the MoE kernels read all of a layer's experts one way), each exactly its dequantized weights."""
    q = dict(bits=4, group_size=32, desc_act=True)

    def in_order(e, parts):
        if e == 1:  # the same codes stored without act-order: g_idx i // 32
            w = qr.dequantize_gptq(parts, 4)
            parts = qr.quantize_gptq(w, 4, 32)
        return parts
    d = tmp_path / "m"
    expert_checkpoint(d, "gptq", q, edit=in_order)
    tensors = load_parts(d)
    listed = {t["name"]: t for t in json.loads(inspect(built, d).stdout)["tensors"]}
    for e in range(2):
        name = f"model.layers.0.mlp.experts.{e}.up_proj"
        assert listed[name + ".weight"]["dtype"] == "q4_z" and listed[name + ".weight.perm"]["shape"] == [E_IN]
        g_idx = tensors[name + ".g_idx"]
        perm = dump(built, d, name + ".weight.perm", tmp_path).astype(np.int64)  # dumped as f32 values
        assert np.array_equal(perm, np.argsort(g_idx, kind="stable"))
        parts = {k: tensors[f"{name}.{k}"] for k in ("qweight", "qzeros", "scales", "g_idx")}
        want = qr.dequantize_gptq(parts, 4)[:, perm]
        got = dump(built, d, name + ".weight", tmp_path).reshape(E_OUT, E_IN)
        assert np.array_equal(got.view(np.uint32), np.ascontiguousarray(want).view(np.uint32))
    assert np.array_equal(dump(built, d, "model.layers.0.mlp.experts.1.up_proj.weight.perm", tmp_path), np.arange(E_IN))  # the stored order was already by group


def load_parts(d):
    from safetensors.numpy import load_file
    return load_file(d / "model.safetensors")


def test_rules_choose_what_is_quantized_and_how(built, tmp_path):
    """dynamic gives down_proj 8 bits in groups of 32 (the stored tensors only decode that way); a
    router named by modules_to_not_convert passes through; "gate" names the router, not gate_proj."""
    rng = np.random.default_rng(6)
    router = rng.standard_normal((4, E_IN)).astype(np.float32)
    q = dict(bits=4, group_size=64)
    parts8, w8 = quantize("gptq", (rng.standard_normal((E_IN, E_IN)) * 0.05).astype(np.float32), dict(bits=8, group_size=32))
    extra = {"model.layers.0.mlp.gate.weight": router,
             **{f"model.layers.0.mlp.experts.0.down_proj.{k}": v for k, v in parts8.items()}}
    d = tmp_path / "m"
    deq = expert_checkpoint(d, "gptq", q, module="model.layers.0.mlp.experts.%d.gate_proj", extra_tensors=extra, experts=1,
                            qcfg_extra={"modules_to_not_convert": ["gate"],
                                        "dynamic": {r"+:.*\.experts\.\d+\.down_proj$": {"bits": 8, "group_size": 32}}})
    listed = {t["name"]: t["dtype"] for t in json.loads(inspect(built, d).stdout)["tensors"]}
    assert listed == {"model.layers.0.mlp.gate.weight": "f32", "model.layers.0.mlp.experts.0.gate_proj.weight": "q4_z",
                      "model.layers.0.mlp.experts.0.down_proj.weight": "q8_z"}, listed
    got = dump(built, d, "model.layers.0.mlp.experts.0.down_proj.weight", tmp_path).reshape(E_IN, E_IN)
    assert np.array_equal(got, w8)
    got = dump(built, d, "model.layers.0.mlp.experts.0.gate_proj.weight", tmp_path).reshape(E_OUT, E_IN)
    assert np.array_equal(got, deq[0])


GPTQ = dict(bits=4, group_size=32)


def test_bad_expert_checkpoints(built, tmp_path):
    up = "model.layers.0.mlp.experts.%d.up_proj"
    drop = lambda k: lambda e, p: {n: v for n, v in p.items() if not (e == 1 and n == k)}  # noqa: E731
    expert_checkpoint(tmp_path / "a", "gptq", GPTQ, edit=drop("qzeros"))
    bad(built, tmp_path / "a", up % 1 + ".qweight", up % 1 + ".qzeros")
    expert_checkpoint(tmp_path / "a2", "awq", dict(group_size=32), edit=drop("scales"))
    bad(built, tmp_path / "a2", up % 1 + ".qweight", up % 1 + ".scales")

    def wider(e, p):  # expert 1 with twice the inputs
        if e == 1:
            w = np.random.default_rng(1).standard_normal((E_OUT, 2 * E_IN)).astype(np.float32)
            p = quantize("gptq", w, GPTQ)[0]
        return p
    expert_checkpoint(tmp_path / "b", "gptq", GPTQ, edit=wider)
    bad(built, tmp_path / "b", up % 1 + ".weight", "[32, 128]", up % 0 + ".weight", "[32, 64]", "same shape and type")

    def fp8_taller(e, p):
        if e == 1:
            w = np.random.default_rng(1).standard_normal((2 * E_OUT, E_IN)).astype(np.float32)
            p = quantize("fp8", w, dict(block=[128, 128]))[0]
        return p
    expert_checkpoint(tmp_path / "b2", "fp8", dict(block=[128, 128]), edit=fp8_taller)
    bad(built, tmp_path / "b2", up % 1 + ".weight", "f8_b32 [64, 64]", "same shape and type")
    # one expert stored in float among quantized ones: the layer's experts must share a type
    f32_expert = {up % 2 + ".weight": np.zeros((E_OUT, E_IN), np.float32)}
    expert_checkpoint(tmp_path / "b3", "gptq", GPTQ, extra_tensors=f32_expert)
    bad(built, tmp_path / "b3", up % 2 + ".weight", "f32", "q4_z", "same shape and type")
    # the configuration leaves a module unquantized that is stored quantized
    expert_checkpoint(tmp_path / "c", "gptq", GPTQ, qcfg_extra={"modules_to_not_convert": ["mlp.experts.1"]})
    bad(built, tmp_path / "c", up % 1 + ".qweight", "modules_to_not_convert", "'mlp.experts.1'", "unquantized")
    expert_checkpoint(tmp_path / "c2", "fp8", dict(block=[128, 128]), qcfg_extra={"ignored_layers": [up % 0]})
    bad(built, tmp_path / "c2", up % 0 + ".weight", "ignored_layers", "unquantized")
    expert_checkpoint(tmp_path / "c3", "gptq", GPTQ, qcfg_extra={"dynamic": {r"-:.*experts\.[0-9]+\.up_proj": {}}})
    bad(built, tmp_path / "c3", up % 0 + ".qweight", "quantization_config.dynamic", "unquantized")
    # dynamic bits that disagree with the stored words: the packed shapes say so
    expert_checkpoint(tmp_path / "c4", "gptq", GPTQ, qcfg_extra={"dynamic": {r".*\.up_proj": {"bits": 8}}})
    bad(built, tmp_path / "c4", ".scales'", "expected f16")
    # rules ingot cannot read
    for i, (extra, words) in enumerate([
            ({"dynamic": {"+:(unclosed": {}}}, ["dynamic rule '+:(unclosed'", "not a regular expression"]),
            ({"dynamic": {"+:.*up_proj": {"bits": 3}}}, ["dynamic rule '+:.*up_proj'", "bits must be 4 or 8"]),
            ({"dynamic": {"+:.*up_proj": {"group_size": 0}}}, ["group_size"]),
            ({"dynamic": ["-:x"]}, ["quantization_config.dynamic must be an object"]),
            ({"modules_to_not_convert": "gate"}, ["modules_to_not_convert must be a list"]),
            ({"ignored_layers": ["lm_head", 3]}, ["ignored_layers[1]"])]):
        expert_checkpoint(tmp_path / f"d{i}", "gptq", GPTQ, qcfg_extra=extra)
        bad(built, tmp_path / f"d{i}", *words)
    expert_checkpoint(tmp_path / "e", "awq", dict(group_size=32), qcfg_extra={"dynamic": {"-:x": {}}})
    bad(built, tmp_path / "e", "dynamic is a GPTQ field")


def test_model_binary_refuses_disagreeing_experts(built, tmp_path):
    """Through the generated load path: an expert whose qweight has another shape than its siblings,
    one line naming both tensors, exit 1."""
    d, _, _ = quantized_model(DEFAULT_MODELS[0])
    binary = build(d, f"qm-{DEFAULT_MODELS[0]}")
    tensors = load_parts(d)
    broken = tmp_path / "broken"
    shutil.copytree(d, broken)
    name = "model.layers.1.block_sparse_moe.experts.2.w3"
    w = np.random.default_rng(3).standard_normal((96, 64)).astype(np.float32)  # 96 outputs, not 64
    parts, _ = quantize("gptq", w, MODELS[DEFAULT_MODELS[0]][2])
    save(broken / "model.safetensors", {**tensors, **{f"{name}.{k}": v for k, v in parts.items()}})
    r = run([binary, "--weights", broken, "logits", "--tokens", "1,2,3", "--out", "/dev/null"])
    assert "Sanitizer" not in r.stderr and "runtime error" not in r.stderr, r.stderr
    assert r.returncode == 1 and r.stderr.count("\n") == 1, (r.returncode, r.stderr)
    for word in (name + ".weight", "[96, 64]", "same shape and type"):
        assert word in r.stderr, f"{word!r} not in {r.stderr!r}"
