"""The CUDA backend of generated models, proven without a GPU.

* nvcc: ./ingot build --backend cuda for every tiny test model and for SmolLM2 (fused and
  unfused): warnings are errors, and ptxas -v (build/NAME/ptxas.txt) must report zero bytes
  spilled for every kernel on every architecture built (SmolLM2: sm_80/86/89/90, the default; the
  tiny models --cuda-arch 86,90, all four in make test-full); the table of registers and shared
  memory is written to build/_obj/cuda_models_ptxas.txt. --cuda-arch builds carry exactly the
  architectures asked for and say so in --info.
* NVRTC: the binary compiles the kernel sources it carries to PTX for compute_80 and compute_90
  (INGOT_NVRTC_CHECK, the same code path as its start-up JIT) and finds every kernel in it.
* cudasim: the same generated model.cu built against kernels/cudasim (each CUDA thread a fiber,
  real barriers and warp rendezvous) runs whole forward passes; its logits must match the CPU
  backend's build of the same model within 1e-3 (both f32 activations: observed <= 3e-6, the
  margin is the issue's bound for f32/f16 paths) for prefill in one chunk, in several chunks and
  token by token (unpaged: one sequence, blocks 0..n), through the scheduler with scattered
  blocks, preemption and prefix caching (paged), fused and unfused, and with split-K decode
  attention. A race-detecting build runs one model under a fuzzed schedule. The f16 and q8_0 KV
  caches (--kv-dtype) are compared with the CPU build's of the same cache: the same stored values.
* On a machine with a GPU the real binary is compared the same way; elsewhere that test is
  skipped by name, with the reason.
Under INGOT_SAN=1 the cudasim builds are ASan builds and the matrix is reduced to one model; the
nvcc builds run in the optimized pass only.
"""
import json
import os
import re
import subprocess

import numpy as np
import pytest

from conftest import BREADTH, FULL, ROOT, SAN
from modelbuild import FIXTURES, TINY, build, logits, reference, run_batch, smollm2_gguf

TOL = 1e-3
N_TOKENS = 24
TOKENS = [(7 * i + 3) % 290 + 1 for i in range(N_TOKENS)]  # below every tiny vocab (>= 300)

SIM_MODELS = ["mha_untied_hd32", "gqa_tied_hd16", "gqa_untied_8h2kv", "mha_untied_hd32-f16"]
if SAN:
    SIM_MODELS = ["gqa_tied_hd16"]
MODES = {"prefill": (), "chunked": ("--chunk", "5"), "decode": ("--decode",)}


# The architectures the nvcc builds of the tests carry (--cuda-arch): the default tier compiles
# sm_90 (H100/H200: the real-GPU tests use these builds; sm_80 shares its limits). make test-full
# builds all four, the binary's default, and with them sm_86/89 (1536 threads per SM: launch
# bounds leave the fewest registers, so a spill shows there first). The kernel headers' ptxas
# table (test_cuda_kernels.py) covers sm_86 and sm_90 in both tiers.
ALL_ARCHS = ("80", "86", "89", "90")
NVCC_ARCHS = ALL_ARCHS if FULL else ("90",)


def cuda_build(model, name, *opts, archs=NVCC_ARCHS):
    return build(model, name, "--backend", "cuda", *opts,
                 *(() if archs == ALL_ARCHS else ("--cuda-arch", ",".join(archs))))


def sim_build(model, name, *opts):
    return build(model, name, "--backend", "cuda", "--cudasim", *opts)


def cpu_build(model, name, *opts):
    """The CPU build a CUDA build is compared with: --act-quant none, the f32 activations the
    CUDA kernels take (the CPU default rounds them to 15 bits for its integer kernels)."""
    return build(model, name + "-exact", "--act-quant", "none", *opts)


# ---- cudasim: whole forward passes ------------------------------------------------


@pytest.mark.parametrize("fused", [True] if SAN else [True, False], ids=["fused", "unfused"][:1 if SAN else 2])
@pytest.mark.parametrize("model", SIM_MODELS)
def test_cudasim_forward_matches_cpu(built, tmp_path, monkeypatch, model, fused):
    if not fused and model != "mha_untied_hd32" and not FULL:
        pytest.skip("breadth: unfused kernels are the same for every model (mha_untied_hd32 runs them); "
                    "the others run in make test-full")
    if model.endswith("-f16"):  # f32 activations throughout: the tiled GEMM (cuBLASLt's F16 inputs: below)
        monkeypatch.setenv("INGOT_CUBLASLT", "0")
    opts = () if fused else ("--no-fuse",)
    tag = "" if fused else "-nf"
    cpu = cpu_build(TINY / model, f"t-{model}{tag}", *opts)
    sim = sim_build(TINY / model, f"cu-{model}{tag}", *opts)
    want = logits(cpu, TOKENS, tmp_path=tmp_path)
    modes = MODES if not SAN else {k: MODES[k] for k in ("prefill", "decode")}
    for mode, args in modes.items():
        got = logits(sim, TOKENS, *args, tmp_path=tmp_path)
        err = float(np.abs(got - want).max())
        assert err <= TOL, f"{model} {'fused' if fused else 'unfused'} {mode}: max |cuda - cpu| = {err:.3g}"


@pytest.mark.skipif(SAN, reason="the f16 cache is one element type more; the ASan pass runs the f32 one")
def test_cudasim_f16_kv_cache_matches_cpu(built, tmp_path):
    """--kv-dtype f16 on CUDA: K and V rounded to f16 when stored (cvt.rn on the GPU, the same
    round-to-nearest-even bit rebuild here) and widened when read. Against the CPU backend's f16
    cache (the same stored values; only summation order differs, as in the f32 comparison, plus
    the softmax of scores computed from them): within 1e-3; against transformers within the
    3e-3 of test_models' f16-cache test (measured 1.76e-3)."""
    model = "gqa_tied_hd16"
    cpu = cpu_build(TINY / model, f"t-{model}-kvf16", "--kv-dtype", "f16")
    sim = sim_build(TINY / model, f"cu-{model}-kvf16", "--kv-dtype", "f16")
    tokens, expected = reference(TINY / model)
    for mode, args in MODES.items():
        want = logits(cpu, tokens, *args, tmp_path=tmp_path)
        got = logits(sim, tokens, *args, tmp_path=tmp_path)
        assert float(np.abs(got - want).max()) <= 1e-3, mode
        assert float(np.abs(got - expected).max()) <= 3e-3, mode


KVQ8_MODELS = {"mha_untied_hd32": TINY / "mha_untied_hd32",
               "deepseek2_rows96": FIXTURES / "families" / "deepseek2_rows96"}  # MLA: shared rows of 64 + 32


@pytest.mark.skipif(SAN, reason="the q8_0 cache is one element type more; the ASan pass runs the f32 one")
@pytest.mark.parametrize("model", sorted(KVQ8_MODELS))
def test_cudasim_q8_kv_cache_matches_cpu(built, tmp_path, monkeypatch, model):
    """--kv-dtype q8_0 on CUDA: a warp quantizes each 32 values of a K or V row with the CPU
    store's operations (f32 max|x| / 127, its reciprocal and the products each correctly rounded,
    ties to even; tests/cuda_kernels/t_kv_store.cu checks the bytes), and attention dequantizes in
    registers. Given the same inputs both builds store the same bytes, so the logits differ by
    summation order only, as in the f32 comparison: the same 1e-3 (TOL). An input that differs
    in its last bits (matmul order) stores the same int8 and scale unless it sits on a rounding
    boundary; then one cached value moves by one step (max|x| / 127 of its block). In these tiny
    models such flips are rare and move the logits far less than TOL: observed 2.4e-6 (MLA) and
    1.6e-6 (chunked), 3.1e-5 for mha_untied_hd32's prefill and decode (ten times its f32
    comparison's 3e-6: one flip, as quantization is otherwise constant under tiny input changes);
    a real model has many more (test_cudasim_smollm2_q8_kv_cache_matches_cpu). Prefill, chunks of 5,
    token by token and split-K decode; the MLA fixture reads its values from the cached latent
    rows (attn_rows_kernel; rows of 96 = 3 blocks, the values their first 2)."""
    path = KVQ8_MODELS[model]
    cpu = cpu_build(path, f"t-{model}-kvq8", "--kv-dtype", "q8_0")
    sim = sim_build(path, f"cu-{model}-kvq8", "--kv-dtype", "q8_0")
    # --info: the pool's bytes per token and the decode estimate's KV bytes are rows of 34-byte blocks
    c = json.loads((path / "config.json").read_text())
    mla = "kv_lora_rank" in c
    row = c["kv_lora_rank"] + c["qk_rope_head_dim"] if mla else c["hidden_size"] // c["num_attention_heads"]
    per_token = (1 if mla else 2 * c["num_key_value_heads"]) * c["num_hidden_layers"] * row // 32 * 34
    info = subprocess.run([str(sim), "--info"], capture_output=True, text=True, timeout=120).stdout
    assert f"KV cache:        {per_token} bytes/token (q8_0)" in info, info
    m = re.search(r"([\d.]+) KB KV \((\d+) positions\)", info)
    assert m and abs(float(m.group(1)) * 1e3 - per_token * int(m.group(2))) < 100, info
    # the f32-cache CPU build (test_models' / test_families' binary): q8_0 must really move the logits
    exact = logits(cpu_build(path, f"{'t' if path.parent == TINY else 'f'}-{model}"), TOKENS, tmp_path=tmp_path)
    for mode, args in MODES.items():
        want = logits(cpu, TOKENS, *args, tmp_path=tmp_path)
        got = logits(sim, TOKENS, *args, tmp_path=tmp_path)
        err = float(np.abs(got - want).max())
        print(f"{model} {mode}: q8_0 KV max |cuda - cpu| = {err:.3g}, |q8_0 - f32 cache| = "
              f"{float(np.abs(want - exact).max()):.3g}")
        assert err <= TOL, f"{model} {mode}: max |cuda - cpu| = {err:.3g}"
        assert float(np.abs(want - exact).max()) > 10 * TOL, "the q8_0 cache changes nothing?"
    if not mla:  # decode attention in 3 splits + the combine kernel (MLA runs attn_rows_kernel)
        want = logits(cpu, TOKENS, "--decode", tmp_path=tmp_path)
        monkeypatch.setenv("INGOT_ATTN_SPLITS", "3")
        err = float(np.abs(logits(sim, TOKENS, "--decode", tmp_path=tmp_path) - want).max())
        print(f"{model} decode split-K: q8_0 KV max |cuda - cpu| = {err:.3g}")
        assert err <= TOL, f"{model} split-K decode: max |cuda - cpu| = {err:.3g}"


@pytest.mark.skipif(SAN, reason="quantized builds are covered by the optimized pass (the ASan pass runs one model)")
# q8_0 weights also run in SmolLM2 (its embedding and LM head) on cudasim
@pytest.mark.parametrize("dtype", [pytest.param("q8_0", marks=BREADTH), "q4_0", "q4_1"])
def test_cudasim_quantized_weights_match_cpu(built, tmp_path, dtype):
    """Block-quantized weights dequantized in registers (GEMV) and in shared memory (GEMM)."""
    model = "mha_untied_hd32"
    cpu = cpu_build(TINY / model, f"t-{model}-{dtype}", "--dtype", dtype)
    sim = sim_build(TINY / model, f"cu-{model}-{dtype}", "--dtype", dtype)
    want = logits(cpu, TOKENS, tmp_path=tmp_path)
    for mode in ("prefill", "chunked", "decode"):
        got = logits(sim, TOKENS, *MODES[mode], tmp_path=tmp_path)
        err = float(np.abs(got - want).max())
        assert err <= TOL, f"{dtype} {mode}: max |cuda - cpu| = {err:.3g}"


HALF_MODELS = {"gqa_tied_hd16-f16": 2.0 ** -11, "mha_untied_hd32-bf16": 2.0 ** -8}  # model: unit roundoff u


@pytest.mark.skipif(SAN, reason="the ASan pass runs cuBLASLt with f32 inputs (gqa_tied_hd16 prefill)")
@pytest.mark.parametrize("model", sorted(HALF_MODELS))
def test_cudasim_cublaslt_half_inputs(built, tmp_path, model):
    """Dense f16/bf16 weights in a prefill-sized step (24 tokens > 16): one cuBLASLt GEMM per linear
    with X rounded to the weights' type (F16/BF16 in, F32 accumulate: cudasim's reference GEMM).
    The CPU keeps X in f32, so the logits differ by the rounding of the GEMM inputs: each of the
    G = 4 * layers + 1 GEMM inputs is off by at most u relative (u = 2^-11 for f16, 2^-8 for bf16),
    and to first order these add up in the residual stream: |cuda - cpu| <= u * G * max|logit|
    (observed about a fifth of that, and 8x larger for bf16 than f16, as u is). The tiled GEMM of the
    same binary (INGOT_CUBLASLT=0) keeps f32 inputs and must stay within 1e-3: the difference is
    the inputs' rounding, nothing else."""
    layers = json.loads((TINY / model / "config.json").read_text())["num_hidden_layers"]
    cpu = cpu_build(TINY / model, f"t-{model}")
    sim = sim_build(TINY / model, f"cu-{model}")
    want = logits(cpu, TOKENS, tmp_path=tmp_path)
    out = tmp_path / "lt.f32"
    r = subprocess.run([str(sim), "logits", "--tokens", ",".join(map(str, TOKENS)), "--out", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr  # no fallback to the tiled GEMM
    got = np.fromfile(out, dtype="<f4").reshape(len(TOKENS), -1)
    bound = HALF_MODELS[model] * (4 * layers + 1) * float(np.abs(want).max())
    err = float(np.abs(got - want).max())
    assert 0 < err <= bound, f"{model} cuBLASLt: max |cuda - cpu| = {err:.3g}, bound {bound:.3g}"
    r = subprocess.run([str(sim), "logits", "--tokens", ",".join(map(str, TOKENS)), "--out", str(out)],
                       capture_output=True, text=True, timeout=600, env={**os.environ, "INGOT_CUBLASLT": "0"})
    assert r.returncode == 0, r.stderr
    tiled = np.fromfile(out, dtype="<f4").reshape(len(TOKENS), -1)
    assert float(np.abs(tiled - want).max()) <= TOL


# breadth (make test-full): qwen2_gqa and llama_bias (biases: olmo2_bias has them), qwen3_hd24 (q/k
# norms: qwen3moe_16e_top4 has them), both Mixtrals (qwen3moe_16e_top4 has more experts than threads
# per block; test_cudasim_mixtral_quantized_experts_match_cpu runs Mixtral), granite, smollm3
FAMILIES = [pytest.param("qwen2_gqa", marks=BREADTH), pytest.param("llama_bias", marks=BREADTH),
            pytest.param("qwen3_hd24", marks=BREADTH), "gemma2_gqa", "phi3_gqa", "mistral_4h2kv_sw16",
            pytest.param("mixtral_4e_top2", marks=BREADTH), pytest.param("mixtral_8e_top2", marks=BREADTH),
            "olmo2_bias", pytest.param("granite_bias", marks=BREADTH), pytest.param("smollm3_list", marks=BREADTH),
            "qwen3moe_16e_top4", "gemma3_gqa", "gptneox_serial_odd", pytest.param("gptneox_parallel", marks=BREADTH),
            "lfm2_bias", pytest.param("lfm2_hybrid", marks=BREADTH), "granitehybrid_moe",
            pytest.param("granitehybrid_dense", marks=BREADTH), "qwen3next_moe"]
FAMILY_DIR = ROOT / "tests" / "fixtures" / "families"


@pytest.mark.skipif(SAN, reason="the families run on cudasim in the optimized pass (the ASan pass runs one model)")
@pytest.mark.parametrize("family", FAMILIES)
def test_cudasim_families_match_cpu(built, tmp_path, family, monkeypatch):
    """Biases (Qwen2 q/k/v; Llama on every projection, so with residual and activation epilogues), per-head q/k norms (Qwen3), offset norms, post-norms, softcaps and
    alternating windows (Gemma 2), row-sliced fused weights (Phi-3), a window shorter than the
    sequence (Mistral), mixtures of 4 and 8 experts (Mixtral: expert GEMM tiles in prefill, the
    per-expert GEMV in chunks and decode), post-norms and full-width q/k norms (OLMo 2), scaled
    embedding, branches and logits (Granite), layers without RoPE (SmolLM3), 16 experts top-4
    without renormalization beside dense layers (Qwen3-MoE), LayerNorm, exact GELU and an odd
    partial rotary width (GPT-NeoX), short convolutions whose state each sequence carries across
    the chunks and decode steps (LFM2), Mamba-2's scan and grouped gated norm beside a MoE (Granite
    4.0 hybrid), the gated delta rule, gated attention and a sigmoid-gated shared expert (Qwen3-Next):
    the same descriptions through the CUDA emitter."""
    model = FAMILY_DIR / family
    vocab = json.loads((model / "config.json").read_text())["vocab_size"]
    toks = [(7 * i + 3) % (vocab - 1) + 1 for i in range(32)]
    cpu = cpu_build(model, f"f-{family}")
    sim = sim_build(model, f"cuf-{family}")
    want = logits(cpu, toks, tmp_path=tmp_path)
    # a fixture stored in bf16 would take cuBLASLt in prefill, with the activations rounded to bf16
    # (test_cudasim_cublaslt_half_inputs bounds that): the description is checked with f32 activations
    bf16 = json.loads((model / "reference.json").read_text()).get("weights_dtype") == "bfloat16"
    with monkeypatch.context() as mp:
        if bf16:
            mp.setenv("INGOT_CUBLASLT", "0")
        for mode, args in MODES.items():
            got = logits(sim, toks, *args, tmp_path=tmp_path)
            err = float(np.abs(got - want).max())
            assert err <= TOL, f"{family} {mode}: max |cuda - cpu| = {err:.3g}"


@pytest.mark.skipif(SAN, reason="quantized builds are covered by the optimized pass (the ASan pass runs one model)")
def test_cudasim_mixtral_quantized_experts_match_cpu(built, tmp_path):
    """Q4_1 expert gate/up weights (rows of 64; the down rows of 48 cannot be block-quantized and
    stay f32) through the moe GEMM tiles (prefill) and the per-expert GEMV (chunks, decode)."""
    model = FAMILY_DIR / "mixtral_8e_top2"
    vocab = json.loads((model / "config.json").read_text())["vocab_size"]
    toks = [(7 * i + 3) % (vocab - 1) + 1 for i in range(32)]
    cpu = cpu_build(model, "f-mixtral_8e_top2-q4_1", "--dtype", "q4_1")
    sim = sim_build(model, "cuf-mixtral_8e_top2-q4_1", "--dtype", "q4_1")
    want = logits(cpu, toks, tmp_path=tmp_path)
    for mode, args in MODES.items():
        got = logits(sim, toks, *args, tmp_path=tmp_path)
        err = float(np.abs(got - want).max())
        assert err <= TOL, f"q4_1 {mode}: max |cuda - cpu| = {err:.3g}"


@pytest.mark.skipif(SAN, reason="the real model on cudasim runs in the optimized pass only (minutes under ASan)")
def test_cudasim_smollm2_matches_cpu(built, tmp_path):
    """The real SmolLM2-135M Q4_1 GGUF (Q4_1 and Q8_0 weights, head_dim 64, GQA 3:1) through the
    generated CUDA kernels: one prefill step of 6 tokens and one decode step."""
    gguf = smollm2_gguf()
    cpu = cpu_build(gguf, "smollm2")
    sim = sim_build(gguf, "cu-smollm2")
    toks = [504, 3458, 282, 4649, 314, 253]
    want = logits(cpu, toks, "--chunk", "5", tmp_path=tmp_path)
    got = logits(sim, toks, "--chunk", "5", tmp_path=tmp_path)
    err = float(np.abs(got - want).max())
    assert err <= TOL, f"max |cuda - cpu| = {err:.3g}"  # observed 3.6e-5 with logits up to 27
    assert (got.argmax(1) == want.argmax(1)).all()


@pytest.mark.full
@pytest.mark.skipif(SAN, reason="the real model on cudasim runs in the optimized pass only (minutes under ASan)")
def test_cudasim_smollm2_q8_kv_cache_matches_cpu(built, tmp_path):
    """SmolLM2 with --kv-dtype q8_0 (rows of 64: two blocks; GQA 3:1 through the prefill and decode
    kernels) on cudasim against the CPU's q8_0 build, as test_cudasim_smollm2_matches_cpu. With
    30 layers of 64-wide heads, K and V inputs that differ in their last bits (summation order)
    flip some int8 roundings by one step (test_cudasim_q8_kv_cache_matches_cpu), and a step here is
    max|x| / 127 of a block with outliers: the CPU build itself moves by 1.1e-2 between a prefill
    chunk and token-by-token steps (the f32 cache: 6.8e-5). The bound is twice that control
    (observed: CUDA 1.3e-2, 1.2x), the same greedy tokens, and far from the f32 cache's logits."""
    gguf = smollm2_gguf()
    cpu = cpu_build(gguf, "smollm2-kvq8", "--kv-dtype", "q8_0")
    sim = sim_build(gguf, "cu-smollm2-kvq8", "--kv-dtype", "q8_0")
    toks = [504, 3458, 282, 4649, 314, 253]
    want = logits(cpu, toks, "--chunk", "5", tmp_path=tmp_path)
    got = logits(sim, toks, "--chunk", "5", tmp_path=tmp_path)
    control = float(np.abs(logits(cpu, toks, "--decode", tmp_path=tmp_path) - want).max())
    exact = float(np.abs(logits(cpu_build(gguf, "smollm2"), toks, "--chunk", "5", tmp_path=tmp_path) - want).max())
    err = float(np.abs(got - want).max())
    print(f"SmolLM2 q8_0 KV: max |cuda - cpu| = {err:.3g}, cpu prefill vs decode {control:.3g}, "
          f"vs the f32 cache {exact:.3g}")
    assert err <= max(TOL, 2 * control), f"max |cuda - cpu| = {err:.3g} (cpu against itself: {control:.3g})"
    assert (got.argmax(1) == want.argmax(1)).all()
    assert exact > 4 * max(TOL, 2 * control), "the q8_0 cache changes nothing?"


@pytest.mark.skipif(SAN, reason="the real model on cudasim runs in the optimized pass only (minutes under ASan)")
def test_cudasim_smollm2_serves_the_openai_client(built):
    """`serve` of the CUDA build (on cudasim) answers the real openai client over a socket with the
    same greedy text as the CPU build: two concurrent requests (one streamed) through the scheduler
    and the device KV pool sized from (simulated) free device memory."""
    import concurrent.futures
    import openai
    from serverproc import ServerProc
    gguf = smollm2_gguf()
    answers = {}
    for name, binary in (("cpu", cpu_build(gguf, "smollm2")), ("cuda", sim_build(gguf, "cu-smollm2"))):
        with ServerProc(binary, "--grace", "10", env={"CUDASIM_MEM_MB": "256"}) as srv:
            client = openai.OpenAI(base_url=srv.base_url, api_key="unused", max_retries=0, timeout=600)
            model = client.models.list().data[0].id  # the binary's name

            def ask(prompt, stream):
                # short prompts (one decode-sized prefill step for both) and one token: cudasim runs SmolLM2 slowly
                if not stream:
                    r = client.completions.create(model=model, prompt=prompt, max_tokens=1, temperature=0)
                    return r.choices[0].text
                chunks = client.completions.create(model=model, prompt=prompt, max_tokens=1, temperature=0, stream=True)
                return "".join(c.choices[0].text for c in chunks if c.choices)

            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                futures = [pool.submit(ask, "The capital of France is", False),
                           pool.submit(ask, "Red, green and", True)]
                answers[name] = [f.result() for f in futures]
    assert answers["cuda"] == answers["cpu"], answers
    assert "Paris" in answers["cuda"][0], answers


@pytest.mark.skipif(SAN, reason="split-K decode is covered by the optimized pass (the ASan pass runs one model)")
def test_cudasim_split_k_decode(built, tmp_path):
    """Decode attention split over the sequence (flash-decoding) plus its combine kernel."""
    model = "mha_untied_hd32"  # head_dim 32: the specialized decode kernel
    cpu = cpu_build(TINY / model, f"t-{model}")
    sim = sim_build(TINY / model, f"cu-{model}")
    want = logits(cpu, TOKENS, tmp_path=tmp_path)
    env = dict(os.environ, INGOT_ATTN_SPLITS="3")
    out = tmp_path / "split.f32"
    r = subprocess.run([str(sim), "logits", "--tokens", ",".join(map(str, TOKENS)), "--decode", "--out", str(out)],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr
    got = np.fromfile(out, dtype="<f4").reshape(len(TOKENS), -1)
    assert float(np.abs(got - want).max()) <= TOL


PAGED_MODELS = [TINY / (SIM_MODELS[0] if not SAN else "gqa_tied_hd16")]
if not SAN:
    PAGED_MODELS.append(FAMILY_DIR / "mixtral_4e_top2")  # batches that mix prefill and decode tokens


@pytest.mark.parametrize("path", PAGED_MODELS, ids=[p.name for p in PAGED_MODELS])
def test_cudasim_paged_batch_matches_cpu(built, tmp_path, path):
    """The scheduler over the device KV pool: scattered blocks, preemption, prefix caching."""
    model = path.name
    cpu_name, sim_name = (f"t-{model}", f"cu-{model}") if path.parent == TINY else (f"f-{model}", f"cuf-{model}")
    cpu = cpu_build(path, cpu_name)
    sim = sim_build(path, sim_name)
    # KV pressure: 6 requests growing past their blocks in a pool of 8 blocks -> preemption
    pressure = [{"prompt": [(11 * i + 5 * j) % 280 + 1 for j in range(14 + i)], "max_tokens": 12, "ignore_eos": True,
                 "temperature": 0.0} for i in range(6)]
    # a shared prefix of more than one block, one request at a time -> prefix-cache hits
    shared = [5, 17, 33, 2, 9, 11, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51]
    prefix = [{"prompt": shared + [60 + i] * (i + 1), "max_tokens": 4, "ignore_eos": True, "temperature": 0.0}
              for i in range(3)]
    for reqs, opts, stat in ((pressure, ("--kv-blocks", "8", "--max-batch-tokens", "32"), "preemptions"),
                             (prefix, ("--max-running", "1"), "prefix_hit_tokens")):
        want, _ = run_batch(cpu, reqs, *opts, tmp_path=tmp_path)
        got, stats = run_batch(sim, reqs, *opts, tmp_path=tmp_path)
        for i, (g, w) in enumerate(zip(got, want)):
            assert g["tokens"] == w["tokens"], f"request {i}: cuda {g['tokens']} vs cpu {w['tokens']}"
        assert stats[stat] > 0, stats


@pytest.mark.skipif(SAN, reason="race builds instrument with -fsanitize=thread; the ASan pass builds asan instead")
def test_cudasim_race_build_fuzzed_schedule(built, tmp_path):
    """Every generated kernel under cudasim's race detector, blocks and threads in a shuffled order
    (global races within a block; the last-block epilogue pattern rules out cross-block mode 2)."""
    model = "gqa_tied_hd16"
    cpu = cpu_build(TINY / model, f"t-{model}")
    sim = sim_build(TINY / model, f"cu-{model}")
    r = subprocess.run(["make", "-s", "-f", str(ROOT / "build" / "model.mk"), f"MODEL_DIR={sim.parent}",
                        f"NAME=cu-{model}", "BACKEND=cudasim", "SIM_MODE=race"], capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stderr
    race = sim.parent / f"cu-{model}-cudasim-race"
    want = logits(cpu, TOKENS[:12], tmp_path=tmp_path)
    env = dict(os.environ, CUDASIM_SEED="7", CUDASIM_RACE_GLOBAL="1")
    for args in ((), ("--decode",)):
        out = tmp_path / "race.f32"
        p = subprocess.run([str(race), "logits", "--tokens", ",".join(map(str, TOKENS[:12])), *args, "--out", str(out)],
                           capture_output=True, text=True, timeout=900, env=env)
        assert p.returncode == 0, p.stderr[-4000:]
        got = np.fromfile(out, dtype="<f4").reshape(12, -1)
        assert float(np.abs(got - want).max()) <= TOL


# ---- nvcc builds and NVRTC ---------------------------------------------------------

# every tiny model (the sharded copy of gqa_tied_hd16 differs only in its files: same kernels)
NVCC_MODELS = [(TINY / m, f"cuda-{m}", ()) for m in sorted(os.listdir(TINY))
               if (TINY / m / "config.json").exists() and not m.endswith("-sharded")]
NVCC_MODELS += [(TINY / m, f"cuda-{m}-nf", ("--no-fuse",)) for m in ("mha_untied_hd32", "gqa_tied_hd16")]
NVCC_MODELS += [(FAMILY_DIR / "mixtral_4e_top2", "cuda-mixtral_4e_top2", ())]  # the moe kernels
NVCC_MODELS += [(FAMILY_DIR / "deepseek2_qlora_yarn", "cuda-deepseek2_qlora_yarn", ())]  # MLA: head_linear, shared values
# one model per kernel kind: f32 GEMV/GEMM and head_dim 16 attention, the generic attention kernel
# (head_dim 40), half weights (f16; bf16 is the same template with another conversion: full tier),
# unfused kernels, the moe kernels, MLA's per-head linears and
# attention over shared K/V rows with group-limited routing (SmolLM2 adds Q4_1/Q8_0 and head_dim
# 64); the rest of NVCC_MODELS repeats these kinds with other shapes
NVCC_KINDS = {"cuda-gqa_tied_hd16", "cuda-gqa_tied_hd40", "cuda-mha_untied_hd32-f16",
              "cuda-mha_untied_hd32-nf", "cuda-mixtral_4e_top2", "cuda-deepseek2_qlora_yarn"}


def ptxas_table(path):
    """[(arch, kernel, registers, smem, spill_stores, spill_loads)] from an nvcc -Xptxas -v log."""
    rows, arch, kernel = [], None, None
    spills = None
    for line in path.read_text().splitlines():
        m = re.search(r"Compiling entry function '([^']+)' for '(sm_\d+)'", line)
        if m:
            kernel, arch = m.group(1), m.group(2)
            continue
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            spills = (int(m.group(1)), int(m.group(2)))
            continue
        m = re.search(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?", line)
        if m and kernel:
            rows.append((arch, kernel, int(m.group(1)), int(m.group(2) or 0), *spills))
            kernel = None
    return rows


# one test per model, so that the workers share the nvcc builds (two minutes in all)
@pytest.mark.skipif(SAN, reason="nvcc builds are the same under sanitizers; they run in the optimized pass")
@pytest.mark.parametrize("name", sorted(NVCC_KINDS) + ["cuda-smollm2"])
def test_nvcc_builds_without_spills(built, name):
    if name == "cuda-smollm2":
        # the default tier compiles the architecture of NVCC_ARCHS; the full tier all four, as the
        # binary operators build ships them
        nvcc_check([(smollm2_gguf(), name, ())], "cuda_smollm2_ptxas.txt", archs=ALL_ARCHS if FULL else NVCC_ARCHS)
    else:
        nvcc_check([m for m in NVCC_MODELS if m[1] == name], f"cuda_models_ptxas_{name[5:]}.txt")


@pytest.mark.full
@pytest.mark.skipif(SAN, reason="nvcc builds are the same under sanitizers; they run in the optimized pass")
def test_nvcc_builds_without_spills_every_model(built):
    gguf = smollm2_gguf()
    models = [m for m in NVCC_MODELS if m[1] not in NVCC_KINDS] + [(gguf, "cuda-smollm2-nf", ("--no-fuse",)),
                                                                 (gguf, "cuda-smollm2-kvf16", ("--kv-dtype", "f16"))]
    nvcc_check(models, "cuda_models_ptxas_more.txt")


# --kv-dtype q8_0: the stores of the generated row kernels (ig_row_kv_store: a warp quantizes each
# block) and the attention kernels over q8_0 rows (kernels/cuda/common.cuh)
KVQ8_NVCC = [(TINY / "mha_untied_hd32", "cuda-mha_untied_hd32-kvq8", ("--kv-dtype", "q8_0")),
             (FAMILY_DIR / "deepseek2_rows96", "cuda-deepseek2_rows96-kvq8", ("--kv-dtype", "q8_0"))]


@pytest.mark.full
@pytest.mark.skipif(SAN, reason="nvcc builds are the same under sanitizers; they run in the optimized pass")
def test_q8_kv_nvcc_builds_nvrtc_and_gpu(built, tmp_path):
    """--kv-dtype q8_0 builds (a tiny model, the MLA fixture, SmolLM2): nvcc without spills on
    sm_80/86/89/90, NVRTC compiles every kernel source the binary carries (compute_80/90), and on
    a GPU the logits match the CPU build's q8_0 cache as on cudasim (within TOL)."""
    models = KVQ8_NVCC + [(smollm2_gguf(), "cuda-smollm2-kvq8", ("--kv-dtype", "q8_0"))]
    nvcc_check(models, "cuda_models_ptxas_kvq8.txt")
    for model, name, opts in KVQ8_NVCC:
        binary = cuda_build(model, name, *opts)
        r = subprocess.run([str(binary), "--info"], capture_output=True, text=True, timeout=600,
                           env=dict(os.environ, INGOT_NVRTC_CHECK="80,90"))
        for arch in ("compute_80", "compute_90"):
            m = re.search(r"nvrtc: %s: ok, (\d+) bytes of PTX, (\d+) of (\d+) kernels" % arch, r.stderr)
            assert m and m.group(2) == m.group(3), r.stderr
        assert "bytes/token (q8_0)" in r.stdout, r.stdout
        if r.returncode != 0 and "no CUDA device" in r.stderr:
            continue  # no GPU here: the cudasim test compares the same builds' kernels
        assert r.returncode == 0, r.stderr
        cpu = cpu_build(model, f"t-{model.name}-kvq8", *opts)
        for mode, args in MODES.items():
            err = float(np.abs(logits(binary, TOKENS, *args, tmp_path=tmp_path)
                               - logits(cpu, TOKENS, *args, tmp_path=tmp_path)).max())
            assert err <= TOL, f"{name} {mode}: max |gpu - cpu| = {err:.3g}"


def nvcc_check(models, table, archs=NVCC_ARCHS):
    report = []
    for model, name, opts in models:
        binary = cuda_build(model, name, *opts, archs=archs)
        rows = ptxas_table(binary.parent / "ptxas.txt")
        built_for = {r[0] for r in rows}
        assert built_for == {"sm_" + a for a in archs}, (name, built_for)
        kernels = {r[1] for r in rows}
        for arch in built_for:
            assert {r[1] for r in rows if r[0] == arch} == kernels, f"{name}: {arch} lacks kernels"
        spilled = [r for r in rows if r[4] or r[5]]
        assert not spilled, f"{name}: spills {spilled}"
        info = subprocess.run([str(binary), "--info"], capture_output=True, text=True, timeout=120).stdout
        assert "code for sm_%s + NVRTC JIT" % "/".join(archs) in info, info  # what --info tells operators
        assert (binary.parent / "gen" / "cuda_arch.mk").read_text().splitlines()[-1] == "CUDA_ARCH := " + " ".join(archs)
        for r in rows:
            report.append(f"{name:28s} {r[0]} {r[2]:4d} regs {r[3]:6d} B smem  {r[4]}/{r[5]} spill  {r[1]}")
    out = ROOT / "build" / "_obj" / table
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(report) + "\n")
    print(f"\nptxas: {len(report)} kernel compilations, 0 spills; table in {out}")


@pytest.mark.skipif(SAN, reason="uses the nvcc builds of the optimized pass")
def test_binary_nvrtc_compiles_its_sources_and_reports_missing_gpu(built):
    for model, name, opts in [(TINY / "gqa_tied_hd16", "cuda-gqa_tied_hd16", ()),
                              (TINY / "mha_untied_hd32", "cuda-mha_untied_hd32-nf", ("--no-fuse",)),
                              (FAMILY_DIR / "mixtral_4e_top2", "cuda-mixtral_4e_top2", ())]:
        binary = cuda_build(model, name, *opts)
        env = dict(os.environ, INGOT_NVRTC_CHECK="80,90")
        r = subprocess.run([str(binary), "--info"], capture_output=True, text=True, timeout=600, env=env)
        for arch in ("compute_80", "compute_90"):
            m = re.search(r"nvrtc: %s: ok, (\d+) bytes of PTX, (\d+) of (\d+) kernels" % arch, r.stderr)
            assert m, r.stderr
            assert m.group(2) == m.group(3) and int(m.group(3)) > 0, m.group(0)
        assert "launches per decode step" in r.stdout and "roofline" in r.stdout, r.stdout
        if r.returncode != 0:  # no GPU here: one clear line
            last = r.stderr.strip().splitlines()[-1]
            assert "no CUDA device" in last and "--backend cpu" in last, r.stderr


def test_cudasim_decode_graphs_replay_exactly(built, tmp_path):
    """Decode steps are captured once per (batch size, split count) as a CUDA graph and replayed
    (cudasim records the launches and cuBLASLt calls issued to a capturing stream, with their
    arguments copied, and a graph launch replays them): the logits equal those of the same steps
    launched kernel by kernel, bit for bit, and the kernels launched per step without graphs are
    exactly the count --info gives."""
    model = "gqa_tied_hd16"
    sim = sim_build(TINY / model, f"cu-{model}")
    info = subprocess.run([str(sim), "--info"], capture_output=True, text=True, timeout=120).stdout
    per_step = int(re.search(r"(\d+) launches per decode step", info).group(1))
    runs = {}
    for graphs in ("1", "0"):
        out = tmp_path / f"g{graphs}.f32"
        r = subprocess.run([str(sim), "logits", "--tokens", ",".join(map(str, TOKENS)), "--out", str(out), "--decode"],
                           capture_output=True, text=True, timeout=600,
                           env={**os.environ, "INGOT_CUDA_GRAPHS": graphs, "INGOT_CUDA_STATS": "1"})
        assert r.returncode == 0, r.stderr
        m = re.search(r"cuda: (\d+) steps, (\d+) graphs captured, (\d+) graph replays, (\d+) kernel launches", r.stderr)
        assert m, r.stderr
        runs[graphs] = (np.fromfile(out, dtype="<f4"), [int(x) for x in m.groups()])
    (with_graphs, (steps, captured, replays, _)), (plain, (steps0, _, replays0, launches0)) = runs["1"], runs["0"]
    assert steps == steps0 == len(TOKENS) and captured == 1 and replays == steps and replays0 == 0
    assert launches0 == per_step * steps0, f"{launches0} launches for {steps0} steps, --info says {per_step} per step"
    assert np.array_equal(with_graphs, plain)


def test_fused_decode_launch_budget(built):
    """Fused builds of dense models launch at most 6 kernels per transformer layer per decode step.
    (A Mixtral layer launches 6: QKV, attention, O + residual + norm, and the three moe kernels of
    a decode step: route, gate/up, down + combine + residual add.)"""
    for model in ("mha_untied_hd32", "gqa_tied_hd16"):
        sim = sim_build(TINY / model, f"cu-{model}")
        r = subprocess.run([str(sim), "--info"], capture_output=True, text=True, timeout=120)
        m = re.search(r"(\d+) launches per decode step: (\d+(?:\.\d+)?) per layer", r.stdout)
        assert m, r.stdout
        assert float(m.group(2)) + 1 <= 6, m.group(0)  # + the split-K combine launch


# ---- a real GPU, when there is one -----------------------------------------------------


GPU_VARIANTS = {  # what each real-GPU run exercises: environment of the CUDA binary
    "default": {},                                    # embedded cubins, cuBLASLt prefill, decode graphs
    "no-graphs": {"INGOT_CUDA_GRAPHS": "0"},          # every launch issued one by one
    "tiled-gemm": {"INGOT_CUBLASLT": "0"},            # the hand-written GEMM for dense weights
    "nvrtc-jit": {"INGOT_JIT": "1"},                  # kernels compiled by NVRTC for this exact device
    "split-k": {"INGOT_ATTN_SPLITS": "3"},            # split-K decode attention + combine
}


NO_GPU = ("no GPU on this machine: the real-GPU tests run where one is (the same comparisons as the cudasim tests, "
          "on the device)")


def gpu_binary(model, name, *opts):
    """The nvcc build of a tiny model, or a skip naming the test when there is no GPU: at once when
    no NVIDIA driver is loaded (no control device: nothing CUDA can run, so no build is spent on
    it), else when the binary itself finds no device."""
    if not (os.path.exists("/dev/nvidiactl") or os.path.exists("/proc/driver/nvidia/version")):
        pytest.skip(NO_GPU)
    binary = cuda_build(TINY / model, name, *opts)
    probe = subprocess.run([str(binary), "--info"], capture_output=True, text=True, timeout=300)
    if probe.returncode != 0 and "no CUDA device" in probe.stderr:
        pytest.skip(NO_GPU)
    assert probe.returncode == 0, probe.stderr
    return binary


@pytest.mark.skipif(SAN, reason="GPU runs use the optimized build")
@pytest.mark.parametrize("variant", sorted(GPU_VARIANTS))
def test_real_gpu_forward_matches_cpu(built, tmp_path, monkeypatch, variant):
    """On a GPU: the nvcc build against the CPU backend within 1e-3 for prefill, chunked prefill and
    decode, on every host path (graphs or not, cuBLASLt or the tiled GEMM, embedded cubins or the
    NVRTC JIT with its disk cache, split-K)."""
    model = "mha_untied_hd32"
    binary = gpu_binary(model, f"cuda-{model}")
    for k, v in GPU_VARIANTS[variant].items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("INGOT_CACHE_DIR", str(tmp_path / "jit-cache"))
    want = logits(cpu_build(TINY / model, f"t-{model}"), TOKENS, tmp_path=tmp_path)
    for mode, args in MODES.items():
        got = logits(binary, TOKENS, *args, tmp_path=tmp_path)
        assert float(np.abs(got - want).max()) <= TOL, f"{variant} {mode}"
    if variant == "nvrtc-jit":  # the second start loads the cached cubin instead of compiling
        r = subprocess.run([str(binary), "logits", "--tokens", "1,2,3", "--out", str(tmp_path / "j.f32")],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0 and "JIT-compiled" in r.stderr and "(cache)" in r.stderr, r.stderr


@pytest.mark.skipif(SAN, reason="GPU runs use the optimized build")
@pytest.mark.parametrize("model", sorted(HALF_MODELS))
def test_real_gpu_cublaslt_half_inputs(built, tmp_path, model):
    """On a GPU: cuBLASLt with F16/BF16 inputs within the bound of test_cudasim_cublaslt_half_inputs."""
    binary = gpu_binary(model, f"cuda-{model}")
    layers = json.loads((TINY / model / "config.json").read_text())["num_hidden_layers"]
    want = logits(cpu_build(TINY / model, f"t-{model}"), TOKENS, tmp_path=tmp_path)
    got = logits(binary, TOKENS, tmp_path=tmp_path)
    assert float(np.abs(got - want).max()) <= HALF_MODELS[model] * (4 * layers + 1) * float(np.abs(want).max())
