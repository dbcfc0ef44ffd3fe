"""A model binary given the wrong, broken or truncated checkpoint, or a bad request.

Each case must end in one clear error line on stderr and exit status 1 —
never a crash (the suite also runs under ASan+UBSan with INGOT_SAN=1).
The loaders' own byte-level corruption tests are in test_loaders.py; these
go through the generated load path: tensors checked against the description.
"""
import json
import shutil
import struct
import subprocess

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from modelbuild import FIXTURES, TINY, build, smollm2_gguf


@pytest.fixture(scope="module")
def tiny(built):
    return build(TINY / "mha_tied_hd24", "t-mha_tied_hd24")


def run(binary, *args):
    r = subprocess.run([str(binary), *map(str, args)], capture_output=True, text=True, timeout=120)
    assert "Sanitizer" not in r.stderr and "runtime error" not in r.stderr, r.stderr
    return r


def fails_with(binary, args, *words):
    r = run(binary, *args)
    assert r.returncode == 1, f"exit {r.returncode}\n{r.stderr}"
    err = r.stderr.strip()
    assert len(err.splitlines()) == 1, err
    for w in words:
        assert w in err, f"{w!r} not in: {err}"
    return err


def logits_args(weights, tokens="1,2,3"):
    return ["--weights", weights, "logits", "--tokens", tokens, "--out", "/dev/null"]


def copy_model(tmp_path, name="m"):
    dst = tmp_path / name
    shutil.copytree(TINY / "mha_tied_hd24", dst)
    return dst


def test_other_models_weights_are_refused_naming_tensor_and_shapes(tiny):
    err = fails_with(tiny, logits_args(TINY / "gqa_tied_hd40"), "expected shape", "found", "models.lua:")
    assert "model.embed_tokens.weight" in err or "model.layers.0" in err


def test_missing_tensor(tiny, tmp_path):
    d = copy_model(tmp_path)
    tensors = load_file(d / "model.safetensors")
    del tensors["model.layers.1.mlp.up_proj.weight"]
    save_file(tensors, d / "model.safetensors")
    fails_with(tiny, logits_args(d), "model.layers.1.mlp.up_proj.weight", "models.lua:")


def test_transposed_tensor(tiny, tmp_path):
    d = copy_model(tmp_path)
    tensors = load_file(d / "model.safetensors")
    name = "model.layers.0.mlp.down_proj.weight"
    tensors[name] = np.ascontiguousarray(tensors[name].T)
    save_file(tensors, d / "model.safetensors")
    fails_with(tiny, logits_args(d), name, "[96, 176]", "[176, 96]")


def test_unsupported_dtype(tiny, tmp_path):
    d = copy_model(tmp_path)
    tensors = load_file(d / "model.safetensors")
    tensors["model.norm.weight"] = tensors["model.norm.weight"].astype(np.int64)
    save_file(tensors, d / "model.safetensors")
    fails_with(tiny, logits_args(d), "model.norm.weight", "I64")


def test_weight_part_of_the_wrong_shape(built, tmp_path):
    """DeepSeek-V2's GGUF stores kv_b_proj in two parts (attn_k_b, attn_v_b) that the loader joins:
    a file whose attn_v_b holds each head's block transposed ([heads, kv_lora, v] for [heads, v,
    kv_lora], the same bytes) is refused, naming the part, both shapes and the declaring line."""
    good = FIXTURES / "gguf_families" / "deepseek2" / "model.f32.gguf"
    raw = bytearray(good.read_bytes())
    name = b"blk.1.attn_v_b.weight"
    at = raw.index(struct.pack("<Q", len(name)) + name) + 8 + len(name)  # its tensor info: n_dims, dims
    assert struct.unpack_from("<I", raw, at) == (3,)
    ne = struct.unpack_from("<3Q", raw, at + 4)
    struct.pack_into("<3Q", raw, at + 4, ne[1], ne[0], ne[2])
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(bytes(raw))
    binary = build(good, "gg-deepseek2")  # the binary test_gguf_families builds
    fails_with(binary, logits_args(bad), name.decode(), f"[{ne[2]}, {ne[1]}, {ne[0]}]", f"[{ne[2]}, {ne[0]}, {ne[1]}]",
               "part 2 of a weight declared at models.lua:")


@pytest.mark.parametrize("keep", [0, 7, 100, 5000, -1000, -1])
def test_truncated_checkpoint(tiny, tmp_path, keep):
    d = copy_model(tmp_path)
    data = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(data[:keep] if keep >= 0 else data[:len(data) + keep])
    fails_with(tiny, logits_args(d), "model.safetensors")


def test_missing_path(tiny, tmp_path):
    fails_with(tiny, logits_args(tmp_path / "nope"), "nope")


def test_truncated_gguf(tmp_path, built):
    gguf = smollm2_gguf()
    binary = build(gguf, "smollm2")
    cut = tmp_path / "cut.gguf"
    with open(gguf, "rb") as f:
        cut.write_bytes(f.read(50 << 20))
    fails_with(binary, ["--weights", cut, "--info"], "cut.gguf", "past end of file")


@pytest.mark.parametrize("args, words", [
    (["logits", "--tokens", "1,2,5000"], ["token id 5000", "vocabulary"]),
    (["logits", "--tokens", "1,x"], ["--tokens"]),
    (["logits"], ["--tokens"]),
    (["generate", "-p", "hi", "-n", "-3"], ["-n"]),
    (["generate", "-p", "hi", "--temp", "nan"], ["--temp"]),
    (["frobnicate"], []),
])
def test_bad_command_lines(tiny, args, words):
    r = run(tiny, *args)
    assert r.returncode in (1, 2), r.stderr
    for w in words:
        assert w in r.stderr


def test_sequence_longer_than_context(tiny):
    info = json.loads((TINY / "mha_tied_hd24" / "config.json").read_text())
    n = info["max_position_embeddings"] + 1
    fails_with(tiny, ["logits", "--tokens", ",".join(["1"] * n), "--out", "/dev/null"], "context")


# ---- every tensor of the checkpoint must be used ---------------------------

def build_fails(model, name, *words, opts=()):
    from conftest import ROOT
    r = subprocess.run([str(ROOT / "ingot"), "build", str(model), "--name", name, *opts],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0, f"build succeeded:\n{r.stderr}"
    for w in words:
        assert w in r.stderr, f"{w!r} not in: {r.stderr}"
    return r


def test_checkpoint_with_an_unused_tensor_does_not_build(built, tmp_path):
    """A tensor that no weight of the description reads is an error naming it,
    at build time and when a built binary is pointed at such a file."""
    d = copy_model(tmp_path)
    tensors = load_file(d / "model.safetensors")
    tensors["model.layers.0.mlp.extra_proj.weight"] = np.ones((4, 96), dtype=np.float32)
    save_file(tensors, d / "model.safetensors")
    build_fails(d, "t-unused-tensor", "model.layers.0.mlp.extra_proj.weight", "not used", "'llama'",
                "--allow-unused")
    r = subprocess.run([str(ROOT_INGOT()), "build", str(d), "--name", "t-unused-allowed", "--allow-unused"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "warning" in r.stderr and "model.layers.0.mlp.extra_proj.weight" in r.stderr


def test_binary_refuses_weights_with_an_unused_tensor(tiny, tmp_path):
    d = copy_model(tmp_path)
    tensors = load_file(d / "model.safetensors")
    tensors["lm_head.bias"] = np.zeros((997,), dtype=np.float32)
    save_file(tensors, d / "model.safetensors")
    fails_with(tiny, logits_args(d), "lm_head.bias", "not used by the description")


def test_biases_the_config_disowns_are_not_dropped(built, tmp_path):
    """Bias tensors in a Llama checkpoint whose config says attention_bias
    false: the description does not read them, so the build refuses rather
    than ignoring them."""
    from modelbuild import FIXTURES
    d = tmp_path / "llama_bias"
    shutil.copytree(FIXTURES / "families" / "llama_bias", d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["attention_bias"] = False
    (d / "config.json").write_text(json.dumps(cfg))
    build_fails(d, "t-llama-bias-disowned", "self_attn.q_proj.bias", "not used")


def ROOT_INGOT():
    from conftest import ROOT
    return ROOT / "ingot"


def logits_of(binary, weights, tmp_path, tag):
    out = tmp_path / f"{tag}.f32"
    r = run(binary, "--weights", weights, "logits", "--tokens", "1,2,3,4,5", "--out", out)
    assert r.returncode == 0, r.stderr
    return out.read_bytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_vector_stored_as_a_matrix_of_its_values(tiny, tmp_path, dtype):
    """A declared vector stored as any matrix of as many values of an element type (llama.cpp's
    converters write Mamba-2's A and D as [heads, 1] and its grouped norm as [groups, inner /
    groups]) is read as the vector, converted where its type differs (f16 here): the same logits,
    bit for bit, as the vector stored as [n]; a matrix of another count is refused, naming both
    shapes."""
    name = "model.norm.weight"
    tensors = load_file(TINY / "mha_tied_hd24" / "model.safetensors")
    n = tensors[name].shape[0]
    want = None
    for shape in [(n,), (2, n // 2), (n, 1), (1, n)]:
        d = copy_model(tmp_path, "m" + "x".join(map(str, shape)))
        tensors[name] = np.ascontiguousarray(load_file(TINY / "mha_tied_hd24" / "model.safetensors")[name].astype(dtype).reshape(shape))
        save_file(tensors, d / "model.safetensors")
        got = logits_of(tiny, d, tmp_path, d.name)
        assert want is None or got == want, f"{shape}: other logits than the vector's"
        want = got
    d = copy_model(tmp_path, "short")
    tensors[name] = np.ascontiguousarray(tensors[name].reshape(-1)[: n - 2].reshape(2, (n - 2) // 2))
    save_file(tensors, d / "model.safetensors")
    fails_with(tiny, logits_args(d), name, "expected shape", f"[{n}]", f"[2, {(n - 2) // 2}]")
