"""The GGUF block types beyond Q8_0/Q4_0/Q4_1 (Q5_0, Q5_1, Q2_K..Q6_K, IQ4_NL,
IQ4_XS): ingot's dequantization against gguf-py's on random blocks, bad
tensors of those types, and (below) whole models quantized by llama.cpp
against llama.cpp's own logits."""
import re

import numpy as np
import pytest

import gguf
from gguf import GGMLQuantizationType as QT
import gguf.quants

from conftest import run

NEW_TYPES = {QT.Q5_0: "q5_0", QT.Q5_1: "q5_1", QT.Q2_K: "q2_k", QT.Q3_K: "q3_k", QT.Q4_K: "q4_k",
             QT.Q5_K: "q5_k", QT.Q6_K: "q6_k", QT.IQ4_NL: "iq4_nl", QT.IQ4_XS: "iq4_xs"}
OLD_TYPES = {QT.Q8_0: "q8_0", QT.Q4_0: "q4_0", QT.Q4_1: "q4_1"}
# Byte offsets of each block's f16 scales (d, and m/dmin where there is one).
SCALES = {QT.Q8_0: [0], QT.Q4_0: [0], QT.Q4_1: [0, 2], QT.Q5_0: [0], QT.Q5_1: [0, 2], QT.Q2_K: [80, 82],
          QT.Q3_K: [108], QT.Q4_K: [0, 2], QT.Q5_K: [0, 2], QT.Q6_K: [208], QT.IQ4_NL: [0], QT.IQ4_XS: [0]}


def random_blocks(qtype, n_blocks, rng):
    """Random bytes for every code and sub-scale; the f16 scales are finite:
    half of the blocks take any finite f16 bit pattern (subnormals, -0,
    65504 included), the others moderate values like a real checkpoint's."""
    _, type_size = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    for off in SCALES[qtype]:
        bits = rng.integers(0, 1 << 16, size=n_blocks, dtype=np.uint32)
        bits = np.where((bits & 0x7C00) == 0x7C00, bits & 0x83FF, bits).astype(np.uint16)
        moderate = (rng.standard_normal(n_blocks) * 0.02).astype(np.float16).view(np.uint16)
        h = np.where(np.arange(n_blocks) % 2 == 0, bits, moderate).astype("<u2")
        raw[:, off:off + 2] = h.view(np.uint8).reshape(n_blocks, 2)
    return raw


def write_raw_gguf(path, tensors):
    """tensors: {name: (qtype, raw uint8 [rows, row_bytes])}."""
    w = gguf.GGUFWriter(str(path), "llama")
    for name, (qtype, raw) in tensors.items():
        w.add_tensor(name, raw, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def dump(built, path, name, tmp_path):
    out = tmp_path / f"{name}.f32"
    r = run([built / "tools" / "ingot-inspect", path, "--dump", name, out])
    assert r.returncode == 0, r.stderr
    return np.fromfile(out, dtype="<f4")


@pytest.mark.parametrize("qtype", list(NEW_TYPES) + list(OLD_TYPES), ids=lambda q: q.name)
def test_dequantize_matches_gguf_py(built, tmp_path, qtype):
    """Every type: ingot-inspect --dump (runtime/dtype.c) equals gguf-py's
    dequantize bit for bit on random blocks (every product in the formats is
    exact in f32, and both evaluate the one rounding step in the same order)."""
    rng = np.random.default_rng(int(qtype))
    block, _ = gguf.GGML_QUANT_SIZES[qtype]
    rows, per_row = 5, 512 // block  # rows of 512 elements
    raw = random_blocks(qtype, rows * per_row, rng).reshape(rows, -1)
    path = tmp_path / "t.gguf"
    write_raw_gguf(path, {"w": (qtype, raw)})
    r = run([built / "tools" / "ingot-inspect", path])
    assert r.returncode == 0, r.stderr
    want = (NEW_TYPES | OLD_TYPES)[qtype]
    assert f'"dtype":\t"{want}"' in r.stdout or f'"dtype": "{want}"' in r.stdout, r.stdout[-2000:]
    got = dump(built, path, "w", tmp_path)
    ref = gguf.quants.dequantize(raw, qtype).astype(np.float32).reshape(-1)
    assert got.shape == ref.shape
    diff = np.flatnonzero(got.view(np.uint32) != ref.view(np.uint32))
    assert diff.size == 0, f"{diff.size} elements differ, first {diff[0]}: {got[diff[0]]} vs {ref[diff[0]]}"


def test_kernels(built):
    """tests/c/test_kquant_kernels.c: kc_mmx_* of every new type (direct and
    packed paths, partial tiles, bias, accumulate) against the dequantized
    weights in double precision, and kc_embed_row."""
    r = run([built / "tests" / "test_kquant_kernels"])
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert r.stdout.strip().splitlines()[-1].endswith(" 0 failed")


# ---------------------------------------------------------------- bad tensors

def assert_one_line(r, *keywords):
    """Exit 1, exactly one line on stderr naming the problem, no sanitizer report."""
    assert "Sanitizer" not in r.stderr and "runtime error" not in r.stderr, r.stderr
    assert r.returncode == 1, (r.returncode, r.stderr)
    msg = r.stderr
    assert msg.endswith("\n") and msg.count("\n") == 1, repr(msg)
    for k in keywords:
        assert re.search(k, msg, re.IGNORECASE), f"{k!r} not in {msg!r}"
    return msg


def test_truncated_kquant_tensor(built, tmp_path):
    """A Q4_K tensor whose data runs past the end of the file."""
    rng = np.random.default_rng(7)
    path = tmp_path / "trunc.gguf"
    write_raw_gguf(path, {"blk.0.ffn_down.weight": (QT.Q4_K, random_blocks(QT.Q4_K, 8, rng).reshape(4, -1))})
    data = path.read_bytes()
    path.write_bytes(data[:-200])
    assert_one_line(run([built / "tools" / "ingot-inspect", path]), "tensor 'blk.0.ffn_down.weight'",
                    "past end of file")


def test_kquant_row_not_multiple_of_256(built, tmp_path):
    """ne[0] = 384 cannot be Q6_K (256-element super-blocks): the file is
    hand-patched since gguf-py refuses to write it."""
    rng = np.random.default_rng(8)
    path = tmp_path / "rows.gguf"
    write_raw_gguf(path, {"blk.0.attn_q.weight": (QT.Q6_K, random_blocks(QT.Q6_K, 4, rng).reshape(2, -1))})
    data = bytearray(path.read_bytes())
    i = data.index(b"blk.0.attn_q.weight") + len(b"blk.0.attn_q.weight")
    # n_dims (u32) then ne[0], ne[1] (u64): 512 x 2 -> 384 x 2
    assert int.from_bytes(data[i + 4:i + 12], "little") == 512
    data[i + 4:i + 12] = (384).to_bytes(8, "little")
    path.write_bytes(bytes(data))
    assert_one_line(run([built / "tools" / "ingot-inspect", path]), "tensor 'blk.0.attn_q.weight'",
                    "384 is not a multiple of the q6_k block size 256")
