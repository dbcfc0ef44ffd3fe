"""Loader tests: GGUF and safetensors files written by the reference Python
libraries (gguf, safetensors) must be read back exactly by ingot-inspect, and
malformed files must fail with exit 1 and one clear line, never a crash or a
sanitizer report."""
import json
import re
import struct

import numpy as np
import pytest

import gguf
from gguf import GGMLQuantizationType as QT
from gguf import GGUFValueType as VT
import gguf.quants
from safetensors.numpy import save_file

from conftest import ROOT, run

MODEL = ROOT / "models" / "smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"


# ---------------------------------------------------------------- helpers

def inspect(built, path, *args):
    return run([built / "tools" / "ingot-inspect", *args, path])


def inspect_json(built, path, *args):
    r = inspect(built, path, *args)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    return json.loads(r.stdout)


def dump(built, path, name, tmp_path):
    out = tmp_path / "dump.f32"
    if out.exists():
        out.unlink()
    r = run([built / "tools" / "ingot-inspect", path, "--dump", name, out])
    assert r.returncode == 0, r.stderr
    return np.fromfile(out, dtype="<f4")


def assert_fails(r, *keywords):
    """Exit 1, exactly one line on stderr naming the problem, no sanitizer report."""
    assert "Sanitizer" not in r.stderr and "runtime error" not in r.stderr, r.stderr
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert r.stdout == ""
    msg = r.stderr
    assert msg.endswith("\n") and msg.count("\n") == 1, repr(msg)
    for k in keywords:
        assert re.search(k, msg, re.IGNORECASE), f"{k!r} not in {msg!r}"
    return msg


def bad(built, path, *keywords):
    msg = assert_fails(inspect(built, path), *keywords)
    assert str(path) in msg  # names the file
    return msg


# ---------------------------------------------------------------- valid GGUF

RNG = np.random.default_rng(1234)

METADATA = [
    # (key, writer method, value, GGUF type)
    ("t.u8", "add_uint8", 200, VT.UINT8),
    ("t.i8", "add_int8", -100, VT.INT8),
    ("t.u16", "add_uint16", 65000, VT.UINT16),
    ("t.i16", "add_int16", -32000, VT.INT16),
    ("t.u32", "add_uint32", 4_000_000_000, VT.UINT32),
    ("t.i32", "add_int32", -2_000_000_000, VT.INT32),
    ("t.u64", "add_uint64", 2**64 - 1, VT.UINT64),
    ("t.i64", "add_int64", -(2**63), VT.INT64),
    ("t.f32", "add_float32", 0.1, VT.FLOAT32),
    ("t.f64", "add_float64", 0.1, VT.FLOAT64),
    ("t.true", "add_bool", True, VT.BOOL),
    ("t.false", "add_bool", False, VT.BOOL),
    ("t.str", "add_string", 'héllo "q" \\ back\nnew\ttab ✓ 😀', VT.STRING),
    ("t.empty", "add_key_value", "", VT.STRING),  # add_string skips empty strings
]
ARRAYS = {
    "t.arr_i32": [1, -2, 3, 2**31 - 1],
    "t.arr_f32": [0.5, -1.25, 3.0],
    "t.arr_str": ["a", "", "ü\"x\"", "<|im_end|>"],
    "t.arr_bool": [True, False, True],
    "t.arr_big": list(range(100)),
    "t.arr_bigstr": [f"tok{i}" for i in range(65)],
}


def quantize(x, qtype):
    """Bytes per the gguf package for a 2-D float array (the writer infers the shape)."""
    if qtype == QT.F32:
        return x.astype(np.float32)
    if qtype == QT.F16:
        with np.errstate(over="ignore"):  # 1e30 -> inf on purpose
            return x.astype(np.float16)
    return gguf.quants.quantize(x.astype(np.float32), qtype)


def special_values(shape):
    x = RNG.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    flat[:8] = [np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-7, 65504.0, 1e30]
    return x


TENSORS = [
    # (name, shape in PyTorch order, qtype)
    ("f32.3d", (2, 3, 64), QT.F32),
    ("f32.1d", (96,), QT.F32),
    ("f32.4d", (2, 1, 3, 32), QT.F32),
    ("f16", (4, 64), QT.F16),
    ("bf16", (3, 64), QT.BF16),
    ("q8_0", (5, 64), QT.Q8_0),
    ("q4_0", (4, 96), QT.Q4_0),
    ("q4_1", (6, 32), QT.Q4_1),
]
DTYPE_NAME = {QT.F32: "f32", QT.F16: "f16", QT.BF16: "bf16", QT.Q8_0: "q8_0", QT.Q4_0: "q4_0", QT.Q4_1: "q4_1"}


def write_gguf(path, alignment=None, tensors=TENSORS):
    """Writes a GGUF with every metadata type and every supported tensor type.
    Returns {name: (qtype, stored bytes as numpy array)}."""
    w = gguf.GGUFWriter(str(path), "llama")
    if alignment:
        w.add_custom_alignment(alignment)
    for key, method, value, vt in METADATA:
        if method == "add_key_value":
            w.add_key_value(key, value, vt)
        else:
            getattr(w, method)(key, value)
    for key, values in ARRAYS.items():
        w.add_array(key, values)
    stored = {}
    for name, shape, qtype in tensors:
        if qtype in (QT.F16, QT.BF16):
            x = special_values(shape)
        else:
            x = RNG.standard_normal(shape).astype(np.float32) * 3
        data = quantize(x, qtype)
        w.add_tensor(name, data, raw_dtype=qtype if qtype not in (QT.F32, QT.F16) else None)
        stored[name] = (qtype, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return stored


def reference_f32(qtype, data):
    if qtype == QT.F32:
        return data.astype(np.float32).reshape(-1)
    if qtype == QT.F16:
        return data.astype(np.float32).reshape(-1)
    return gguf.quants.dequantize(data, qtype).astype(np.float32).reshape(-1)


@pytest.fixture(scope="module")
def valid_gguf(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "valid.gguf"
    stored = write_gguf(path)
    return path, stored


def test_c_unit_dtype(built):
    r = run([built / "tests" / "test_dtype"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"^\d+ passed, 0 failed$", r.stdout.strip().splitlines()[-1]), r.stdout
    assert "runtime error" not in r.stderr and "Sanitizer" not in r.stderr


def test_gguf_metadata(built, valid_gguf):
    path, _ = valid_gguf
    doc = inspect_json(built, path)
    assert doc["format"] == "gguf" and doc["gguf_version"] == 3
    md = doc["metadata"]
    assert md["general.architecture"] == "llama"
    for key, _, value, vt in METADATA:
        got = md[key]
        if vt == VT.FLOAT32:
            assert isinstance(got, float) and np.float32(got) == np.float32(value)
        elif vt == VT.BOOL:
            assert got is value
        else:
            assert got == value and type(got) is type(value), (key, got)
    assert md["t.arr_i32"] == ARRAYS["t.arr_i32"]
    assert [np.float32(v) for v in md["t.arr_f32"]] == [np.float32(v) for v in ARRAYS["t.arr_f32"]]
    assert md["t.arr_str"] == ARRAYS["t.arr_str"]
    assert md["t.arr_bool"] == ARRAYS["t.arr_bool"]
    # Long arrays are summarized unless --full-arrays.
    assert md["t.arr_big"] == {"array_type": "int32", "length": 100}
    assert md["t.arr_bigstr"] == {"array_type": "string", "length": 65}
    full = inspect_json(built, path, "--full-arrays")["metadata"]
    assert full["t.arr_big"] == ARRAYS["t.arr_big"]
    assert full["t.arr_bigstr"] == ARRAYS["t.arr_bigstr"]


def test_gguf_metadata_matches_python_reader(built, valid_gguf):
    """Every key the gguf package's reader sees is reported, with the same value."""
    path, _ = valid_gguf
    md = inspect_json(built, path, "--full-arrays")["metadata"]
    reader = gguf.GGUFReader(str(path))
    keys = [f.name for f in reader.fields.values() if not f.name.startswith("GGUF.")]
    assert sorted(keys) == sorted(md)
    for f in reader.fields.values():
        if f.name.startswith("GGUF."):
            continue
        want = f.contents()
        got = md[f.name]
        if f.types[0] == VT.FLOAT32:
            assert np.float32(got) == np.float32(want)
        elif f.types[0] == VT.ARRAY and f.types[-1] == VT.FLOAT32:
            assert np.array_equal(np.float32(got), np.float32(want))
        else:
            assert got == want, f.name


def test_gguf_tensors_and_dump(built, valid_gguf, tmp_path):
    path, stored = valid_gguf
    doc = inspect_json(built, path)
    by_name = {t["name"]: t for t in doc["tensors"]}
    assert [t["name"] for t in doc["tensors"]] == [n for n, _, _ in TENSORS]
    for name, shape, qtype in TENSORS:
        t = by_name[name]
        assert t["shape"] == list(shape), name
        assert t["dtype"] == DTYPE_NAME[qtype]
        assert t["nbytes"] == stored[name][1].nbytes
        got = dump(built, path, name, tmp_path)
        want = reference_f32(qtype, stored[name][1])
        assert got.shape == (int(np.prod(shape)),)
        if qtype in (QT.F32, QT.F16, QT.BF16):
            assert np.array_equal(got, want, equal_nan=True), name
            # bit-exact, including the NaN payloads and signed zeros
            ok = ~np.isnan(want)
            assert np.array_equal(got[ok].view(np.uint32), want[ok].view(np.uint32)), name
        else:
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-6, err_msg=name)


def test_gguf_version2_and_alignment(built, tmp_path):
    path = tmp_path / "v2.gguf"
    stored = write_gguf(path, alignment=64)
    raw = bytearray(path.read_bytes())
    raw[4:8] = struct.pack("<I", 2)  # v2 and v3 share the layout
    path.write_bytes(bytes(raw))
    doc = inspect_json(built, path)
    assert doc["gguf_version"] == 2
    assert doc["metadata"]["general.alignment"] == 64
    got = dump(built, path, "q4_1", tmp_path)
    np.testing.assert_allclose(got, reference_f32(QT.Q4_1, stored["q4_1"][1]), rtol=0, atol=1e-6)


def test_dump_unknown_tensor(built, valid_gguf, tmp_path):
    path, _ = valid_gguf
    r = run([built / "tools" / "ingot-inspect", path, "--dump", "nope", tmp_path / "x.f32"])
    assert_fails(r, "nope", "not found")


# ---------------------------------------------------------------- valid safetensors

def bf16_bits(x):
    """float32 -> bf16 bit patterns with round-to-nearest-even (NaN kept quiet)."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    r[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return r


def st_raw(entries, metadata=None, header_override=None, pad=True):
    """Builds safetensors bytes by hand. entries: (name, dtype, shape, data bytes,
    offsets or None). Returns bytes."""
    hdr = {}
    if metadata is not None:
        hdr["__metadata__"] = metadata
    blob = b""
    for name, dtype, shape, data, offsets in entries:
        if offsets is None:
            offsets = [len(blob), len(blob) + len(data)]
        hdr[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}
        blob += data
    h = header_override if header_override is not None else json.dumps(hdr).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + blob


def test_safetensors_single(built, tmp_path):
    a = RNG.standard_normal((3, 5)).astype(np.float32)
    with np.errstate(over="ignore"):
        b = special_values((4, 8)).astype(np.float16)
    c = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    s = np.array(7.5, dtype=np.float32)
    path = tmp_path / "m.safetensors"
    save_file({"a": a, "b.half": b, "c": c, "scalar": s}, str(path), metadata={"format": "pt"})
    doc = inspect_json(built, path)
    assert doc["format"] == "safetensors" and "gguf_version" not in doc
    by_name = {t["name"]: t for t in doc["tensors"]}
    assert by_name["a"] == {"name": "a", "dtype": "f32", "shape": [3, 5], "nbytes": 60}
    assert by_name["b.half"]["dtype"] == "f16" and by_name["b.half"]["shape"] == [4, 8]
    assert by_name["c"]["shape"] == [2, 3, 4]
    assert by_name["scalar"]["shape"] == []
    assert np.array_equal(dump(built, path, "a", tmp_path), a.reshape(-1))
    assert np.array_equal(dump(built, path, "b.half", tmp_path), b.astype(np.float32).reshape(-1), equal_nan=True)
    assert np.array_equal(dump(built, path, "c", tmp_path), c.reshape(-1))
    assert np.array_equal(dump(built, path, "scalar", tmp_path), [7.5])


def test_safetensors_bf16_and_folder(built, tmp_path):
    x = special_values((4, 16))
    bits = bf16_bits(x)
    f = RNG.standard_normal(7).astype(np.float32)
    d = tmp_path / "model"
    d.mkdir()
    # Named without the usual extension: the format is detected from content.
    (d / "model.safetensors").write_bytes(st_raw([
        ("w.bf16", "BF16", (4, 16), bits.tobytes(), None),
        ("v", "F32", (7,), f.tobytes(), None),
    ], metadata={"k": "v"}))
    doc = inspect_json(built, d)
    assert {t["name"]: t["dtype"] for t in doc["tensors"]} == {"w.bf16": "bf16", "v": "f32"}
    want = (bits.astype(np.uint32) << 16).view(np.float32).reshape(-1)
    got = dump(built, d, "w.bf16", tmp_path)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    other = tmp_path / "weights.bin"
    other.write_bytes((d / "model.safetensors").read_bytes())
    assert inspect_json(built, other)["format"] == "safetensors"


def write_sharded(d, shard_of=None):
    """Two shards plus index; shard_of overrides weight_map entries."""
    d.mkdir(exist_ok=True)
    t = {
        "s1.a": RNG.standard_normal((2, 4)).astype(np.float32),
        "s1.b": RNG.standard_normal(3).astype(np.float16),
        "s2.a": RNG.standard_normal((5,)).astype(np.float32),
    }
    save_file({k: t[k] for k in ("s1.a", "s1.b")}, str(d / "model-00001-of-00002.safetensors"))
    save_file({"s2.a": t["s2.a"]}, str(d / "model-00002-of-00002.safetensors"))
    wm = {"s1.a": "model-00001-of-00002.safetensors", "s1.b": "model-00001-of-00002.safetensors",
          "s2.a": "model-00002-of-00002.safetensors"}
    wm.update(shard_of or {})
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 0}, "weight_map": wm}))
    return t


def test_safetensors_sharded(built, tmp_path):
    d = tmp_path / "sharded"
    t = write_sharded(d)
    doc = inspect_json(built, d)
    assert sorted(x["name"] for x in doc["tensors"]) == sorted(t)
    for name, arr in t.items():
        assert np.array_equal(dump(built, d, name, tmp_path), arr.astype(np.float32).reshape(-1))
    # The index file itself is accepted too.
    assert len(inspect_json(built, d / "model.safetensors.index.json")["tensors"]) == 3


def test_real_model(built, tmp_path):
    if not MODEL.exists():
        r = run([ROOT / "scripts" / "fetch_smollm2.sh"])
        if r.returncode != 0 or not MODEL.exists():
            pytest.skip("SmolLM2 GGUF not available: " + r.stderr[-300:])
    doc = inspect_json(built, MODEL)
    assert doc["format"] == "gguf" and doc["gguf_version"] == 3
    assert len(doc["tensors"]) == 272
    assert {t["dtype"] for t in doc["tensors"]} == {"q4_1", "q8_0", "f32"}
    md = doc["metadata"]
    assert md["general.architecture"] == "llama"
    assert md["llama.block_count"] == 30 and md["llama.embedding_length"] == 576
    assert md["tokenizer.ggml.tokens"] == {"array_type": "string", "length": 49152}
    by_name = {t["name"]: t for t in doc["tensors"]}
    reader = gguf.GGUFReader(str(MODEL))
    for rt in reader.tensors:
        t = by_name[rt.name]
        assert t["shape"] == [int(n) for n in reversed(rt.shape)]
        assert t["nbytes"] == int(rt.n_bytes)
    for name in ("blk.0.attn_q.weight", "blk.0.attn_norm.weight"):
        rt = next(x for x in reader.tensors if x.name == name)
        want = gguf.quants.dequantize(np.array(rt.data), rt.tensor_type).reshape(-1)
        np.testing.assert_allclose(dump(built, MODEL, name, tmp_path), want, rtol=0, atol=1e-6)
    full = inspect_json(built, MODEL, "--full-arrays")["metadata"]
    toks = reader.fields["tokenizer.ggml.tokens"].contents()
    assert full["tokenizer.ggml.tokens"] == toks


# ---------------------------------------------------------------- malformed GGUF

def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, payload):
    return gstr(key) + struct.pack("<I", vtype) + payload


def kv_u32(key, v):
    return kv(key, VT.UINT32, struct.pack("<I", v))


def tinfo(name, dims, ggml_type, offset, n_dims=None):
    out = gstr(name) + struct.pack("<I", len(dims) if n_dims is None else n_dims)
    out += b"".join(struct.pack("<Q", d) for d in dims)
    return out + struct.pack("<IQ", ggml_type, offset)


def gguf_raw(kvs=(), tensors=(), data=b"", version=3, n_tensors=None, n_kv=None, magic=b"GGUF", alignment=32):
    out = magic + struct.pack("<IQQ", version, len(tensors) if n_tensors is None else n_tensors,
                              len(kvs) if n_kv is None else n_kv)
    out += b"".join(kvs) + b"".join(tensors)
    out += b"\0" * (-len(out) % alignment)
    return out + data


F32_64 = b"\0" * 256  # one f32 tensor of 64 elements


def write(tmp_path, name, data):
    p = tmp_path / name
    p.write_bytes(data)
    return p


def test_gguf_raw_builder_sanity(built, tmp_path):
    """The hand-built files below are valid except for the one thing each breaks."""
    p = write(tmp_path, "ok.gguf", gguf_raw([kv_u32("a", 1)], [tinfo("t", [64], 0, 0)], F32_64))
    doc = inspect_json(built, p)
    assert doc["tensors"] == [{"name": "t", "dtype": "f32", "shape": [64], "nbytes": 256}]
    assert doc["metadata"] == {"a": 1}


def test_gguf_truncated_everywhere(built, tmp_path):
    src = tmp_path / "full.gguf"
    write_gguf(src, tensors=TENSORS[:4])
    full = src.read_bytes()
    reader = gguf.GGUFReader(str(src))
    data_end = max(int(t.data_offset) + int(t.n_bytes) for t in reader.tensors)
    header_end = min(int(t.data_offset) for t in reader.tensors)
    # Every byte of the first part of the header, then a spread over the rest.
    cuts = sorted(set(list(range(0, 80)) + list(range(80, header_end, 7)) + list(range(header_end, data_end, 97))
                      + [header_end - 1, header_end, data_end - 1]))
    p = tmp_path / "cut.gguf"
    for n in cuts:
        p.write_bytes(full[:n])
        assert_fails(inspect(built, p), r"truncated|past end of file")


def test_gguf_bad_header(built, tmp_path):
    good_tail = [kv_u32("a", 1)], [tinfo("t", [64], 0, 0)], F32_64
    bad(built, write(tmp_path, "magic.gguf", gguf_raw(*good_tail, magic=b"GGUX")), "bad magic", "GGUX")
    bad(built, write(tmp_path, "v1.gguf", gguf_raw(*good_tail, version=1)), "version 1", "not supported")
    bad(built, write(tmp_path, "v99.gguf", gguf_raw(*good_tail, version=99)), "version 99")
    bad(built, write(tmp_path, "nt.gguf", gguf_raw(*good_tail, n_tensors=2**60)), "absurd tensor count")
    bad(built, write(tmp_path, "nkv.gguf", gguf_raw(*good_tail, n_kv=2**63)), "absurd metadata count")
    bad(built, write(tmp_path, "nkv2.gguf", gguf_raw(*good_tail, n_kv=2**64 - 1)), "absurd metadata count")


def test_gguf_bad_metadata(built, tmp_path):
    t = [tinfo("t", [64], 0, 0)]
    # A key whose length runs past the end.
    p = write(tmp_path, "keylen.gguf", gguf_raw([struct.pack("<Q", 2**62) + b"abc"], t, F32_64))
    bad(built, p, "string length", "past end of file")
    # A string value whose length runs past the end.
    p = write(tmp_path, "strlen.gguf", gguf_raw([kv("s", VT.STRING, struct.pack("<Q", 10**6) + b"xy")], t, F32_64))
    bad(built, p, "'s'", "string length", "past end of file")
    # Arrays whose count cannot fit in the file.
    p = write(tmp_path, "arr.gguf", gguf_raw([kv("a", VT.ARRAY, struct.pack("<IQ", VT.UINT32, 2**40))], t, F32_64))
    bad(built, p, "'a'", "array", "past end of file")
    p = write(tmp_path, "arrs.gguf", gguf_raw([kv("a", VT.ARRAY, struct.pack("<IQ", VT.STRING, 2**61))], t, F32_64))
    bad(built, p, "'a'", "array", "past end of file")
    p = write(tmp_path, "arrmul.gguf", gguf_raw([kv("a", VT.ARRAY, struct.pack("<IQ", VT.UINT64, 2**61 + 1))], t, F32_64))
    bad(built, p, "array", "past end of file")
    p = write(tmp_path, "nested.gguf", gguf_raw([kv("a", VT.ARRAY, struct.pack("<IQ", VT.ARRAY, 1))], t, F32_64))
    bad(built, p, "nested array")
    p = write(tmp_path, "vtype.gguf", gguf_raw([kv("a", 13, b"\0" * 8)], t, F32_64))
    bad(built, p, "unknown value type 13")
    p = write(tmp_path, "dupkey.gguf", gguf_raw([kv_u32("k", 1), kv_u32("k", 2)], t, F32_64))
    bad(built, p, "duplicate metadata key 'k'")
    for a in (0, 48, 2**31 + 1):
        p = write(tmp_path, f"align{a}.gguf", gguf_raw([kv_u32("general.alignment", a)], t, F32_64))
        bad(built, p, "general.alignment", "power of two")
    p = write(tmp_path, "aligntype.gguf", gguf_raw([kv("general.alignment", VT.STRING, gstr("32"))], t, F32_64))
    bad(built, p, "general.alignment", "integer")


def test_gguf_bad_tensors(built, tmp_path):
    ok = [tinfo("t", [64], 0, 0)]
    # 16 is IQ2_XXS, a type this engine does not read
    p = write(tmp_path, "type.gguf", gguf_raw([], [tinfo("blk.0.q", [256], 16, 0)], F32_64))
    bad(built, p, "tensor 'blk.0.q'", "unsupported ggml type 16")
    p = write(tmp_path, "past.gguf", gguf_raw([], [tinfo("t", [64], 0, 0), tinfo("u", [64], 0, 256)], F32_64))
    bad(built, p, "tensor 'u'", r"offset 256, 256 bytes", "past end of file")
    p = write(tmp_path, "hugeoff.gguf", gguf_raw([], [tinfo("t", [64], 0, 2**64 - 32)], F32_64))
    bad(built, p, "tensor 't'", "past end of file")
    p = write(tmp_path, "misaligned.gguf", gguf_raw([], [tinfo("t", [8], 0, 16)], F32_64))
    bad(built, p, "tensor 't'", "offset 16", "alignment 32")
    p = write(tmp_path, "overlap.gguf",
              gguf_raw([], [tinfo("a", [64], 0, 0), tinfo("b", [64], 0, 64)], F32_64 * 2))
    bad(built, p, "'a'", "'b'", "overlap")
    p = write(tmp_path, "dupname.gguf", gguf_raw([], [tinfo("t", [64], 0, 0), tinfo("t", [64], 0, 256)], F32_64 * 2))
    bad(built, p, "duplicate tensor name 't'")
    p = write(tmp_path, "block.gguf", gguf_raw([], [tinfo("q", [48, 2], 2, 0)], F32_64))
    bad(built, p, "tensor 'q'", "not a multiple", "block size")
    p = write(tmp_path, "overflow.gguf", gguf_raw([], [tinfo("t", [2**40, 2**40], 0, 0)], F32_64))
    bad(built, p, "tensor 't'", "overflow")
    p = write(tmp_path, "bytesoverflow.gguf", gguf_raw([], [tinfo("t", [2**62], 0, 0)], F32_64))
    bad(built, p, "tensor 't'", r"overflow|past end")
    p = write(tmp_path, "ndims.gguf", gguf_raw([], [tinfo("t", [1, 1, 1, 1, 64], 0, 0)], F32_64))
    bad(built, p, "tensor 't'", "n_dims 5")
    p = write(tmp_path, "ndims0.gguf", gguf_raw([], [tinfo("t", [], 0, 0)], F32_64))
    bad(built, p, "tensor 't'", "n_dims 0")
    # Names with control characters stay on one line in the message.
    p = write(tmp_path, "ctrl.gguf", gguf_raw([], [tinfo("a\nb", [64], 16, 0)], F32_64))
    bad(built, p, "unsupported ggml type")
    assert ok  # the builder sanity test covers the valid variant


# ---------------------------------------------------------------- malformed safetensors

def test_safetensors_bad(built, tmp_path):
    f8 = np.arange(8, dtype=np.float32).tobytes()
    p = write(tmp_path, "hlen.safetensors", struct.pack("<Q", 2**40) + b"{}")
    bad(built, p, "header length", "absurd")
    p = write(tmp_path, "hlen2.safetensors", struct.pack("<Q", 1000) + b'{"a": 1}')
    bad(built, p, "header length 1000", "past end of file")
    p = write(tmp_path, "small.safetensors", b"\x01\x02")
    bad(built, p, "too small")
    p = write(tmp_path, "json.safetensors", st_raw([], header_override=b'{"a": {"dtype": "F32",'))
    bad(built, p, "invalid JSON")
    p = write(tmp_path, "json2.safetensors", st_raw([], header_override=b'{"a": 1} xx'))
    bad(built, p, "invalid JSON", "trailing")
    p = write(tmp_path, "notobj.safetensors", st_raw([], header_override=b"[1, 2]"))
    bad(built, p, "not a JSON object")
    p = write(tmp_path, "shape.safetensors", st_raw([("w", "F32", (3, 3), f8 + b"\0" * 4, [0, 32])]))
    bad(built, p, "tensor 'w'", "data_offsets", "need 9 elements")
    p = write(tmp_path, "order.safetensors", st_raw([("w", "F32", (8,), f8, [32, 0])]))
    bad(built, p, "tensor 'w'", "data_offsets")
    p = write(tmp_path, "beyond.safetensors", st_raw([("w", "F32", (8,), f8, [8, 40])]))
    bad(built, p, "tensor 'w'", "outside the data section")
    p = write(tmp_path, "neg.safetensors", st_raw([("w", "F32", (8,), f8, [-1, 31])]))
    bad(built, p, "tensor 'w'", "data_offsets")
    p = write(tmp_path, "frac.safetensors", st_raw([("w", "F32", (2.5,), f8, [0, 10])]))
    bad(built, p, "tensor 'w'", "shape")
    p = write(tmp_path, "overflow.safetensors", st_raw([("w", "F32", (2**40, 2**40), f8, [0, 32])]))
    bad(built, p, "tensor 'w'", "overflow")
    p = write(tmp_path, "overlap.safetensors",
              st_raw([("a", "F32", (8,), f8, [0, 32]), ("b", "F32", (4,), b"", [16, 32])]))
    bad(built, p, "'a'", "'b'", "overlap")
    p = write(tmp_path, "dtype.safetensors", st_raw([("ids", "I64", (4,), f8, [0, 32])]))
    bad(built, p, "tensor 'ids'", "unsupported dtype 'I64'")
    p = write(tmp_path, "dup.safetensors", st_raw([], header_override=(
        b'{"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},'
        b' "w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}')) + f8)
    bad(built, p, "duplicate tensor name 'w'")
    p = write(tmp_path, "nodtype.safetensors", st_raw([], header_override=b'{"w": {"shape": [1], "data_offsets": [0, 4]}}') + f8)
    bad(built, p, "tensor 'w'", "dtype")


def test_safetensors_truncated_everywhere(built, tmp_path):
    src = tmp_path / "full.safetensors"
    save_file({"a": RNG.standard_normal((4, 8)).astype(np.float32),
               "b": RNG.standard_normal(16).astype(np.float16)}, str(src))
    full = src.read_bytes()
    p = tmp_path / "cut.safetensors"
    for n in list(range(0, 40)) + list(range(40, len(full), 5)):
        p.write_bytes(full[:n])
        assert_fails(inspect(built, p), r"too small|past end of file|outside the data section|unrecognized")


def test_random_corruption_never_crashes(built, tmp_path, valid_gguf):
    """Seeded byte mutations of valid files: each run either succeeds or fails
    cleanly (exit 1, one line), never crashes or trips a sanitizer."""
    gsrc = tmp_path / "small.gguf"
    write_gguf(gsrc, tensors=TENSORS[3:])
    ssrc = tmp_path / "small.safetensors"
    save_file({"a": np.ones((2, 4), np.float32), "b": np.ones(3, np.float16)}, str(ssrc))
    rng = np.random.default_rng(7)
    for src in (gsrc, ssrc):
        full = bytearray(src.read_bytes())
        # Mutations concentrate on the header, where the lengths and offsets live.
        limit = min(len(full), 1200)
        p = tmp_path / ("mut" + src.suffix)
        for _ in range(60):
            buf = bytearray(full)
            for _ in range(int(rng.integers(1, 4))):
                i = int(rng.integers(0, limit))
                buf[i] = int(rng.integers(0, 256)) if rng.random() < 0.7 else buf[i] ^ 0x80
            p.write_bytes(bytes(buf))
            r = inspect(built, p)
            assert "Sanitizer" not in r.stderr and "runtime error" not in r.stderr, r.stderr
            if r.returncode == 0:
                json.loads(r.stdout)
            else:
                assert_fails(r)
        for name in ("a",) if src == ssrc else ("q4_1", "bf16"):
            r = run([built / "tools" / "ingot-inspect", p, "--dump", name, tmp_path / "o.f32"])
            assert r.returncode in (0, 1) and "Sanitizer" not in r.stderr and "runtime error" not in r.stderr


def test_sharded_bad(built, tmp_path):
    d = tmp_path / "missing_shard"
    write_sharded(d, {"s2.a": "model-00003-of-00002.safetensors"})
    msg = assert_fails(inspect(built, d), "model-00003-of-00002.safetensors", "cannot open", "index")
    assert "No such file" in msg
    d = tmp_path / "missing_tensor"
    write_sharded(d, {"s1.ghost": "model-00002-of-00002.safetensors"})
    assert_fails(inspect(built, d), "'s1.ghost'", "model-00002-of-00002.safetensors", "not found")
    d = tmp_path / "wrong_shard"
    write_sharded(d, {"s1.a": "model-00002-of-00002.safetensors"})
    assert_fails(inspect(built, d), "'s1.a'", "not found there")
    for evil in ("../model-00001-of-00002.safetensors", "sub/x.safetensors", "..", ""):
        d = tmp_path / "evil"
        write_sharded(d, {"s2.a": evil})
        assert_fails(inspect(built, d), "plain file name")
    d = tmp_path / "badjson"
    write_sharded(d)
    (d / "model.safetensors.index.json").write_text('{"weight_map": ')
    assert_fails(inspect(built, d), "invalid JSON")
    d = tmp_path / "nomap"
    write_sharded(d)
    (d / "model.safetensors.index.json").write_text('{"metadata": {}}')
    assert_fails(inspect(built, d), "weight_map")
    # A shard that is itself broken is named in the message.
    d = tmp_path / "badshard"
    write_sharded(d)
    (d / "model-00002-of-00002.safetensors").write_bytes(struct.pack("<Q", 2**50))
    assert_fails(inspect(built, d), "model-00002-of-00002.safetensors", "header length")


def test_unrecognized_inputs(built, tmp_path):
    assert_fails(inspect(built, tmp_path / "does-not-exist.gguf"), "does-not-exist.gguf", "No such file")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_fails(inspect(built, empty), "neither model.safetensors nor model.safetensors.index.json")
    p = write(tmp_path, "junk.bin", b"\x00\x01junk data that is nothing")
    assert_fails(inspect(built, p), "unrecognized format")
    p = write(tmp_path, "empty.gguf", b"")
    assert_fails(inspect(built, p), "truncated")
    r = run([built / "tools" / "ingot-inspect"])
    assert r.returncode == 2 and "usage" in r.stderr
