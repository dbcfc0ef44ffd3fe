"""GPTQ, AWQ and FP8 checkpoints in numpy, written from each format's documented packing.

quantize_* turn an f32 weight [out, in] into the tensors a checkpoint stores
(round-to-nearest codes: the format is what is under test, not the search
for good codes); dequantize_* read such tensors back into the f32 weights
they define, independently of ingot's loader:

- GPTQ (AutoGPTQ / GPTQModel): qweight int32 [in*bits/32, out], input i of
  output j in word i // (32/bits), bits (i % (32/bits))*bits; qzeros int32
  [groups, out*bits/32] packed the same way along the outputs; scales f16
  [groups, out]; g_idx int32 [in], the group of each input (act-order:
  a permutation of i // group_size). w = scale * (q - z), where the classic
  format ("gptq") stores z - 1 and "gptq_v2" stores z.
- AWQ (AutoAWQ GEMM): qweight int32 [in, out/8] and qzeros [groups, out/8],
  eight outputs per word in the nibble order 0 2 4 6 1 3 5 7; scales f16
  [groups, out]; w = scale * (q - z).
- FP8 (float8_e4m3fn): weight [out, in] and weight_scale_inv f32 per
  block of the weight_block_size (DeepSeek-V3, Qwen3-FP8), or weight_scale
  one f32 for the tensor; w = scale * e4m3(code).
"""
import numpy as np

AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]  # nibble k of a word holds output 8c + AWQ_ORDER[k]


def _groups(n_in, group_size):
    return 1 if group_size == -1 else -(-n_in // group_size)


def _zero_point_codes(w, n_groups, g_idx, bits, sym):
    """Per group and output: f16 scale, integer zero, and the codes q [in, out]."""
    maxq = (1 << bits) - 1
    out_f, in_f = w.shape
    scales = np.zeros((n_groups, out_f), np.float16)
    zeros = np.zeros((n_groups, out_f), np.int64)
    for g in range(n_groups):
        cols = w[:, g_idx == g]
        lo, hi = np.minimum(cols.min(1), 0), np.maximum(cols.max(1), 0)
        if sym:
            s = np.maximum(np.abs(lo), np.abs(hi)) * 2 / maxq
            z = np.full(out_f, (maxq + 1) // 2)
        else:
            s = (hi - lo) / maxq
            z = np.clip(np.round(-lo / np.where(s > 0, s, 1)), 1, maxq)  # >= 1: the classic format stores z - 1
        scales[g] = np.where(s > 0, s, 1e-3).astype(np.float16)
        zeros[g] = z
    s_in = scales.astype(np.float32)[g_idx].T  # [out, in]
    q = np.clip(np.round(w / s_in) + zeros[g_idx].T, 0, maxq).astype(np.uint32)
    return scales, zeros, q.T  # q: [in, out]


def _pack_rows(v, bits):
    """Packs 32/bits consecutive rows of v (uint values) into one int32 row."""
    per = 32 // bits
    v = v.astype(np.uint32).reshape(v.shape[0] // per, per, *v.shape[1:])
    word = np.zeros(v.shape[:1] + v.shape[2:], np.uint32)
    for k in range(per):
        word |= v[:, k] << np.uint32(bits * k)
    return word.view(np.int32)


def quantize_gptq(w, bits, group_size, sym=False, v2=False, act_order=False, seed=0):
    out_f, in_f = w.shape
    n_groups = _groups(in_f, group_size)
    g_idx = np.zeros(in_f, np.int32) if group_size == -1 else (np.arange(in_f) // group_size).astype(np.int32)
    if act_order:  # the order GPTQ visited the inputs in: a permutation of the groups' members
        g_idx = g_idx[np.random.default_rng(seed).permutation(in_f)]
    scales, zeros, q = _zero_point_codes(w, n_groups, g_idx, bits, sym)
    stored = zeros - (0 if v2 else 1)
    return {"qweight": _pack_rows(q, bits),
            "qzeros": _pack_rows(stored.T.astype(np.uint32), bits).T.copy(),
            "scales": scales, "g_idx": g_idx}


def _unpack_rows(words, bits):
    per = 32 // bits
    u = words.view(np.uint32)
    parts = [(u >> np.uint32(bits * k)) & np.uint32((1 << bits) - 1) for k in range(per)]
    return np.stack(parts, 1).reshape(u.shape[0] * per, *u.shape[1:]).astype(np.int64)


def dequantize_gptq(t, bits, v2=False):
    q = _unpack_rows(t["qweight"], bits)                       # [in, out]
    z = _unpack_rows(t["qzeros"].T.copy(), bits).T + (0 if v2 else 1)  # [groups, out]
    g = t["g_idx"].astype(np.int64)
    s = t["scales"].astype(np.float32)
    return (s[g] * (q - z[g]).astype(np.float32)).T.copy()   # [out, in]


def _awq_pack(v):
    """v [rows, out] (4-bit values) -> int32 [rows, out/8] in AWQ's nibble order."""
    v = v.astype(np.uint32).reshape(v.shape[0], -1, 8)
    word = np.zeros(v.shape[:2], np.uint32)
    for k in range(8):
        word |= v[:, :, AWQ_ORDER[k]] << np.uint32(4 * k)
    return word.view(np.int32)


def _awq_unpack(words):
    u = words.view(np.uint32)
    out = np.zeros((u.shape[0], u.shape[1] * 8), np.int64)
    for k in range(8):
        out[:, AWQ_ORDER[k]::8] = (u >> np.uint32(4 * k)) & np.uint32(15)
    return out


def quantize_awq(w, group_size):
    out_f, in_f = w.shape
    n_groups = _groups(in_f, group_size)
    g_idx = np.zeros(in_f, np.int64) if group_size == -1 else np.arange(in_f) // group_size
    scales, zeros, q = _zero_point_codes(w, n_groups, g_idx, 4, sym=False)
    return {"qweight": _awq_pack(q), "qzeros": _awq_pack(zeros), "scales": scales}


def dequantize_awq(t, group_size):
    q = _awq_unpack(t["qweight"])  # [in, out]
    z = _awq_unpack(t["qzeros"])   # [groups, out]
    s = t["scales"].astype(np.float32)
    g = np.zeros(q.shape[0], np.int64) if group_size == -1 else np.arange(q.shape[0]) // group_size
    return (s[g] * (q - z[g]).astype(np.float32)).T.copy()


def e4m3_value(code):
    """float8_e4m3fn codes (uint8) -> f32: sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinities."""
    c = code.astype(np.int64)
    sign = np.where(c & 0x80, -1.0, 1.0)
    e, m = (c >> 3) & 15, c & 7
    v = np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * 2.0 ** (e - 7))
    v = np.where((c & 0x7f) == 0x7f, np.nan, v)
    return (sign * v).astype(np.float32)


_E4M3_TABLE = e4m3_value(np.arange(256))


def _e4m3_encode(x):
    """Nearest finite E4M3 code of each value (|x| <= 448)."""
    finite = np.arange(256)[np.isfinite(_E4M3_TABLE)]
    vals = _E4M3_TABLE[finite]
    idx = np.abs(x.reshape(-1, 1) - vals.reshape(1, -1)).argmin(1)
    return finite[idx].astype(np.uint8).reshape(x.shape)


def quantize_fp8(w, block=(128, 128)):
    """block=None: one scale for the tensor (weight_scale), else weight_scale_inv per block."""
    if block is None:
        s = np.float32(np.abs(w).max() / 448.0)
        return {"weight": _e4m3_encode(w / s), "weight_scale": np.array(s, np.float32)}
    br, bc = block
    rows, cols = w.shape
    sr, sc = -(-rows // br), -(-cols // bc)
    scale = np.zeros((sr, sc), np.float32)
    codes = np.zeros(w.shape, np.uint8)
    for i in range(sr):
        for j in range(sc):
            blk = w[i * br:(i + 1) * br, j * bc:(j + 1) * bc]
            s = np.float32(max(np.abs(blk).max(), 1e-6) / 448.0)
            scale[i, j] = s
            codes[i * br:(i + 1) * br, j * bc:(j + 1) * bc] = _e4m3_encode(blk / s)
    return {"weight": codes, "weight_scale_inv": scale}


def dequantize_fp8(t, block=(128, 128)):
    v = e4m3_value(t["weight"])
    if block is None:
        return v * np.float32(t["weight_scale"])
    br, bc = block
    s = np.repeat(np.repeat(t["weight_scale_inv"], br, 0), bc, 1)[:v.shape[0], :v.shape[1]]
    return v * s
