"""Every family's GGUF as llama.cpp's own converter writes it (tests/fixtures/gguf_families,
made by make_family_ggufs.py: convert_hf_to_gguf.py of the installed llama-cpp-python's sources,
then llama_model_quantize to Q8_0) casts through the models.lua entry's GGUF names and metadata
keys, and computes what transformers and llama.cpp compute.

F32 file: ingot against transformers within 1e-4 (the same f32 weights; the converter's exact
transforms — permuted q/k rows, Gemma's norm weights stored as 1 + w — are undone or matched by
the description), in prefill and in decode; llama.cpp itself reads the same file to within the
recorded max |delta| (<= 1e-3, asserted when the fixture was made).
Q8_0 file (the default tier runs three families; make test-full all): the same weights on both
sides, llama.cpp rounding activations to int8 as well. Bound, by the triangle inequality through
transformers: |ingot - llama.cpp| <= |ingot Q8_0 - ingot F32| + 1e-4 + |llama.cpp Q8_0 -
transformers| (each measured on the same tokens); greedy tokens agree except at near-ties (the
two candidates within 2 max|delta| in llama.cpp's logits).

DeepSeek-V2's file stores kv_b_proj in two parts (attn_k_b, each head's block transposed, and
attn_v_b) that the loader joins at load: its Q8_0 file (F32: make test-full) also runs on the CUDA
backend under cudasim, against the CPU build of the same file (prefill, chunks of 5, decode). A
deepseek2 file whose experts are gated by a sigmoid (DeepSeek-V3's) is refused at the line of
models.lua that says so."""
import hashlib
import json
import sys

import numpy as np
import pytest

import modelbuild
from conftest import BREADTH, OBJDIR, ROOT, SAN, fixture_file, in_tree, run

sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
from make_kquant_models import PRESETS  # noqa: E402  (the presets llama.cpp made of each family)

FIXTURES = ROOT / "tests" / "fixtures" / "gguf_families"
NAMES = sorted(p.name for p in FIXTURES.iterdir() if (p / "reference.json").exists())
Q8_DEFAULT = {"gemma3", "qwen3moe", "deepseek2"}  # the rest: make test-full


def fixture(name):
    d = FIXTURES / name
    ref = json.loads((d / "reference.json").read_text())
    # llama.cpp's logits on a Q8_0 file Q8_DEFAULT leaves out are remade with it (regenerate.py --oracles)
    logits = {k: np.fromfile(d / f, dtype="<f4").reshape(ref["shape"]) for k, f in ref["logits"].items()
              if (d / f).exists()}
    for kind, f in ref["files"].items():  # the Q8_0 files Q8_DEFAULT leaves out: regenerate.py --oracles
        if (d / f).exists() or kind == "f32":
            assert hashlib.sha256((d / f).read_bytes()).hexdigest() == ref["sha256"][kind], f"{name}/{f} changed"
    return d, ref, logits


def test_every_family_has_a_gguf():
    """Each models.lua entry with a GGUF architecture that llama.cpp converts has a fixture here
    (Llama and Mistral: SmolLM2 and the K-quant fixtures; Mixtral: test_families' stacked experts)."""
    assert set(NAMES) >= {"qwen2", "qwen3", "gemma2", "gemma3", "olmo2", "granite", "smollm3", "qwen3moe", "phi3", "deepseek2",
                          "gptneox", "stablelm", "gptoss", "lfm2", "granitehybrid", "qwen3next"}


@pytest.mark.parametrize("name", NAMES)
def test_f32_gguf_matches_transformers(name, tmp_path, built):
    d, ref, logits = fixture(name)
    binary = modelbuild.build(d / ref["files"]["f32"], f"gg-{name}")
    info = run([binary, "--info"]).stdout
    assert f"architecture:    {ref['family']}" in info, info
    for mode in ((), ("--decode",)):
        got = modelbuild.logits(binary, ref["tokens"], *mode, tmp_path=tmp_path)
        err = float(np.abs(got - logits["transformers"]).max())
        assert err <= 1e-4, f"{name} {mode}: max |ingot - transformers| = {err:.3g}"
        err = float(np.abs(got - logits["llamacpp_f32"]).max())
        assert err <= 1e-4 + ref["max_delta_llamacpp_f32_transformers"], f"{name} {mode}: vs llama.cpp {err:.3g}"


def assert_quantized_matches_llamacpp(name, got, llama, tmp_path):
    """ingot's logits `got` on a quantized file against llama.cpp's `llama` on it, through
    transformers (the triangle bound of the module's docstring), greedy tokens agreeing but at
    near-ties."""
    d, ref, logits = fixture(name)
    f32 = modelbuild.logits(modelbuild.build(d / ref["files"]["f32"], f"gg-{name}"), ref["tokens"], tmp_path=tmp_path)
    bound = float(np.abs(got - f32).max()) + 1e-4 + float(np.abs(llama - logits["transformers"]).max())
    delta = np.abs(got - llama)
    assert delta.max() <= bound, f"{name}: max |ingot - llama.cpp| = {delta.max():.3g} > {bound:.3g}"
    modelbuild.assert_greedy_near_ties(got, llama, delta.max(), f"{name} ")


@pytest.mark.parametrize("name", [n if n in Q8_DEFAULT else pytest.param(n, marks=BREADTH) for n in NAMES])
def test_q8_0_gguf_matches_llamacpp(name, tmp_path, built):
    d, ref, logits = fixture(name)
    q8 = modelbuild.logits(modelbuild.build(fixture_file(d / ref["files"]["q8_0"]), f"gg-{name}-q8"), ref["tokens"],
                           tmp_path=tmp_path)
    llama = np.fromfile(fixture_file(d / ref["logits"]["llamacpp_q8_0"]), dtype="<f4").reshape(ref["shape"])
    assert_quantized_matches_llamacpp(name, q8, llama, tmp_path)


MXFP4_NAMES = [n for n in NAMES if "mxfp4" in json.loads((FIXTURES / n / "reference.json").read_text())["files"]]


@pytest.mark.parametrize("name", MXFP4_NAMES)
def test_mxfp4_gguf_matches_llamacpp(name, tmp_path, built):
    """llama.cpp's MXFP4_MOE preset (the experts in MXFP4, as the gpt-oss files published): the
    MXFP4 kernels compute what the dequantized file means (the same file cast with --dtype f32,
    dequantized at load by dtype.c, which equals gguf-py bit for bit: test_kquants) within 1e-4, in
    prefill and decode; and against llama.cpp the Q8_0 test's triangle bound through transformers,
    greedy tokens agreeing but at near-ties."""
    d, ref, logits = fixture(name)
    mx = modelbuild.build(d / ref["files"]["mxfp4"], f"gg-{name}-mxfp4", "--act-quant", "none")
    info = run([mx, "--info"]).stdout
    assert "mxfp4 (" in info, info
    deq = modelbuild.logits(modelbuild.build(d / ref["files"]["mxfp4"], f"gg-{name}-mxfp4-f32", "--dtype", "f32"),
                            ref["tokens"], tmp_path=tmp_path)
    for mode in ((), ("--decode",)):
        got = modelbuild.logits(mx, ref["tokens"], *mode, tmp_path=tmp_path)
        err = float(np.abs(got - deq).max())
        assert err <= 1e-4, f"{name} {mode}: max |MXFP4 kernels - dequantized| = {err:.3g}"
    assert_quantized_matches_llamacpp(name, got, logits["llamacpp_mxfp4"], tmp_path)


@pytest.mark.skipif(SAN, reason="cudasim runs in the optimized pass")
@pytest.mark.parametrize("name", MXFP4_NAMES)
def test_cudasim_mxfp4_gguf_matches_cpu(name, tmp_path, built):
    """The MXFP4 experts on the CUDA backend (17-byte blocks: the GEMV and the GEMM tiles read them
    a byte at a time) against the CPU build of the same file with f32 activations."""
    d, ref, _ = fixture(name)
    model = d / ref["files"]["mxfp4"]
    cpu = modelbuild.build(model, f"gg-{name}-mxfp4", "--act-quant", "none")
    sim = modelbuild.build(model, f"cugg-{name}-mxfp4", "--backend", "cuda", "--cudasim")
    tokens = ref["tokens"][:24]
    want = modelbuild.logits(cpu, tokens, tmp_path=tmp_path)
    for mode in ((), ("--decode",)):
        err = float(np.abs(modelbuild.logits(sim, tokens, *mode, tmp_path=tmp_path) - want).max())
        assert err <= 1e-4, f"{name} {mode}: max |cuda - cpu| = {err:.3g}"


@pytest.mark.skipif(SAN, reason="cudasim runs in the optimized pass")
@pytest.mark.parametrize("kind", ["q8_0", pytest.param("f32", marks=BREADTH)])
def test_cudasim_deepseek2_gguf_matches_cpu(kind, tmp_path, built):
    d, ref, _ = fixture("deepseek2")
    model = d / ref["files"][kind]
    suffix = "" if kind == "f32" else "-q8"
    cpu = modelbuild.build(model, f"gg-deepseek2{suffix}-exact", "--act-quant", "none")  # CUDA's f32 activations
    sim = modelbuild.build(model, f"cugg-deepseek2{suffix}", "--backend", "cuda", "--cudasim")
    tokens = ref["tokens"][:24]  # cudasim is slow: the default tier keeps it short
    want = modelbuild.logits(cpu, tokens, tmp_path=tmp_path)
    for mode in ((), ("--chunk", "5"), ("--decode",)):
        err = float(np.abs(modelbuild.logits(sim, tokens, *mode, tmp_path=tmp_path) - want).max())
        assert err <= 1e-4, f"{kind} {mode}: max |cuda - cpu| = {err:.3g}"


def test_deepseek2_sigmoid_routing_is_refused(tmp_path, built):
    d, ref, _ = fixture("deepseek2")
    r = run([OBJDIR / "tools" / "ingot-inspect", d / ref["files"]["f32"]])
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    info["metadata"]["deepseek2.expert_gating_func"] = 2  # LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID
    (tmp_path / "inspect.json").write_text(json.dumps(info))
    text = (ROOT / "models.lua").read_text()
    line = text[:text.index('assert(c.gating == 1')].count("\n") + 1
    r = run(["lua5.4", ROOT / "generator" / "main.lua", "--inspect", tmp_path / "inspect.json",
             "--source", d / ref["files"]["f32"], "--name", "x", "--out", tmp_path / "out", "--dry-run"])
    assert r.returncode == 1 and f"models.lua:{line}: error: deepseek2: only softmax routing" in r.stderr, r.stderr
    assert "traceback" not in r.stderr, r.stderr


# ---------------------------------------------------------------- every preset of every family

# tests/fixtures/gguf_family_presets (make_family_presets.py): each family 256 wide, quantized by
# llama.cpp into every preset of make_kquant_models.PRESETS, with llama.cpp's logits on each file
# and on the same weights dequantized by gguf-py into an F32 GGUF. The tree holds the presets the
# default tier runs (PRESET_DEFAULT and Q4_K_M) and every preset's reference.json entry (its
# sha256 and tensor types); tests/fixtures/regenerate.py --oracles remakes the other files.
PRESET_FIXTURES = ROOT / "tests" / "fixtures" / "gguf_family_presets"
PRESET_NAMES = sorted(p.name for p in PRESET_FIXTURES.iterdir() if (p / "reference.json").exists())
# The default tier runs Q4_K_M of every family and one more preset per family, chosen so that the
# families together hold every preset (DeepSeek-V2's IQ4_NL: both parts of kv_b in one block type
# without a quantizer, the transposed one joined as f32): the rest runs in make test-full.
PRESET_DEFAULT = {"qwen2": "Q5_K_M", "qwen3": "Q4_0", "gemma2": "Q6_K", "gemma3": "Q2_K", "olmo2": "Q5_0",
                  "granite": "IQ4_XS", "smollm3": "Q8_0", "qwen3moe": "Q3_K_M", "phi3": "Q5_1",
                  "deepseek2": "IQ4_NL"}
# ingot's f32 arithmetic against llama.cpp's on the same dequantized weights: summation order
# (observed at most 1.9e-5 over the 110 files, prefill and decode), plus, for Gemma, ggml's f16 GELU
# table: twice what it moved llama.cpp's logits from transformers' on the family's F32 file when
# the fixture was made (max_delta_llamacpp_f32_transformers: 1.7e-3 Gemma 2, 1.0e-3 Gemma 3;
# observed 2.3e-3 and 1.3e-3 here).
EXACT = 1e-4


def exact_bound(ref):
    return EXACT + 2 * ref["max_delta_llamacpp_f32_transformers"]


def preset_fixture(name, preset):
    d = PRESET_FIXTURES / name
    ref = json.loads((d / "reference.json").read_text())
    p = ref["presets"][preset]
    path = fixture_file(d / p["file"])
    assert hashlib.sha256(path.read_bytes()).hexdigest() == p["sha256"], f"{path} changed"
    llama, dequant = (np.fromfile(fixture_file(d / p[k]), dtype="<f4").reshape(ref["shape"]) for k in ("llamacpp", "dequant"))
    return path, ref, llama, dequant


def preset_params(default):
    """Every (family, preset), in the default tier where default says so and the tree holds the
    file (the hybrids' presets are remade by regenerate.py --oracles: make test-full runs them)."""
    out = []
    for name in PRESET_NAMES:
        ref = json.loads((PRESET_FIXTURES / name / "reference.json").read_text())
        for preset in ref["presets"]:
            p = pytest.param(name, preset, id=f"{name}-{preset}")
            tracked = in_tree(PRESET_FIXTURES / name / ref["presets"][preset]["file"])
            out.append(p if default(name, preset) and tracked else pytest.param(name, preset, marks=BREADTH, id=p.id))
    return out


def test_every_family_has_every_preset():
    """Each family of the 64-wide fixtures has its 256-wide presets, and llama.cpp made every one."""
    assert set(PRESET_NAMES) >= set(NAMES), set(NAMES) - set(PRESET_NAMES)
    for name in PRESET_NAMES:
        ref = json.loads((PRESET_FIXTURES / name / "reference.json").read_text())
        assert set(ref["presets"]) == set(PRESETS) and not ref["skipped"], name


def preset_build(name, preset, path, *opts):
    tag = f"ggp-{name}-{preset.lower().replace('_', '-')}"
    tag += "-cu" if "--backend" in opts else ("-" + opts[opts.index("--act-quant") + 1].replace("none", "exact")) if "--act-quant" in opts else ""
    return modelbuild.build(path, tag, *opts)


# --act-quant q16 rounds each block of 32 activations to 15-bit integers, a
# step 128 times finer than llama.cpp's int8 blocks (256-element blocks for the K-quants: finer
# still by comparison). Small perturbations move the logits in proportion to the step, so the
# build's distance from the file's model is bounded by llama.cpp's own distance A / 16
# (a margin of 8 over the ratio of the steps) on top of the exact mode's bound.
def q16_bound(llama, dequant):
    return float(np.abs(llama - dequant).max()) / 16


@pytest.mark.parametrize("name,preset", preset_params(lambda n, p: p in ("Q4_K_M", PRESET_DEFAULT.get(n))))
def test_preset_gguf_matches_llamacpp(name, preset, tmp_path, built):
    """Each family's file in each preset builds (--dtype native: the file's own types, 3-D experts
    included) and computes the file's model.

    Built with --act-quant q16, which isolates the file's formats: the default (k8) differs only
    in rounding the input of a matmul whose weights are all Q4_K/Q5_K/Q6_K to int8 per 256 with
    Q8_K's codes, a kernel (kc_mms8_) the family does not choose, checked against a replay of
    that rounding in test_kquants and tests/c/test_x16.c.
    llama.cpp's CPU backend rounds activations to int8 in its quantized matmuls; q16
    rounds them to 15 bits for its interleaved weights (Q8_0/Q4_0/Q4_1/Q5_0/Q5_1/IQ4_NL, and
    Q2_K..Q6_K/IQ4_XS where rows are whole super-blocks: q16_bound) and keeps them in f32 for the
    other types, dequantizing the weights exactly. The oracle of the file's model is llama.cpp
    itself on the same weights dequantized by gguf-py to F32 (no activation rounding): ingot in
    prefill and in decode is within exact_bound + q16_bound of it. llama.cpp on the quantized file differs from that
    by A, its activation rounding (0.03 .. 0.44 here; 1.1 and 4.2 for qwen3moe's Q3_K_M and
    IQ4_XS, where the rounding moves a router's choice), so |ingot - llama.cpp| <= A +
    exact_bound: test_kquants' bound, with A measured by llama.cpp itself instead of a NumPy replay
    of its rounding. Greedy tokens: where the argmax differs, the two candidates are within
    2 max|delta| in llama.cpp's logits (a near-tie), and at most a quarter of the positions differ
    (observed at most 4 of 24)."""
    path, ref, llama, dequant = preset_fixture(name, preset)
    binary = preset_build(name, preset, path, "--act-quant", "q16")
    exact = exact_bound(ref) + q16_bound(llama, dequant)
    for mode in ((), ("--decode",)):
        got = modelbuild.logits(binary, ref["tokens"], *mode, tmp_path=tmp_path)
        err = float(np.abs(got - dequant).max())
        assert err <= exact, f"{name} {preset} {mode}: max |ingot - the file's model| = {err:.3g} > {exact:.3g}"
        delta = np.abs(got - llama)
        bound = float(np.abs(llama - dequant).max()) + exact
        assert delta.max() <= bound, f"{name} {preset} {mode}: max |ingot - llama.cpp| = {delta.max():.3g}"
        flips = modelbuild.assert_greedy_near_ties(got, llama, delta.max(), f"{name} {preset} {mode} ")
        assert flips <= len(ref["tokens"]) // 4, f"{name} {preset} {mode}: {flips} greedy tokens differ"


# The default tier runs the CUDA check on qwen3moe's Q4_K_M file (K-quant 3-D experts through the
# expert GEMM tiles and GEMVs); every other family and preset runs in make test-full.
CUDA_PRESET_DEFAULT = {("qwen3moe", "Q4_K_M")}


@pytest.mark.skipif(SAN, reason="the optimized pass runs the CUDA builds of the presets (the ASan pass: kernels tests)")
@pytest.mark.parametrize("name,preset", preset_params(lambda n, p: (n, p) in CUDA_PRESET_DEFAULT))
def test_cuda_preset_gguf_matches_cpu(name, preset, tmp_path, built):
    """Each family's file in each preset on the CUDA backend (cudasim): the kernels of kernels/cuda
    dequantize every type in registers (GEMV: decode and steps of up to 8 tokens) and in shared
    memory (the prefill GEMM tiles), for dense and expert weights. Same weights and f32 activations
    as the CPU build: within 1e-4 of it or 3e-5 of the logits' largest magnitude, whichever is
    larger (summation order; observed at most 2.6e-5 over the 110 files of the attention families,
    and 1.4e-4 = 1.9e-5 of 7.1 for Qwen3-Next's Q6_K, whose delta rule normalizes q and k and
    carries the difference through its state), and the file's model as the CPU build is (within
    exact_bound of llama.cpp on the dequantized weights)."""
    path, ref, _, dequant = preset_fixture(name, preset)
    want = modelbuild.logits(preset_build(name, preset, path, "--act-quant", "none"), ref["tokens"], tmp_path=tmp_path)
    sim = preset_build(name, preset, path, "--backend", "cuda", "--cudasim")
    exact = exact_bound(ref)
    same = max(1e-4, 3e-5 * float(np.abs(want).max()))
    for mode in ((), ("--chunk", "5"), ("--decode",)):
        got = modelbuild.logits(sim, ref["tokens"], *mode, tmp_path=tmp_path)
        err = float(np.abs(got - want).max())
        assert err <= same, f"{name} {preset} {mode}: max |cuda - cpu| = {err:.3g} > {same:.3g}"
        err = float(np.abs(got - dequant).max())
        assert err <= exact, f"{name} {preset} {mode}: max |cuda - the file's model| = {err:.3g}"


MODELS_LUA = (ROOT / "models.lua").read_text()


@pytest.mark.parametrize("name, old, new", [
    ("granitehybrid", "ssm_a_log      = {by_format = {hf = true, gguf = false}}", "ssm_a_log      = {by_format = {hf = true, gguf = true}}"),
    ("qwen3next", "norm_offset     = {by_format = {hf = 1, gguf = 0}}", "norm_offset     = {by_format = {hf = 1, gguf = 1}}"),
    ("qwen3next", "a_log = c.lin_hf})", "a_log = true})"),
], ids=["granite-a-as-a-log", "qwen3next-norms-offset-twice", "qwen3next-a-as-a-log"])
def test_wrong_hybrid_gguf_reading_fails(name, old, new, tmp_path, built):
    """What llama.cpp's converter changes in a hybrid's tensors, read as transformers stores them:
    Mamba-2's or the delta rule's A (stored as -exp(A_log)) taken for A_log, Qwen3-Next's norms
    (stored as 1 + w) offset once more: each moves the logits beyond the F32 test's bound."""
    assert MODELS_LUA.count(old) == 1, old
    models = tmp_path / "models.lua"
    models.write_text(MODELS_LUA.replace(old, new))
    d, ref, want = fixture(name)
    binary = modelbuild.build(d / ref["files"]["f32"], f"gg-wrong-{name}-{abs(hash(new)) % 10 ** 6}", "--models", str(models))
    err = float(np.abs(modelbuild.logits(binary, ref["tokens"], tmp_path=tmp_path) - want["transformers"]).max())
    assert err > 1e-4, f"{name}: a wrong reading passes: max |delta| = {err:.3g}"
