"""GPTQ, AWQ and FP8 safetensors checkpoints (runtime/load/quant_ckpt.c).

Loader: single-linear checkpoints written with tests/quant_ref.py for every
bit width, group size, zero-point convention, act-order and scale layout;
ingot-inspect must list each linear as one repacked `.weight` of the
expected type and dump exactly (bit for bit) the weights quant_ref's
dequantizer reads from the same tensors. Bad checkpoints fail with one line
naming the tensor or key.

Models: tiny random Llama / Qwen2 models whose linears are quantized into
each format; ingot's logits (prefill, chunked and token by token) against
transformers running the dequantized weights in f32: the same weights, so
the bound is summation order (2e-5; measured 3e-6 to 5e-6).
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

LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
CACHE = ROOT / "build" / "_quant_ckpt"  # checkpoints shared by the test workers (written once, under a lock)


def save(path, tensors):
    """safetensors through torch (numpy has no float8): uint8 arrays named in `fp8` become F8_E4M3."""
    import torch
    from safetensors.torch import save_file
    out = {}
    for k, v in tensors.items():
        t = torch.from_numpy(np.ascontiguousarray(v))
        if k.endswith(".weight") and v.dtype == np.uint8:
            t = t.view(torch.float8_e4m3fn)
        out[k] = t
    save_file(out, str(path))


def quantize(method, w, q):
    """The tensors one linear stores (suffix -> array), and the f32 weight they define."""
    if method == "gptq":
        t = qr.quantize_gptq(w, q["bits"], q["group_size"], sym=q.get("sym", False), v2=q.get("v2", False),
                             act_order=q.get("desc_act", False))
        return t, qr.dequantize_gptq(t, q["bits"], v2=q.get("v2", False))
    if method == "awq":
        t = qr.quantize_awq(w, q["group_size"])
        return t, qr.dequantize_awq(t, q["group_size"])
    block = q.get("block")
    t = qr.quantize_fp8(w, block=tuple(block) if block else None)
    return t, qr.dequantize_fp8(t, block=tuple(block) if block else None)


def quant_config(method, q):
    if method == "gptq":
        return {"quant_method": "gptq", "bits": q["bits"], "group_size": q["group_size"],
                "desc_act": q.get("desc_act", False), "sym": q.get("sym", False),
                "checkpoint_format": "gptq_v2" if q.get("v2") else "gptq"}
    if method == "awq":
        return {"quant_method": "awq", "bits": 4, "group_size": q["group_size"], "zero_point": True, "version": "gemm"}
    cfg = {"quant_method": "fp8", "activation_scheme": "dynamic"}
    if q.get("block"):
        cfg["weight_block_size"] = list(q["block"])
    return cfg


def write_linear(d, method, q, w, prefix="layer"):
    """A one-linear checkpoint folder; returns the f32 weight it defines."""
    d.mkdir(parents=True, exist_ok=True)
    parts, deq = quantize(method, w, q)
    save(d / "model.safetensors", {f"{prefix}.{k}": v for k, v in parts.items()})
    (d / "config.json").write_text(json.dumps({"quantization_config": quant_config(method, q)}))
    return deq


def inspect(built, path, *args):
    return run([built / "tools" / "ingot-inspect", path, *args])


def dump(built, path, name, tmp_path):
    out = tmp_path / "dump.f32"
    r = run([built / "tools" / "ingot-inspect", path, "--dump", name, out])
    assert r.returncode == 0, r.stderr
    return np.fromfile(out, dtype="<f4")


# ------------------------------------------------------------------ kernels

@pytest.mark.parametrize("march", ["native", "haswell", "x86-64"], ids=["native", "avx2", "portable"])
def test_kernels(march, built, tmp_path):
    """tests/c/test_zquant_kernels.c: kc_mmx_q4_z/q8_z/f8_b32 decode exactly dtype.c's weights and multiply
    within summation order; built by make for this CPU, and here again for AVX2 and for no SIMD."""
    binary = built / "tests" / "test_zquant_kernels"
    if march != "native":
        if SAN:
            pytest.skip("the sanitizer pass runs the make-built binary")
        binary = tmp_path / f"test_zquant_kernels-{march}"
        inc = [f"-I{ROOT / d}" for d in ("runtime/core", "runtime/load", "kernels/cpu", "tests/c")]
        r = run(["cc", "-std=c11", "-D_GNU_SOURCE", "-O2", f"-march={march}", *inc, ROOT / "tests/c/test_zquant_kernels.c",
                 "-o", binary, built / "libingot.a", "-lcjson", "-lpcre2-8", "-lm", "-pthread"])
        assert r.returncode == 0, r.stderr
    r = run([binary])
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert r.stdout.strip().splitlines()[-1].endswith(" 0 failed")


# ------------------------------------------------------------------ loader

LOADER_CASES = {
    # name: (method, quantization, expected ingot dtype)
    "gptq4-g32": ("gptq", dict(bits=4, group_size=32), "q4_z"),
    "gptq4-g64-sym": ("gptq", dict(bits=4, group_size=64, sym=True), "q4_z"),
    "gptq4-g128-v2": ("gptq", dict(bits=4, group_size=128, v2=True), "q4_z"),
    "gptq4-gall": ("gptq", dict(bits=4, group_size=-1), "q4_z"),
    "gptq8-g32": ("gptq", dict(bits=8, group_size=32), "q8_z"),
    "gptq8-g128-sym": ("gptq", dict(bits=8, group_size=128, sym=True), "q8_z"),
    "gptq8-gall-v2": ("gptq", dict(bits=8, group_size=-1, v2=True), "q8_z"),
    "gptq4-g64-act-order": ("gptq", dict(bits=4, group_size=64, desc_act=True), "q4_z"),
    "gptq8-g32-act-order": ("gptq", dict(bits=8, group_size=32, desc_act=True, sym=True), "q8_z"),
    "gptq4-g48-act-order": ("gptq", dict(bits=4, group_size=48, desc_act=True), "f32"),
    "awq-g32": ("awq", dict(group_size=32), "q4_z"),
    "awq-g64": ("awq", dict(group_size=64), "q4_z"),
    "awq-g128": ("awq", dict(group_size=128), "q4_z"),
    "fp8-block128": ("fp8", dict(block=[128, 128]), "f8_b32"),
    "fp8-block32x64": ("fp8", dict(block=[32, 64]), "f8_b32"),
    "fp8-tensor": ("fp8", dict(), "f8_b32"),
}


@pytest.mark.parametrize("case", list(LOADER_CASES))
def test_repacked_weights_are_exact(case, built, tmp_path):
    method, q, dtype = LOADER_CASES[case]
    rng = np.random.default_rng(abs(hash(case)) % 2**32)
    w = (rng.standard_normal((72, 256)) * 0.05).astype(np.float32)  # 72 rows: partial 128-blocks, 9 AWQ words
    expect = write_linear(tmp_path / "m", method, q, w)
    assert np.abs(expect - w).max() < 0.05  # the quantizer is sane: the oracle is not trivially all zeros
    doc = json.loads(inspect(built, tmp_path / "m").stdout)
    listed = {t["name"]: t for t in doc["tensors"]}
    assert listed["layer.weight"] == {"name": "layer.weight", "dtype": dtype, "shape": [72, 256],
                                      "nbytes": listed["layer.weight"]["nbytes"]}
    act_order = q.get("desc_act") and dtype != "f32"
    assert sorted(listed) == ["layer.weight"] + (["layer.weight.perm"] if act_order else [])
    if act_order:  # the inputs sorted by group: the weight's columns in that order, and the order itself
        g_idx = qr.quantize_gptq(w, q["bits"], q["group_size"], sym=q.get("sym", False), act_order=True)["g_idx"]
        perm = np.argsort(g_idx, kind="stable")
        assert listed["layer.weight.perm"]["dtype"] == "i32" and listed["layer.weight.perm"]["shape"] == [256]
        assert np.array_equal(dump(built, tmp_path / "m", "layer.weight.perm", tmp_path), perm)
        expect = np.ascontiguousarray(expect[:, perm])
    got = dump(built, tmp_path / "m", "layer.weight", tmp_path).reshape(72, 256)
    assert np.array_equal(got.view(np.uint32), expect.view(np.uint32)), np.abs(got - expect).max()


def test_unquantized_tensors_pass_through(built, tmp_path):
    """Norms, embeddings and an unquantized LM head stay as stored beside the repacked linears."""
    w = np.random.default_rng(1).standard_normal((64, 64)).astype(np.float32)
    parts, _ = quantize("gptq", w, dict(bits=4, group_size=32))
    d = tmp_path / "m"
    d.mkdir()
    save(d / "model.safetensors", {"lm_head.weight": w, "norm.weight": np.ones(64, np.float32),
                                   **{f"l.{k}": v for k, v in parts.items()}})
    (d / "config.json").write_text(json.dumps({"quantization_config": quant_config("gptq", dict(bits=4, group_size=32))}))
    doc = json.loads(inspect(built, d).stdout)
    assert sorted((t["name"], t["dtype"]) for t in doc["tensors"]) == [
        ("l.weight", "q4_z"), ("lm_head.weight", "f32"), ("norm.weight", "f32")]
    assert np.array_equal(dump(built, d, "lm_head.weight", tmp_path), w.reshape(-1))


def bad(built, path, *keywords):
    r = inspect(built, path)
    assert "Sanitizer" not in r.stderr and "runtime error" not in r.stderr, r.stderr
    assert r.returncode == 1 and r.stdout == "", (r.returncode, r.stderr)
    assert r.stderr.count("\n") == 1, r.stderr
    for k in keywords:
        assert k in r.stderr, f"{k!r} not in {r.stderr!r}"


def gptq_parts(bits=4, group_size=32, out=64, n_in=128):
    w = np.random.default_rng(2).standard_normal((out, n_in)).astype(np.float32)
    parts, _ = quantize("gptq", w, dict(bits=bits, group_size=group_size))
    return parts


def write_parts(d, parts, qcfg, prefix="l"):
    d.mkdir(parents=True, exist_ok=True)
    save(d / "model.safetensors", {f"{prefix}.{k}": v for k, v in parts.items()})
    (d / "config.json").write_text(json.dumps({"quantization_config": qcfg} if qcfg is not None else {}))
    return d


GPTQ4 = {"quant_method": "gptq", "bits": 4, "group_size": 32}


def test_bad_gptq(built, tmp_path):
    p = gptq_parts()
    bad(built, write_parts(tmp_path / "a", {**p, "qweight": p["qweight"][:-4]}, GPTQ4), "l.scales", "[3, 64]")
    bad(built, write_parts(tmp_path / "a2", {**p, "qweight": p["qweight"][:-1]}, GPTQ4), "l.qweight", "120 inputs")
    bad(built, write_parts(tmp_path / "b", {**p, "qzeros": p["qzeros"][:, :-1]}, GPTQ4), "l.qzeros", "[4, 8]")
    g = p["g_idx"].copy()
    g[5] = 4
    bad(built, write_parts(tmp_path / "c", {**p, "g_idx": g}, GPTQ4), "l.g_idx", "entry 5 is group 4")
    g[5] = -1
    bad(built, write_parts(tmp_path / "c2", {**p, "g_idx": g}, GPTQ4), "l.g_idx", "entry 5 is group -1")
    s = p["scales"].copy()
    s[1, 3] = np.float16(np.nan)
    bad(built, write_parts(tmp_path / "d", {**p, "scales": s}, GPTQ4), "l.scales", "group 1, output 3", "not finite")
    s[1, 3] = np.float16(np.inf)
    bad(built, write_parts(tmp_path / "d2", {**p, "scales": s}, GPTQ4), "l.scales", "not finite")
    bad(built, write_parts(tmp_path / "e", {k: v for k, v in p.items() if k != "qzeros"}, GPTQ4), "l.qweight", "l.qzeros")
    bad(built, write_parts(tmp_path / "f", {**p, "scales": p["scales"].astype(np.float32)}, GPTQ4), "l.scales", "f16")
    bad(built, write_parts(tmp_path / "g", p, {**GPTQ4, "bits": 3}), "bits", "4 or 8")
    bad(built, write_parts(tmp_path / "h", p, {**GPTQ4, "quant_method": "hqq"}), "quant_method 'hqq'", "not supported")
    bad(built, write_parts(tmp_path / "i", p, {**GPTQ4, "group_size": 0}), "group_size")
    bad(built, write_parts(tmp_path / "j", p, {**GPTQ4, "checkpoint_format": "marlin"}), "checkpoint_format")
    bad(built, write_parts(tmp_path / "k", p, None), "tensor 'l.", "is i32", "quantization_config")
    narrow = gptq_parts(n_in=48 * 8 // 8, group_size=16)
    bad(built, write_parts(tmp_path / "l", narrow, {**GPTQ4, "group_size": 16}), "l.qweight", "not a multiple of 32")
    bad(built, write_parts(tmp_path / "m", {**p, "extra.qzeros": p["qzeros"].copy()}, GPTQ4), "extra.qzeros", "no quantized linear")


def test_bad_awq(built, tmp_path):
    w = np.random.default_rng(3).standard_normal((64, 128)).astype(np.float32)
    p, _ = quantize("awq", w, dict(group_size=32))
    awq = {"quant_method": "awq", "bits": 4, "group_size": 32, "version": "gemm", "zero_point": True}
    bad(built, write_parts(tmp_path / "a", {**p, "qzeros": p["qzeros"][:-1]}, awq), "l.qzeros", "[4, 8]")
    bad(built, write_parts(tmp_path / "b", p, {**awq, "version": "gemv"}), "version 'gemv'")
    bad(built, write_parts(tmp_path / "c", p, {**awq, "bits": 8}), "bits", "awq")
    bad(built, write_parts(tmp_path / "d", p, {**awq, "zero_point": False}), "zero_point")
    bad(built, write_parts(tmp_path / "e", p, {**awq, "group_size": 48}), "l.qweight", "group_size 48")


def test_bad_fp8(built, tmp_path):
    w = np.random.default_rng(4).standard_normal((64, 128)).astype(np.float32)
    fp8 = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [32, 64]}
    p, _ = quantize("fp8", w, dict(block=[32, 64]))
    s = p["weight_scale_inv"].copy()
    s[1, 0] = np.inf
    bad(built, write_parts(tmp_path / "a", {**p, "weight_scale_inv": s}, fp8), "l.weight_scale_inv", "block row 1", "not finite")
    bad(built, write_parts(tmp_path / "b", {**p, "weight_scale_inv": s[:1]}, fp8), "l.weight_scale_inv", "[2, 2]")
    c = p["weight"].copy()
    c[3, 7] = 0x7f
    bad(built, write_parts(tmp_path / "c", {**p, "weight": c}, fp8), "l.weight", "[3, 7]", "NaN")
    bad(built, write_parts(tmp_path / "d", {"weight": p["weight"]}, fp8), "l.weight", "weight_scale_inv")
    bad(built, write_parts(tmp_path / "e", p, {**fp8, "activation_scheme": "static"}), "activation_scheme")
    bad(built, write_parts(tmp_path / "f", p, {**fp8, "weight_block_size": [128, 48]}), "weight_block_size", "multiple of 32")
    bad(built, write_parts(tmp_path / "g", p, None), "l.weight", "f8_e4m3", "quantization_config")
    pt, _ = quantize("fp8", w, dict())
    per_tensor = {"quant_method": "fp8", "activation_scheme": "dynamic"}
    bad(built, write_parts(tmp_path / "h", {**pt, "weight_scale": np.ones(3, np.float32)}, per_tensor),
        "l.weight_scale", "one scale")
    bad(built, write_parts(tmp_path / "i", {**pt, "input_scale": np.ones((), np.float32)}, per_tensor),
        "l.input_scale", "static")


# ------------------------------------------------------------------ models

MODELS = {
    # name: (architecture, method, quantization)
    "gptq4-llama": ("llama", "gptq", dict(bits=4, group_size=32)),
    "awq-qwen2": ("qwen2", "awq", dict(group_size=64)),
    "fp8-llama": ("llama", "fp8", dict(block=[128, 128])),
    "gptq8-sym-v2-qwen2": ("qwen2", "gptq", dict(bits=8, group_size=-1, sym=True, v2=True)),
    "gptq4-act-order-llama": ("llama", "gptq", dict(bits=4, group_size=64, desc_act=True)),
    "gptq4-g128-llama": ("llama", "gptq", dict(bits=4, group_size=128)),
    "fp8-tensor-qwen2": ("qwen2", "fp8", dict()),
}
DEFAULT_MODELS = ("gptq4-act-order-llama", "awq-qwen2", "fp8-llama")
TOKENS = [1, 17, 42, 99, 5, 250, 7, 31, 64, 128, 200, 3, 77, 12, 190, 45, 8, 222, 9, 60]


def tiny_model(arch):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
    common = dict(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=128,
                  initializer_range=0.1, tie_word_embeddings=False, rms_norm_eps=1e-5)
    torch.manual_seed(7)
    if arch == "llama":
        m = LlamaForCausalLM(LlamaConfig(**common))
    else:
        m = Qwen2ForCausalLM(Qwen2Config(**common, use_sliding_window=False))
    return m.float().eval()


def quantized_model(name):
    """The checkpoint folder of MODELS[name] (written once) and transformers' logits for TOKENS with its
    dequantized weights."""
    import torch
    arch, method, q = MODELS[name]
    model = tiny_model(arch)
    state = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    stored, deq = {}, {}
    for k, v in state.items():
        prefix = k[:-len(".weight")]
        if k.endswith(".weight") and prefix.split(".", 3)[-1] in LINEARS:
            parts, w = quantize(method, v, q)
            stored.update({f"{prefix}.{s}": t for s, t in parts.items()})
            deq[k] = w
        elif k.endswith(".bias"):  # checkpoints keep biases in f16
            stored[k] = v.astype(np.float16)
            deq[k] = stored[k].astype(np.float32)
        else:
            stored[k] = deq[k] = v
    d = CACHE / name
    with locked(f"quant-ckpt-{name}"):
        if not (d / "config.json").exists():
            tmp = CACHE / f".{name}-{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            save(tmp / "model.safetensors", stored)
            cfg = json.loads(model.config.to_json_string())
            cfg["architectures"] = [type(model).__name__]
            cfg["quantization_config"] = quant_config(method, q)
            (tmp / "config.json").write_text(json.dumps(cfg))
            tmp.rename(d)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in deq.items()})
    with torch.no_grad():
        ref = model(torch.tensor([TOKENS])).logits[0].numpy()
    return d, ref


@pytest.mark.parametrize("name", [n if n in DEFAULT_MODELS else pytest.param(n, marks=BREADTH) for n in MODELS])
def test_quantized_model_matches_transformers(name, built, tmp_path):
    d, ref = quantized_model(name)
    binary = build(d, f"qc-{name}")
    r = run([binary, "--no-cast", "--info"])  # the load from the checkpoint (the logits below: from the cast)
    assert r.returncode == 0, r.stderr
    dtype = {"gptq": "q8_z" if MODELS[name][2].get("bits") == 8 else "q4_z", "awq": "q4_z", "fp8": "f8_b32"}[MODELS[name][1]]
    assert dtype in r.stdout, r.stdout
    assert re.search(r"\(\d+ repacked from the checkpoint's quantized format at open[,)]", r.stdout), r.stdout
    modes = [("--decode",)] if SAN else [(), ("--chunk", "7"), ("--decode",)]
    for mode in modes:
        got = logits(binary, TOKENS, *mode, weights=d, tmp_path=tmp_path)
        err = np.abs(got - ref).max()
        assert err <= 2e-5, f"{name} {mode}: max |delta| {err:.3g}"


def test_model_binary_refuses_bad_quantized_checkpoints(built, tmp_path):
    """Through the generated load path: one line naming the tensor, exit 1."""
    from safetensors.numpy import load_file
    d, _ = quantized_model("gptq4-act-order-llama")
    binary = build(d, "qc-gptq4-act-order-llama")

    def fails(weights, *words):
        r = run([binary, "--weights", weights, "logits", "--tokens", "1,2,3", "--out", "/dev/null"])
        assert "Sanitizer" not in r.stderr and "runtime error" not in r.stderr, r.stderr
        assert r.returncode == 1 and r.stderr.count("\n") == 1, (r.returncode, r.stderr)
        for w in words:
            assert w in r.stderr, f"{w!r} not in {r.stderr!r}"

    tensors = load_file(d / "model.safetensors")
    g = tensors["model.layers.1.mlp.down_proj.g_idx"].copy()
    g[200] = 99
    bad_dir = tmp_path / "bad"
    shutil.copytree(d, bad_dir)
    save(bad_dir / "model.safetensors", {**tensors, "model.layers.1.mlp.down_proj.g_idx": g})
    fails(bad_dir, "model.layers.1.mlp.down_proj.g_idx", "entry 200 is group 99")
    # the configuration says 8 bits over 4-bit words: the packed shapes disagree
    eight = tmp_path / "eight"
    shutil.copytree(d, eight)
    cfg = json.loads((d / "config.json").read_text())
    cfg["quantization_config"]["bits"] = 8
    (eight / "config.json").write_text(json.dumps(cfg))
    fails(eight, "model.layers.", ".scales': expected f16", "groups of 64 inputs")
    # the same model without act-order: its weights are not reordered, so the binary's orders are missing
    fails(quantized_model("gptq4-llama")[0], "model.layers.0.self_attn.q_proj.weight.perm' not found", "models.lua:")


# ------------------------------------------------------------------ CUDA

@pytest.mark.parametrize("name", [n if n == DEFAULT_MODELS[0] else pytest.param(n, marks=BREADTH) for n in MODELS])
def test_cudasim_quantized_model_matches_cpu(name, built, tmp_path):
    """The CUDA backend's kernels (GEMV for decode-sized steps, the shared-memory GEMM tiles for
    prefill) on cudasim against the CPU backend and transformers: the same weights, summation order
    only (measured within 1e-5 of both). The default tier runs one model (act-order q4_z: the GEMV
    and GEMM read X through the weights' input order); tests/cuda_kernels/
    t_gemv.cu runs every repacked type's GEMV and GEMM against the CPU kernels on cudasim."""
    if SAN and name != DEFAULT_MODELS[0]:
        pytest.skip("the sanitizer pass runs one quantized model on cudasim")
    d, ref = quantized_model(name)
    cpu = build(d, f"qc-{name}")
    sim = build(d, f"qc-{name}-cu", "--backend", "cuda", "--cudasim")
    want = logits(cpu, TOKENS, weights=d, tmp_path=tmp_path)
    for mode in [("--decode",)] if SAN else [(), ("--chunk", "7"), ("--decode",)]:
        got = logits(sim, TOKENS, *mode, weights=d, tmp_path=tmp_path)
        assert np.abs(got - want).max() <= 5e-5, f"{name} {mode}: max |cuda - cpu| {np.abs(got - want).max():.3g}"
        assert np.abs(got - ref).max() <= 5e-5, f"{name} {mode}: max |cuda - transformers| {np.abs(got - ref).max():.3g}"


@pytest.mark.full
@pytest.mark.skipif(SAN, reason="nvcc builds are the same under sanitizers")
def test_nvcc_builds_quantized_models_without_spills(built):
    """nvcc compiles the generated kernels of each format's model without spills, for sm_86 and
    sm_90 (make test-full: sm_80/86/89/90; the kernel library's instances at model shapes are
    checked in test_cuda_kernels.py), and NVRTC compiles them for compute_80 and compute_90."""
    import re
    from test_cuda_models import cuda_build, nvcc_check
    nvcc_check([(quantized_model(n)[0], f"qc-{n}-cuda", ()) for n in DEFAULT_MODELS], "quant_ckpt_ptxas.txt")
    for n in DEFAULT_MODELS:  # and NVRTC compiles the same generated sources (what the binary does on a GPU)
        binary = cuda_build(quantized_model(n)[0], f"qc-{n}-cuda")
        r = run([binary, "--info"], env=dict(os.environ, INGOT_NVRTC_CHECK="80,90"))
        for arch in ("compute_80", "compute_90"):
            m = re.search(r"nvrtc: %s: ok, (\d+) bytes of PTX, (\d+) of (\d+) kernels" % arch, r.stderr)
            assert m and m.group(2) == m.group(3), (n, r.stderr[-2000:])
