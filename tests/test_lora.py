"""LoRA adapters (runtime/load/lora.h, runtime/core/lora_step.h) against transformers + PEFT.

Each family's first tiny fixture (tests/fixtures/families) gets a random PEFT adapter
(tests/lora_ref.py: A and B both drawn, so the update moves the logits by about their own size)
of rank 8 or 16 on its attention and MLP linears, saved as PEFT saves any adapter; ingot's binary
of that fixture, built as tests/test_families.py builds it, reads the adapter with --lora and must
give PEFT's logits within the families' bound, 1e-4 (the update adds two more matmuls whose
summation order differs from torch's; observed <= 4e-5). The same with --lora-merge (W + scale B A
folded in at load). Then what serving relies on: sequences of different adapters and of the base
model in one step each get what they get alone, the prefix cache never hands one adapter's KV to
another, the server routes a request's "model" to its adapter and lists them, and every malformed
adapter is refused with the reason.
"""
import json
import shutil
import subprocess

import numpy as np
import pytest

from conftest import BREADTH, SAN
from lora_ref import make_adapter
from modelbuild import FIXTURES, build, logits, run_batch

FAMILIES = FIXTURES / "families"
MODELS = sorted(p.name for p in FAMILIES.iterdir() if (p / "reference.json").exists())
FAMILY = {m: json.loads((FAMILIES / m / "reference.json").read_text())["family"] for m in MODELS}
FIRST_OF_FAMILY = {FAMILY[m]: m for m in reversed(MODELS)}
BOUND = 1e-4

# Targets where PEFT's every nn.Linear is not what the model computes per token: a mixture of
# experts' experts are parameters (PEFT turns their names into target_parameters, refused);
# DeepSeek-V2's kv_b_proj is absorbed into the attention (test_merge takes it); Granite 4.0's
# shared MLP input_linear is read as two weights joined at load.
TARGETS = {
    "deepseek2": ["q_proj", "kv_a_proj_with_mqa", "o_proj"],
    "qwen3moe": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "qwen3next": ["q_proj", "k_proj", "v_proj", "o_proj", "in_proj_qkvz", "in_proj_ba", "out_proj"],
    "granitehybrid": ["q_proj", "k_proj", "v_proj", "o_proj", "in_proj", "out_proj", "output_linear"],
}
CASES = [pytest.param(m, rank, marks=() if rank == (16 if i % 2 else 8) else BREADTH, id=f"{m}-r{rank}")
         for i, m in enumerate(sorted(FIRST_OF_FAMILY.values())) for rank in (8, 16)]


def tokens_of(model):
    return json.loads((FAMILIES / model / "reference.json").read_text())["tokens"]


@pytest.fixture(scope="module")
def adapters(tmp_path_factory):
    """make(model, rank, **options) -> (adapter dir, PEFT's logits), made once per module."""
    made = {}

    def make(model, rank, **kw):
        key = (model, rank, tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in kw.items())))
        if key not in made:
            out = tmp_path_factory.mktemp(f"lora-{model}-r{rank}")
            kw.setdefault("targets", TARGETS.get(FAMILY[model]))
            made[key] = (out, make_adapter(FAMILIES / model, out, rank, **kw)[0])
        return made[key]
    return make


@pytest.mark.parametrize("model, rank", CASES)
def test_adapter_matches_peft(model, rank, adapters, tmp_path, built):
    if SAN and FAMILY[model] != "llama":
        pytest.skip("sanitizer pass: the llama fixture (every family runs the same adapter code)")
    path, expected = adapters(model, rank)
    binary = build(FAMILIES / model, f"f-{model}")
    got = logits(binary, tokens_of(model), weights=None, tmp_path=tmp_path, lora=path)
    err = np.abs(got - expected).max()
    assert err <= BOUND, f"{model} rank {rank}: max |delta| {err:.3g}"


@pytest.mark.parametrize("mode", [("--chunk", "7"), ("--decode",), ("unfused",)], ids=["chunked", "decode", "unfused"])
def test_adapter_in_every_mode(mode, adapters, tmp_path, built):
    """Prefill in chunks, token by token (the decode step's kernels), and the unfused build."""
    model = FIRST_OF_FAMILY["llama"]
    path, expected = adapters(model, 16)
    binary = build(FAMILIES / model, f"f-{model}-nofuse", "--no-fuse") if mode == ("unfused",) else \
        build(FAMILIES / model, f"f-{model}")
    got = logits(binary, tokens_of(model), *(() if mode == ("unfused",) else mode), tmp_path=tmp_path, lora=path)
    assert np.abs(got - expected).max() <= BOUND


def test_rslora_scale(adapters, tmp_path, built):
    """use_rslora: the update scaled by alpha / sqrt(rank), not alpha / rank."""
    model = FIRST_OF_FAMILY["qwen3"]
    path, expected = adapters(model, 16, rslora=True, alpha=8)
    got = logits(build(FAMILIES / model, f"f-{model}"), tokens_of(model), tmp_path=tmp_path, lora=path)
    assert np.abs(got - expected).max() <= BOUND


@pytest.mark.parametrize("model, targets", [
    (FIRST_OF_FAMILY["llama"], None),
    # kv_b_proj takes no update per request (the attention absorbs it), a merged one it does
    (FIRST_OF_FAMILY["deepseek2"], ["q_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"]),
    (FIRST_OF_FAMILY["phi3"], None),  # q, k, v as row slices of qkv_proj: each its rows of B
], ids=["llama", "deepseek2-kv_b_proj", "phi3-sliced"])
def test_merge_matches_peft(model, targets, adapters, tmp_path, built):
    path, expected = adapters(model, 8, targets=targets)
    binary = build(FAMILIES / model, f"f-{model}")
    got = logits(binary, tokens_of(model), tmp_path=tmp_path, lora_merge=path)
    assert np.abs(got - expected).max() <= BOUND
    info = subprocess.run([str(binary), "--lora-merge", str(path), "--info"], capture_output=True,
                                        text=True, check=True).stdout
    assert "merged adapter:  " + str(path) in info and "with a LoRA adapter merged in" in info, info


def test_absorbed_weight_is_refused_per_request(adapters, tmp_path, built):
    model = FIRST_OF_FAMILY["deepseek2"]
    path, _ = adapters(model, 8, targets=["q_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"])
    r = run_lora(build(FAMILIES / model, f"f-{model}"), path, tokens_of(model), tmp_path)
    assert r.returncode == 1 and "kv_b_proj.weight': the model does not read it as a linear over the step's " \
                                  "tokens" in r.stderr and "--lora-merge folds it in" in r.stderr, r.stderr


def test_mixed_step_gives_each_sequence_its_own_adapter(adapters, tmp_path, built):
    """Base and two adapters' sequences in one step (and the same prompt under each: the prefix
    cache must not give one adapter's blocks to another) get, token for token, what each gets
    alone; and an adapter changes what is generated."""
    model = FIRST_OF_FAMILY["llama"]
    a, _ = adapters(model, 8)
    b, _ = adapters(model, 16)
    binary = build(FAMILIES / model, f"f-{model}")
    prompt = tokens_of(model)[:40]  # two full KV blocks: what the prefix cache shares
    other = tokens_of(model)[8:44]
    names = [f"f-{model}", "a", "b"]
    reqs = [{"prompt": p, "max_tokens": 12, "model": n, "ignore_eos": True} for p in (prompt, other) for n in names]
    opts = ("--lora", f"a={a}", "--lora", f"b={b}")
    together, stats = run_batch(binary, reqs, *opts, tmp_path=tmp_path)
    assert stats["steps"] < 12 * len(reqs), stats  # they did share steps
    for i, req in enumerate(reqs):
        alone, _ = run_batch(binary, [req], *opts, "--no-prefix-cache", tmp_path=tmp_path)
        assert together[i]["tokens"] == alone[0]["tokens"], (req["model"], together[i], alone[0])
    by_model = {r["model"]: together[i]["tokens"] for i, r in enumerate(reqs[:3])}
    assert len({tuple(t) for t in by_model.values()}) == 3, by_model


def run_lora(binary, path, tokens, tmp_path, *extra):
    return subprocess.run(
        [str(binary), "--lora", str(path), *extra, "logits", "--tokens", ",".join(map(str, tokens)),
         "--out", str(tmp_path / "out.f32")], capture_output=True, text=True)


def edit_adapter(src, dst, tensors=None, config=None):
    """A copy of a PEFT adapter with its tensors (name -> array, None deletes) and config keys changed."""
    from safetensors.numpy import load_file, save_file
    shutil.copytree(src, dst)
    if tensors:
        t = load_file(str(src / "adapter_model.safetensors"))
        for k, v in tensors(t).items():
            if v is None:
                t.pop(k)
            else:
                t[k] = v
        save_file(t, str(dst / "adapter_model.safetensors"))
    if config:
        c = json.loads((src / "adapter_config.json").read_text())
        c.update(config)
        (dst / "adapter_config.json").write_text(json.dumps(c))
    return dst


def numpy_adapter(model_dir, out, rank=8):
    """A PEFT-format adapter of random values on q_proj and v_proj, written with numpy and safetensors
    (no torch: what the refusal tests start from, also under the sanitizers)."""
    from safetensors import safe_open
    from safetensors.numpy import save_file
    rng = np.random.default_rng(0)
    tensors = {}
    with safe_open(str(model_dir / "model.safetensors"), "np") as f:
        for name in f.keys():
            if name.endswith(("q_proj.weight", "v_proj.weight")):
                o, i = f.get_slice(name).get_shape()
                stem = "base_model.model." + name[: -len(".weight")]
                tensors[stem + ".lora_A.weight"] = rng.normal(0, 0.1, (rank, i)).astype(np.float32)
                tensors[stem + ".lora_B.weight"] = rng.normal(0, 0.1, (o, rank)).astype(np.float32)
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "adapter_model.safetensors"))
    (out / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": rank, "lora_alpha": 2 * rank,
                                                         "target_modules": ["q_proj", "v_proj"], "bias": "none"}))
    return out


A0 = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
B0 = "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"
BAD = {
    "another model's": (lambda t: {A0.replace("q_proj", "qkv_proj"): t[A0], B0.replace("q_proj", "qkv_proj"): t[B0]},
                        None, "the model has no weight 'model.layers.0.self_attn.qkv_proj.weight'"),
    "rank mismatch": (lambda t: {B0: t[B0][:, :4].copy()}, None, "where A must be [rank][64] and B [64][rank]"),
    "half a pair": (lambda t: {B0: None}, None, f"'{A0}' has no '{B0}'"),
    "not a pair": (lambda t: {"base_model.model.model.layers.0.self_attn.q_proj.weight": t[A0]}, None,
                   "is not a LoRA pair's half"),
    "NaN": (lambda t: {A0: np.full_like(t[A0], np.nan)}, None, "holds a NaN or an infinity"),
    "DoRA": (None, {"use_dora": True}, "use_dora is set: DoRA (weight-decomposed) adapters are not implemented"),
    "trained bias": (None, {"bias": "all"}, "adapters with trained biases are not implemented"),
    "modules_to_save": (None, {"modules_to_save": ["lm_head"]}, "modules_to_save is set"),
    "not LoRA": (None, {"peft_type": "IA3"}, "peft_type is \"IA3\", not \"LORA\""),
    "no alpha": (None, {"lora_alpha": 0}, "lora_alpha must be a non-zero number"),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_adapter_is_refused(case, tmp_path, built):
    model = FIRST_OF_FAMILY["llama"]
    src = numpy_adapter(FAMILIES / model, tmp_path / "good")
    tensors, config, message = BAD[case]
    path = edit_adapter(src, tmp_path / "adapter", tensors, config)
    binary = build(FAMILIES / model, f"f-{model}")
    for flag in ("--lora", "--lora-merge"):
        r = subprocess.run([str(binary), flag, str(path), "logits", "--tokens", "1,2,3", "--out",
                                          str(tmp_path / "o.f32")], capture_output=True, text=True)
        assert r.returncode == 1 and message in r.stderr and "Sanitizer" not in r.stderr, (flag, r.stderr)


def test_bad_adapter_names_and_files(tmp_path, built):
    model = FIRST_OF_FAMILY["llama"]
    src = numpy_adapter(FAMILIES / model, tmp_path / "good")
    binary = build(FAMILIES / model, f"f-{model}")
    cases = [
        (("--lora", f"bad name={src}"), "is not 1 to 63 letters"),
        (("--lora", f"f-{model}={src}"), "is already the model's or another adapter's"),
        (("--lora", f"x={src}", "--lora", f"x={src}"), "is already the model's or another adapter's"),
        (("--lora", str(tmp_path)), "adapter_config.json: cannot open"),
        # a GGUF adapter names a GGUF checkpoint's weights; this binary reads safetensors
        (("--lora", str(write_gguf_adapter(tmp_path / "a.gguf", {}))), "this binary was built from a safetensors one"),
    ]
    for args, message in cases:
        r = subprocess.run([str(binary), *args, "logits", "--tokens", "1,2", "--out",
                                          str(tmp_path / "o.f32")], capture_output=True, text=True)
        assert r.returncode == 1 and message in r.stderr, (args, r.stderr)


def write_gguf_adapter(path, tensors, alpha=16.0, kind="lora"):
    """A GGUF LoRA adapter as llama.cpp's convert_lora_to_gguf.py writes one (gguf-py's writer):
    general.type "adapter", adapter.type, adapter.lora.alpha, tensors NAME.lora_a [rank][in] and
    NAME.lora_b [out][rank] (numpy's row-major shapes)."""
    import gguf
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_type("adapter")
    w.add_string("adapter.type", kind)
    w.add_float32("adapter.lora.alpha", alpha)
    for name, array in tensors.items():
        w.add_tensor(name, np.ascontiguousarray(array, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def smollm2_adapter(path, rank, seed, modules=("attn_q", "attn_v", "ffn_down")):
    """A random GGUF adapter of SmolLM2-135M (dim 576, 30 layers, 3 KV heads of 64, FFN 1536)."""
    rng = np.random.default_rng(seed)
    shapes = {"attn_q": (576, 576), "attn_k": (192, 576), "attn_v": (192, 576), "attn_output": (576, 576),
              "ffn_gate": (1536, 576), "ffn_up": (1536, 576), "ffn_down": (576, 1536)}
    tensors = {}
    for layer in range(30):
        for mod in modules:
            out, inp = shapes[mod]
            tensors[f"blk.{layer}.{mod}.weight.lora_a"] = rng.normal(0, 1 / np.sqrt(inp), (rank, inp))
            tensors[f"blk.{layer}.{mod}.weight.lora_b"] = rng.normal(0, 0.1, (out, rank))
    return write_gguf_adapter(path, tensors, alpha=2.0 * rank)


def test_served_adapters_per_request(tmp_path, request):
    """serve --lora NAME=PATH: /v1/models lists each adapter over the model; a request's "model"
    picks its adapter, concurrent requests of the base model and of two adapters share steps and
    each gets what it gets alone; a name that is neither is a 404 that says where to look."""
    import concurrent.futures

    import requests as http

    from modelbuild import serving_binary
    from serverproc import ServerProc
    binary = serving_binary(request)
    a = smollm2_adapter(tmp_path / "alpha.gguf", 8, 1)
    b = smollm2_adapter(tmp_path / "beta.gguf", 4, 2, ("attn_k", "attn_output", "ffn_gate", "ffn_up"))
    srv = ServerProc(binary, "--lora", f"alpha={a}", "--lora", f"beta={b}").start()
    try:
        models = http.get(srv.url + "/v1/models", timeout=30).json()["data"]
        assert [m["id"] for m in models] == ["smollm2", "alpha", "beta"], models
        assert models[1]["parent"] == "smollm2" and models[1]["root"] == str(a), models[1]
        assert models[1]["lora"].startswith("rank 8, alpha 16, 90 of 210 linears (attn_q, attn_v, ffn_down)"), models[1]

        def complete(model, prompt):
            r = http.post(srv.url + "/v1/completions", timeout=300, json={
                "model": model, "prompt": prompt, "max_tokens": 10, "temperature": 0})
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["model"] == model
            return body["choices"][0]["text"]

        jobs = [(m, p) for p in ("The capital of France is", "Once upon a time") for m in ("smollm2", "alpha", "beta")]
        alone = [complete(m, p) for m, p in jobs]
        with concurrent.futures.ThreadPoolExecutor(len(jobs)) as ex:
            together = list(ex.map(lambda j: complete(*j), jobs))
        assert together == alone, (jobs, together, alone)
        for k in (1, 2):  # each adapter changes the text of one prompt at least
            assert alone[k] != alone[0] or alone[k + 3] != alone[3], alone
        r = http.post(srv.url + "/v1/completions", timeout=30, json={"model": "gamma", "prompt": "x", "max_tokens": 1})
        assert r.status_code == 404 and "its adapters (GET /v1/models lists them)" in r.text, r.text
    finally:
        rc = srv.stop()
    assert rc == 0 and not srv.sanitizer_report(), srv.log


LORA_GGUF = FIXTURES / "lora_gguf" / "qwen3"  # tests/fixtures/make_lora_gguf.py


@pytest.mark.parametrize("how", ["lora", "lora_merge"])
def test_gguf_adapter_matches_llamacpp_and_peft(how, tmp_path, built):
    """llama.cpp's convert_lora_to_gguf.py output for the Qwen3 GGUF fixture: the adapter applied per
    step and merged, against transformers + PEFT on the checkpoint and llama.cpp on the GGUF."""
    ref = json.loads((LORA_GGUF / "reference.json").read_text())
    binary = build(FIXTURES / ref["base"], "gg-qwen3")
    got = logits(binary, ref["tokens"], tmp_path=tmp_path, **{how: LORA_GGUF / "adapter.f32.gguf"})
    for oracle, bound in (("transformers", BOUND), ("llamacpp", BOUND + ref["max_delta_llamacpp_transformers"])):
        expected = np.fromfile(LORA_GGUF / f"{oracle}.f32", dtype="<f4").reshape(ref["shape"])
        err = float(np.abs(got - expected).max())
        assert err <= bound, f"{how} vs {oracle}: max |delta| {err:.3g}"


def test_router_routes_adapters_to_their_model(tmp_path, request):
    """ingot-router: the adapters a model's serve options load are models a request may name,
    listed with their parent, and routed to that model's process; a name taken twice is refused."""
    import requests as http

    from conftest import OBJDIR
    from modelbuild import serving_binary
    from serverproc import ServerProc
    binary = serving_binary(request)
    a = smollm2_adapter(tmp_path / "alpha.gguf", 8, 1)
    srv = ServerProc(OBJDIR / "ingot-router", "--model", "smollm2", binary, "--", "--kv-memory", "64",
                     "--lora", f"alpha={a}", command=(), start_timeout=60).start()
    try:
        ids = [(m["id"], m.get("parent")) for m in http.get(srv.url + "/v1/models", timeout=30).json()["data"]]
        assert ids == [("smollm2", None), ("alpha", "smollm2")], ids
        for model in ("alpha", "smollm2"):
            r = http.post(srv.url + "/v1/completions", timeout=300, json={
                "model": model, "prompt": "The capital of France is", "max_tokens": 10, "temperature": 0})
            assert r.status_code == 200 and r.json()["model"] == model, r.text
        assert http.get(srv.url + "/v1/models/alpha", timeout=30).json()["parent"] == "smollm2"
    finally:
        rc = srv.stop()
    assert rc == 0, srv.log
    r = subprocess.run([OBJDIR / "ingot-router", "--model", "alpha", binary, "--", "--lora", f"alpha={a}"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "the adapter name 'alpha' is already a model's or an adapter's" in r.stderr, r.stderr
