"""Generated CPU models against Hugging Face transformers (tiny random Llama-family models).

Each fixture in tests/fixtures/tiny/ holds a checkpoint saved by transformers
and the f32 logits transformers computed for 32 teacher-forced tokens
(tests/fixtures/make_tiny_models.py). Every model is built fused and
--no-fuse and run three ways: the whole prompt in one step, in chunks of 7
(chunked prefill over the paged KV cache) and token by token (decode).

Tolerances: 1e-4 for F32 checkpoints (both sides compute in f32; the
observed error is ~1e-5, from summation order), 2e-3 for F16/BF16
checkpoints (the reference ran in f32 on the same rounded weights; our F16/BF16
kernels convert exactly, so the error budget is the same summation-order
noise plus f32 rounding of the converted products).
"""
import json
import subprocess

import numpy as np
import pytest

from conftest import ROOT
from modelbuild import TINY, build, logits, reference, smollm2_gguf

F32_MODELS = ["mha_tied_hd24", "gqa_untied_8h2kv", "gqa_tied_hd40", "mha_untied_hd32", "gqa_tied_hd16",
              "gqa_tied_hd16-sharded"]
HALF_MODELS = ["mha_untied_hd32-f16", "mha_untied_hd32-bf16", "gqa_tied_hd16-f16", "gqa_tied_hd16-bf16"]
MODES = {"prefill": (), "chunked": ("--chunk", "7"), "decode": ("--decode",)}


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("model", F32_MODELS + HALF_MODELS)
def test_logits_match_transformers(model, mode, fused, tmp_path, built):
    tokens, expected = reference(TINY / model)
    opts = () if fused else ("--no-fuse",)
    binary = build(TINY / model, f"t-{model}{'' if fused else '-nofuse'}", *opts)
    got = logits(binary, tokens, *MODES[mode], tmp_path=tmp_path)
    tol = 1e-4 if model in F32_MODELS else 2e-3
    err = np.abs(got - expected).max()
    assert err <= tol, f"{model} {mode}: max |delta| {err:.3g} > {tol}"


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_load_time_conversion(dtype, tmp_path, built):
    """--dtype f32 on an F16/BF16 checkpoint converts every matrix at load
    (exactly: widening loses nothing), so it must match transformers as
    tightly as an F32 checkpoint does. (The narrowing direction's rounding is
    tested exhaustively in tests/c/test_dtype.c.)"""
    model = f"mha_untied_hd32-{dtype}"
    tokens, expected = reference(TINY / model)
    binary = build(TINY / model, f"t-{model}-as-f32", "--dtype", "f32")
    got = logits(binary, tokens, tmp_path=tmp_path)
    assert np.abs(got - expected).max() <= 1e-4


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("model", ["gqa_tied_hd16", "mha_untied_hd32"])
def test_f16_kv_cache_tracks_transformers(model, mode, tmp_path, built):
    """--kv-dtype f16 stores K and V rounded to f16 (relative error at most
    2^-11) and computes in f32 as before. Each attention output is a convex
    combination of V rows, so it moves by at most 2^-11 of the V magnitudes,
    plus the softmax's response to the scores' rounding (|q|·|k|·2^-11); on
    these models that measures 1.7e-3 in the logits: bound 3e-3. The
    logits must also differ from the f32-KV build's (the cache really is
    f16)."""
    tokens, expected = reference(TINY / model)
    binary = build(TINY / model, f"t-{model}-kvf16", "--kv-dtype", "f16")
    got = logits(binary, tokens, *MODES[mode], tmp_path=tmp_path)
    err = np.abs(got - expected).max()
    exact = logits(build(TINY / model, f"t-{model}"), tokens, *MODES[mode], tmp_path=tmp_path)
    print(f"{model} {mode}: f16 KV max |delta| {err:.3g}")
    assert err <= 3e-3, f"{model} {mode}: max |delta| {err:.3g}"
    assert not np.array_equal(got, exact)


@pytest.mark.parametrize("mode", list(MODES))
def test_q8_kv_cache_tracks_transformers(mode, tmp_path, built):
    """--kv-dtype q8_0 stores each 32 values of a K or V row as int8 times an
    f16 scale d = max|x| / 127: each value moves by at most 0.5 d (+ d's own
    f16 rounding, 127 * 2^-11 d), about 4.4e-3 of its block's largest value,
    against f16's 2^-11 = 4.9e-4 of the value itself: some 9x f16's error for
    the largest values and more for small ones. f16 measures 1.7e-3 on these
    models; q8_0 measures 4.6e-2 (max |logit| 3.4): bound 0.1. The logits must
    differ from the f16-KV build's (the cache really is q8_0). SmolLM2's
    perplexity with it is in docs/building.md (+0.06%)."""
    model = "mha_untied_hd32"
    tokens, expected = reference(TINY / model)
    binary = build(TINY / model, f"t-{model}-kvq8", "--kv-dtype", "q8_0")
    got = logits(binary, tokens, *MODES[mode], tmp_path=tmp_path)
    err = np.abs(got - expected).max()
    print(f"{model} {mode}: q8_0 KV max |delta| {err:.3g}")
    assert err <= 0.1, f"{model} {mode}: max |delta| {err:.3g}"
    f16 = logits(build(TINY / model, f"t-{model}-kvf16", "--kv-dtype", "f16"), tokens, *MODES[mode], tmp_path=tmp_path)
    assert not np.array_equal(got, f16)


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("model", ["mha_untied_hd32", "deepseek2_rows96"])
def test_q4_kv_cache_tracks_transformers(model, mode, tmp_path, built):
    """--kv-dtype q4 stores each 32 values of a key row rotated (a Hadamard transform with sign
    flips), each 32 of a value row as they are, as 16 levels times an f16 scale
    (kernels/cpu/kc_kv_q4.h): 0.6% of a row's squared norm is lost (tests/c/test_kernels.c), a
    relative error of about 8% per value, where q8_0 leaves 0.3%. The logits move accordingly:
    0.56 on both models (max |logit| 3.4 and 3.8), bound 1.0. deepseek2_rows96 is MLA: its
    values are the cached key rows' first columns, rotated with them, so attention rotates its
    output back; without that the logits move by 4.5. The logits must differ from the
    f16-KV build's (the cache really is q4)."""
    path = TINY / model if (TINY / model).exists() else ROOT / "tests" / "fixtures" / "families" / model
    tokens, expected = reference(path)
    binary = build(path, f"t-{model}-kvq4", "--kv-dtype", "q4")
    got = logits(binary, tokens, *MODES[mode], tmp_path=tmp_path)
    err = np.abs(got - expected).max()
    print(f"{model} {mode}: q4 KV max |delta| {err:.3g} (max |logit| {np.abs(expected).max():.3g})")
    assert err <= 1.0, f"{model} {mode}: max |delta| {err:.3g}"
    f16 = logits(build(path, f"t-{model}-kvf16", "--kv-dtype", "f16"), tokens, *MODES[mode], tmp_path=tmp_path)
    assert not np.array_equal(got, f16)


@pytest.mark.parametrize("kv_dtype", ["q8_0", "q4"])
def test_block_kv_cache_needs_rows_of_whole_blocks(kv_dtype, tmp_path):
    """q8_0 and q4 rows are whole blocks of 32: a model with 16-wide heads is refused at build,
    naming the width; q4 is refused on the CUDA backend, whose kernels do not read it."""
    r = subprocess.run([str(ROOT / "ingot"), "build", str(TINY / "gqa_tied_hd16"), "--name", f"t-kv{kv_dtype}-refused",
                        "--kv-dtype", kv_dtype], capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and f"--kv-dtype {kv_dtype} caches rows in blocks of 32 values" in r.stderr, r.stderr
    assert "cached rows are 16 wide" in r.stderr, r.stderr
    if kv_dtype == "q4":
        r = subprocess.run([str(ROOT / "ingot"), "build", str(TINY / "mha_untied_hd32"), "--name", "t-kvq4-cuda-refused",
                            "--kv-dtype", "q4", "--backend", "cuda"], capture_output=True, text=True, timeout=300)
        assert r.returncode != 0 and "--kv-dtype q4 is a CPU option" in r.stderr, r.stderr


@pytest.mark.parametrize("dtype", ["q8_0", "q4_0", "q4_1"])
def test_quantized_builds_track_f32(dtype, tmp_path, built):
    """A --dtype q8_0/q4_0/q4_1 build of an f32 checkpoint quantizes at load.
    Its logits must stay close to the f32 reference (the bound is loose: it
    is quantization error, not arithmetic error) and must differ from it
    (the weights really are quantized)."""
    tokens, expected = reference(TINY / "gqa_tied_hd16")
    binary = build(TINY / "gqa_tied_hd16", f"t-gqa_tied_hd16-{dtype}", "--dtype", dtype)
    got = logits(binary, tokens, tmp_path=tmp_path)
    err = np.abs(got - expected).max()
    bound = {"q8_0": 0.15, "q4_0": 1.0, "q4_1": 1.0}[dtype]
    assert 0 < err <= bound, f"{dtype}: max |delta| {err:.3g}"


def info(binary):
    r = subprocess.run([str(binary), "--info"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_fused_launches_fewer_kernels(built):
    fused = info(build(TINY / "mha_tied_hd24", "t-mha_tied_hd24"))
    unfused = info(build(TINY / "mha_tied_hd24", "t-mha_tied_hd24-nofuse", "--no-fuse"))

    def launches(text):
        line = next(l for l in text.splitlines() if l.startswith("kernels:"))
        return int(line.split()[1])
    # 2 layers: embed + 5 per layer + head (fused) vs one kernel per op.
    assert launches(fused) == 1 + 5 * 2 + 1
    assert launches(unfused) > 2 * launches(fused)
    assert "fused" in fused and "unfused" in unfused


def test_generated_source_is_traceable(built):
    build(TINY / "mha_tied_hd24", "t-mha_tied_hd24")
    from modelbuild import ROOT
    src = (ROOT / "build" / "t-mha_tied_hd24" / "gen" / "model.c").read_text()
    assert src.startswith("/* DO NOT EDIT: generated by ingot-generator")
    assert "models.lua entry 'llama'" in src
    assert "tests/fixtures/tiny/mha_tied_hd24" in src
    models_lua = (ROOT / "models.lua").read_text().splitlines()
    # every models.lua:N comment quotes line N of models.lua
    import re
    refs = re.findall(r"/\* models\.lua:(\d+)  (.*?) \*/", src)
    assert len(refs) > 10
    for line, text in refs:
        assert models_lua[int(line) - 1].strip().replace("*/", "* /") == text


def test_generation_is_deterministic_per_input(built, tmp_path):
    """The same inputs give the same bytes (no timestamps), so rebuilds are no-ops."""
    from modelbuild import ROOT
    build(TINY / "gqa_tied_hd40", "t-gqa_tied_hd40")
    path = ROOT / "build" / "t-gqa_tied_hd40" / "gen" / "model.c"
    before = path.read_bytes()
    mtime = path.stat().st_mtime_ns
    r = subprocess.run(["lua5.4", str(ROOT / "generator" / "main.lua"), "--inspect",
                        str(ROOT / "build" / "t-gqa_tied_hd40" / "inspect.json"), "--source",
                        str(TINY / "gqa_tied_hd40"), "--name", "t-gqa_tied_hd40", "--out", str(path.parent),
                        "--hf-config", str(TINY / "gqa_tied_hd40" / "config.json"), "--kv-dtype", "f32"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert path.read_bytes() == before and path.stat().st_mtime_ns == mtime


@pytest.mark.parametrize("max_tokens", [8, 1])
def test_small_step_builds_match_transformers(max_tokens, tmp_path, built):
    """A build planned for few tokens per step chunks every longer input: its
    logits match transformers like the default build's (a 32-token prompt in
    32 / max_tokens steps), and perplexity and batch run on it with the
    default build's results."""
    model = "gqa_untied_8h2kv"
    tokens, expected = reference(TINY / model)
    binary = build(TINY / model, f"t-{model}-mt{max_tokens}", "--max-tokens", str(max_tokens))
    for mode in MODES.values():
        got = logits(binary, tokens, *mode, tmp_path=tmp_path)
        assert np.abs(got - expected).max() <= 1e-4
    default = build(TINY / model, f"t-{model}")
    ids = tmp_path / "ids.txt"
    ids.write_text(" ".join(map(str, tokens * 3)))
    ppl = []
    for b in (binary, default):
        r = subprocess.run([str(b), "perplexity", "--ids", str(ids), "--ctx", "40"], capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        ppl.append(r.stdout + r.stderr)
    from modelbuild import run_batch
    reqs = [{"prompt": tokens[:20 + i], "max_tokens": 6, "ignore_eos": True} for i in range(3)]
    small, _ = run_batch(binary, reqs, tmp_path=tmp_path)
    full, _ = run_batch(default, reqs, tmp_path=tmp_path)
    assert [r["tokens"] for r in small] == [r["tokens"] for r in full]


def test_small_step_build_generates_and_serves(tmp_path, built):
    """The real SmolLM2 built for 8 tokens per step: generate and serve chunk
    their prompts and answer as the default build does (greedy)."""
    import requests
    from serverproc import ServerProc
    gguf = smollm2_gguf()
    small = build(gguf, "smollm2-mt8", "--max-tokens", "8")
    default = build(gguf, "smollm2")
    prompt = "The three primary colors are red, yellow and"
    outs = []
    for b in (small, default):
        r = subprocess.run([str(b), "generate", "-p", prompt, "-n", "6"], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        outs.append(r.stdout)
    assert outs[0] == outs[1]
    with ServerProc(small, "--kv-blocks", "32") as srv:
        r = requests.post(srv.url + "/v1/completions", json={"model": "smollm2-mt8", "prompt": prompt, "max_tokens": 6,
                                                             "temperature": 0}, timeout=300)
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["text"] == outs[0].rstrip("\n")  # generate ends its text with a newline


def test_gguf_rope_freqs_match_llamacpp(tmp_path, built):
    """A GGUF carrying rope_freqs (Llama 3.1's RoPE scaling as a tensor of
    frequency divisors, no scaling keys in the metadata): the llama entry
    reads it into its RoPE table, and the logits match llama.cpp's on the
    same F32 file within 1e-4 (f32 weights and arithmetic on both sides, as
    the F32 K-quant fixture matches to 1e-5; the factors themselves move the
    logits by up to 4.5, tests/fixtures/rope_freqs/reference.json)."""
    from modelbuild import FIXTURES
    d = FIXTURES / "rope_freqs"
    ref = json.loads((d / "reference.json").read_text())
    want = np.fromfile(d / ref["logits_file"], dtype="<f4").reshape(ref["shape"])
    binary = build(d / "model.gguf", "t-rope-freqs")
    for mode in MODES.values():
        got = logits(binary, ref["tokens"], *mode, tmp_path=tmp_path)
        err = float(np.abs(got - want).max())
        assert err <= 1e-4, f"max |delta| {err:.3g} against llama.cpp"
    assert ref["max_abs_diff_logits_without_rope_freqs"] > 0.05
