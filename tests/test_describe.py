"""The description language refuses what it cannot trust, at the models.lua line that wrote it.

Each case edits a copy of models.lua and runs the generator on a fixture checkpoint (a dry run
where the mistake is one the generator must name; a full build through `ingot build --models`
where it is one only the logits show). What is checked:

- an unknown op, an unknown option of an op, or a weight read but given to no op is an error that
  names the line (and lists the ops or options there are), not a Lua traceback and not silence;
- partial rotary widths outside the head are refused; a declared weight shape that the checkpoint
  does not have is refused by the generator, not first by the binary at load;
- one entry's mistake breaks no other entry's build, and is reported when its own checkpoint is
  cast;
- a config value derived from others (`head_dim = {default = "dim / heads"}`) needs no key;
- a deliberately wrong GPT-NeoX entry (each of the mistakes a researcher could make with its new
  ops: RMSNorm for LayerNorm, a dropped norm bias, the tanh GELU for the exact one, an even
  rotary width for an odd one, the serial residual for the parallel one) fails against
  transformers' logits: by an error, or by more than the check's bound (1e-4); and so does a wrong
  gpt-oss entry (sinks or router bias dropped, the SwiGLU without its clamp or its up + 1, up read
  from gate's columns, a transposed expert tensor read as stored), and a wrong LFM2 entry (the
  convolution's bias dropped, B and C swapped, the convolution over x instead of B * x, the output
  gated by B, the layer kinds swapped).
"""
import subprocess

import numpy as np
import pytest

from conftest import BREADTH, ROOT
from modelbuild import FIXTURES, logits, reference

FAMILIES = FIXTURES / "families"
MODELS_LUA = (ROOT / "models.lua").read_text()
BOUND = 1e-4  # scripts/check_entry.py's bound for logits of this scale


def edited(tmp_path, old, new):
    """models.lua with the first occurrence of old replaced (the gptneox entry's, where StableLM
    shares a line: gptneox comes first)."""
    assert old in MODELS_LUA, f"{old!r} is not in models.lua"
    path = tmp_path / "models.lua"
    path.write_text(MODELS_LUA.replace(old, new, 1))
    return path


def line_of(text, at):
    return text[:text.index(at)].count("\n") + 1


def dry_run(built, tmp_path, fixture, models):
    """The generator alone on a fixture: (exit status, stderr)."""
    d = FAMILIES / fixture
    inspect = tmp_path / f"{fixture}-inspect.json"
    with open(inspect, "w") as f:
        subprocess.run([str(ROOT / "build" / "_obj" / "tools" / "ingot-inspect"), str(d)], stdout=f, check=True,
                       timeout=60)
    r = subprocess.run(["lua5.4", str(ROOT / "generator" / "main.lua"), "--inspect", str(inspect), "--source", str(d),
                        "--hf-config", str(d / "config.json"), "--name", "x", "--out", str(tmp_path / "out"),
                        "--models", str(models), "--dry-run"], capture_output=True, text=True, timeout=60)
    return r.returncode, r.stderr


NEOX_LAYER = "local a = attention(q, k, part(2), {heads = H, kv_heads = H, head_dim = D})"
NEOX_ROPE = "local q, k = rope(part(0), rope_opts(c, H)), rope(part(1), rope_opts(c, H))"


@pytest.mark.parametrize("old, new, at, words", [
    ("local qkv = linear(layernorm(x,", "local qkv = linear(layer_norm(x,", "local qkv = linear(layernorm(x,",
     ["unknown op or name 'layer_norm'", "ops: ", "layernorm", "rmsnorm", "gelu"]),
    (NEOX_LAYER, NEOX_LAYER.replace("head_dim = D}", "head_dim = D, sink = w.o_bias}"), NEOX_LAYER,
     ["attention: unknown option 'sink'", "kv_heads", "sinks", "window"]),
    (NEOX_LAYER, NEOX_LAYER.replace("head_dim = D}", "head_dim = D, sinks = w.o_bias}"), NEOX_LAYER,
     ["attention: sinks o_bias has shape [72], expected [6] (one per query head)"]),
    ("rot_dim = c.rot_dim,", "rot_dim = c.rot_dim, rotary = 0.5,", NEOX_ROPE, ["rope: unknown option 'rotary'", "rot_dim"]),
    ("rot_dim = c.rot_dim,", "rot_dim = 2 * c.head_dim,", NEOX_ROPE,
     ["rope: rot_dim 24 does not fit heads of 12 (an integer in 1..12"]),
    ("local H, D, ab = c.heads, c.head_dim, c.attention_bias",
     "local H, D, ab = c.heads, c.head_dim, c.attention_bias; local unused = w.o_bias",
     "local H, D, ab = c.heads, c.head_dim, c.attention_bias", ["weight 'o_bias' is read but no op uses it"]),
    ('embed        = {hf = "gpt_neox.embed_in.weight", gguf = "token_embd.weight", shape = {"vocab", "dim"}}',
     'embed        = {hf = "gpt_neox.embed_in.weight", gguf = "token_embd.weight", shape = {"vocab + 1", "dim"}}',
     'embed        = {hf = "gpt_neox.embed_in.weight"',
     ["weight 'embed' is [421, 72] by its shape in models.lua", "'gpt_neox.embed_in.weight' is [420, 72]"]),
], ids=["unknown-op", "unknown-attention-option", "sinks-shape", "unknown-rope-option", "rot-dim-too-wide", "read-unused",
        "shape-mismatch"])
def test_mistakes_are_errors_at_their_line(built, tmp_path, old, new, at, words):
    models = edited(tmp_path, old, new)
    rc, err = dry_run(built, tmp_path, "gptneox_serial_odd", models)
    assert rc != 0 and f"models.lua:{line_of(MODELS_LUA, at)}: error:" in err, err
    assert "traceback" not in err.lower(), err
    for w in words:
        assert w in err, err


def test_one_broken_entry_breaks_no_other(built, tmp_path):
    """A mistake in the Qwen2 entry: GPT-NeoX still builds; a Qwen2 checkpoint gets the mistake."""
    old = 'M.qwen2 = {\n  hf = {"Qwen2ForCausalLM"},'
    models = edited(tmp_path, old, old + "\n  typo_key = 1,")
    rc, err = dry_run(built, tmp_path, "gptneox_serial_odd", models)
    assert rc == 0, err
    rc, err = dry_run(built, tmp_path, "qwen2_gqa", models)
    assert rc != 0 and "entry 'qwen2': unknown key 'typo_key'" in err, err


def fixture_build(fixture, models, name, *opts):
    r = subprocess.run([str(ROOT / "ingot"), "build", str(FAMILIES / fixture), "--name", name,
                        "--kv-dtype", "f32", "--models", str(models), *opts],
                       capture_output=True, text=True, timeout=900)
    return r.returncode, r.stdout.strip().splitlines()[-1] if r.returncode == 0 else r.stderr


def assert_wrong_entry_fails(tmp_path, fixture, old, new, error):
    """The entry with `old` edited to `new`, cast from `fixture`: an error containing `error` (a
    tensor left unread, when given), then with --allow-unused logits beyond the bound."""
    models = edited(tmp_path, old, new)
    name = "t-wrong-" + str(abs(hash(new)) % 10 ** 6)
    rc, out = fixture_build(fixture, models, name)
    if error:
        assert rc != 0 and error in out, out
        rc, out = fixture_build(fixture, models, name, "--allow-unused")
    assert rc == 0, out
    tokens, want = reference(FAMILIES / fixture)
    got = logits(out, tokens, tmp_path=tmp_path)
    err = float(np.abs(got - want).max())
    assert err > BOUND, f"a wrong entry passes: max |delta| = {err:.3g}"
    subprocess.run(["rm", "-rf", str(ROOT / "build" / name)])


NEOX_HEAD = "return linear(layernorm(x, w.final_norm, w.final_norm_b, c.eps), w.lm_head)"


@pytest.mark.parametrize("old, new, error", [
    (NEOX_HEAD, "return linear(rmsnorm(x, w.final_norm, c.eps), w.lm_head)",
     "not used by models.lua entry 'gptneox'"),
    (NEOX_HEAD, "return linear(layernorm(x, w.final_norm, nil, c.eps), w.lm_head)",
     "not used by models.lua entry 'gptneox'"),
    ("({gelu = gelu, gelu_new", "({gelu = gelu_tanh, gelu_new", None),
    ("rot_dim = c.rot_dim,", "rot_dim = c.rot_dim + c.rot_dim % 2,", None),
    ("if c.parallel then return", "if not c.parallel then return", None),
], ids=["rmsnorm-for-layernorm", "dropped-norm-bias", "gelu-tanh-for-gelu", "even-rotary-width", "residual-form"])
def test_wrong_neox_entry_fails_against_transformers(built, tmp_path, old, new, error):
    """gptneox_serial_odd (odd rotary width, serial residual, exact GELU; transformers' logits):
    the right entry is within 2e-6 (test_families); each wrong one fails, by an error or beyond
    the bound. A mistake that leaves a tensor unread is an error unless --allow-unused, and then
    the logits still show it."""
    assert_wrong_entry_fails(tmp_path, "gptneox_serial_odd", old, new, error)


@pytest.mark.parametrize("old, new, error", [
    ("window = sliding and c.window or 0, sinks = w.sinks}", "window = sliding and c.window or 0}",
     "not used by models.lua entry 'gptoss'"),
    ("router_bias = w.router_bias, alpha", "alpha", "not used by models.lua entry 'gptoss'"),
    ("limit = c.swiglu_limit, up_offset = 1}", "up_offset = 1}", None),
    ("limit = c.swiglu_limit, up_offset = 1}", "limit = c.swiglu_limit}", None),
    ('rows = "ffn", first = 1, every = 2, transposed = true', 'rows = "ffn", first = 0, every = 2, transposed = true', None),
    ('rows = "dim", transposed = true}}', 'rows = "dim"}}', "is [4, 48, 64] in"),
], ids=["dropped-sinks", "dropped-router-bias", "no-clamp", "no-up-offset", "up-as-gate", "down-not-transposed"])
def test_wrong_gptoss_entry_fails_against_transformers(built, tmp_path, old, new, error):
    """gptoss_sinks (sinks, router and expert biases, the clamp crossed, experts stacked and
    transposed with gate and up interleaved; transformers' logits): each wrong entry fails, by an
    error or beyond the bound. A stored tensor read in the wrong orientation is an error at build."""
    if error and error.startswith("is ["):
        models = edited(tmp_path, old, new)
        rc, out = fixture_build("gptoss_sinks", models, "t-wrong-oss-shape")
        assert rc != 0 and error in out and "down_proj" in out, out
        return
    assert_wrong_entry_fails(tmp_path, "gptoss_sinks", old, new, error)


LFM2_CONV = "local y = gate * causal_conv(b * xs, w.conv, cb and w.conv_bias)"


@pytest.mark.parametrize("old, new, error", [
    (LFM2_CONV, LFM2_CONV.replace("cb and w.conv_bias", "nil"), "not used by models.lua entry 'lfm2'"),
    ("columns(bcx, 0, c.dim), columns(bcx, c.dim, c.dim)", "columns(bcx, c.dim, c.dim), columns(bcx, 0, c.dim)", None),
    pytest.param(LFM2_CONV, LFM2_CONV.replace("causal_conv(b * xs,", "causal_conv(xs,"), None, marks=BREADTH),
    pytest.param(LFM2_CONV, LFM2_CONV.replace("gate * causal_conv(", "b * causal_conv("), None, marks=BREADTH),
    pytest.param('if c.layer_types then attn = c.layer_types[c.layer + 1] ~= "conv"',
     'if c.layer_types then attn = c.layer_types[c.layer + 1] == "conv"', "(tensor 'model.layers.0.conv.in_proj.weight') is not in", marks=BREADTH),
], ids=["dropped-conv-bias", "b-and-c-swapped", "ungated-input", "b-for-c", "layer-kinds-swapped"])
def test_wrong_lfm2_entry_fails_against_transformers(built, tmp_path, old, new, error):
    """lfm2_bias (a 4-tap convolution with biases, attention then two convolution layers;
    transformers' logits): each wrong entry fails, by an error or beyond the bound. A state the
    engine failed to carry across chunks is not an entry's to get wrong (the op carries it): the
    chunked and token-by-token modes of test_families compare it with the one-step prefill. A layer
    read as the other kind asks for tensors the checkpoint does not have: an error at build."""
    if error and error.endswith("is not in"):
        rc, out = fixture_build("lfm2_bias", edited(tmp_path, old, new), "t-wrong-lfm2-kinds")
        assert rc != 0 and error in out, out
        return
    assert_wrong_entry_fails(tmp_path, "lfm2_bias", old, new, error)


GH_SCAN = "ssm_a_log      = {by_format = {hf = true, gguf = false}}"


@pytest.mark.parametrize("old, new, error", [
    (GH_SCAN, GH_SCAN.replace("hf = true", "hf = false"), None),
    ("y = rmsnorm(y * silu(z), w.ssm_norm, c.eps, {heads = c.ssm_groups})", "y = rmsnorm(y * silu(z), w.ssm_norm, c.eps)",
     None),
    pytest.param("y = rmsnorm(y * silu(z), w.ssm_norm,", "y = rmsnorm(y * z, w.ssm_norm,", None, marks=BREADTH),
    pytest.param("c.ssm_conv_bias and w.ssm_conv1d_bias))", "nil))", "not used by models.lua entry 'granitehybrid'", marks=BREADTH),
    pytest.param("if c.experts > 0 then", "if false then", "not used by models.lua entry 'granitehybrid'", marks=BREADTH),
], ids=["a-not-from-log", "norm-over-the-row", "ungated-silu", "dropped-conv-bias", "dropped-moe"])
def test_wrong_granitehybrid_entry_fails_against_transformers(built, tmp_path, old, new, error):
    """granitehybrid_moe (Mamba-2 layers with 2 groups of B/C, attention, a shared MLP beside 4
    experts; transformers' logits): A read as stored instead of -exp(A_log), the gated norm over
    the whole row instead of per group, the gate without its SiLU, the convolution's bias or the
    MoE dropped: each fails, by an error or beyond the bound."""
    assert_wrong_entry_fails(tmp_path, "granitehybrid_moe", old, new, error)


@pytest.mark.parametrize("old, new, error", [
    ("x = x + linear(att * sigmoid(gate), w.o, ab and w.o_bias)", "x = x + linear(att, w.o, ab and w.o_bias)", None),
    ("return x + m + shared * sigmoid(linear(h, w.shared_router))", "return x + m + shared",
     "not used by models.lua entry 'qwen3next'"),
    pytest.param("local b, a = columns(ba, 0, r, {heads = KH}), columns(ba, r, r, {heads = KH})",
     "local a, b = columns(ba, 0, r, {heads = KH}), columns(ba, r, r, {heads = KH})", None, marks=BREADTH),
    pytest.param("return linear(rmsnorm(o, w.lin_norm, c.eps, {heads = VH}) * silu(z), w.lin_out)",
     "return linear(rmsnorm(o * silu(z), w.lin_norm, c.eps, {heads = VH}), w.lin_out)", None, marks=BREADTH),
    pytest.param("local q, k = columns(qkvz, 0, KD, {heads = KH}), columns(qkvz, KD, KD, {heads = KH})",
     "local q, k = columns(qkvz, 0, KD), columns(qkvz, KD, KD)", "causal_conv: weight lin_conv1d has shape [64, 4]", marks=BREADTH),
    pytest.param("local q, k = columns(qkvz, 0, KD, {heads = KH}), columns(qkvz, KD, KD, {heads = KH})",
     "local k, q = columns(qkvz, 0, KD, {heads = KH}), columns(qkvz, KD, KD, {heads = KH})", None, marks=BREADTH),
], ids=["ungated-attention", "ungated-shared-expert", "a-and-b-swapped", "gate-before-norm", "qkvz-not-per-key-head",
        "q-and-k-swapped"])
def test_wrong_qwen3next_entry_fails_against_transformers(built, tmp_path, old, new, error):
    """qwen3next_moe (Gated DeltaNet with two value heads per key head, gated attention, a MoE with
    a gated shared expert; transformers' logits): each wrong entry fails, by an error or beyond the
    bound (a description that cannot be traced is an error at its line)."""
    if error and error.startswith("causal_conv:"):
        rc, out = fixture_build("qwen3next_moe", edited(tmp_path, old, new), "t-wrong-q3n-cols")
        assert rc != 0 and error in out, out
        return
    assert_wrong_entry_fails(tmp_path, "qwen3next_moe", old, new, error)
