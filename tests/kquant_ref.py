"""A NumPy replay of a GGUF Llama, to explain where llama.cpp's logits and
ingot's differ on quantized files.

forward(model, tokens) runs the model on gguf-py's dequantization of every
tensor (float64 math): the model the file defines, which ingot computes by
default (weights dequantized exactly, f32 activations).

forward(model, tokens, act_quant=True) also rounds every matmul input the
way llama.cpp's CPU backend does before its integer dot products: per block
of 32 (Q8_0: for Q8_0/Q4_0/Q5_0/IQ4_NL weights; Q8_1: Q4_1/Q5_1, whose min
term uses the block sum stored as f16) or 256 (Q8_K: the K-quants and
IQ4_XS) a scale from the block's largest magnitude and int8 codes. Attention
(f32 K/V cache), norms and RoPE stay in float.

forward(model, tokens, act_quant="ingot") rounds them as ingot's
--act-quant q8 does (kc_quantize_q8): blocks of 32 for every type, f32 scale.

forward(model, tokens, act_quant="k8") rounds them as ingot's default (k8) does
where it rounds to int8: the input of a matmul whose weights (those sharing the
input in a fused build: q/k/v, gate/up) are all interleaved Q4_K/Q5_K/Q6_K
(rows a multiple of 16, row length of 256) is rounded per 256 with Q8_K's codes
and scale (kc_quantize_q16s_a8: the same integers, the same scale); every other
input stays in float (ingot's 15-bit rounding there is 128 times finer).
"""
import numpy as np

import gguf
import gguf.quants
from gguf import GGMLQuantizationType as QT

# the activation format llama.cpp's vec_dot pairs with each weight type (ggml-cpu type traits)
VEC_DOT = {QT.Q8_0: "q8_0", QT.Q4_0: "q8_0", QT.Q5_0: "q8_0", QT.IQ4_NL: "q8_0", QT.Q4_1: "q8_1",
           QT.Q5_1: "q8_1", QT.Q2_K: "q8_k", QT.Q3_K: "q8_k", QT.Q4_K: "q8_k", QT.Q5_K: "q8_k", QT.Q6_K: "q8_k",
           QT.IQ4_XS: "q8_k"}


class Model:
    def __init__(self, path):
        r = gguf.GGUFReader(str(path))
        self.meta = {k: f.contents() for k, f in r.fields.items() if k.startswith("llama.")}
        self.w, self.types, self.mins = {}, {}, {}
        for t in r.tensors:
            shape = [int(x) for x in reversed(t.shape)]  # PyTorch order: [rows, row length]
            self.w[t.name] = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64).reshape(shape)
            self.types[t.name] = t.tensor_type
            if t.tensor_type in (QT.Q4_1, QT.Q5_1):  # the f16 min of each block (bytes 2..3)
                raw = np.asarray(t.data, dtype=np.uint8).reshape(shape[0], -1)
                blocks = raw.reshape(shape[0], shape[1] // 32, -1)
                self.mins[t.name] = blocks[:, :, 2:4].copy().view("<f2")[..., 0].astype(np.float64)


def quant_q8(x, kind):
    """llama.cpp's (or ingot's, kind "ingot") activation rounding of rows x (f32): returns the rounded
    values, and for Q8_1 the per-block d (f16) * sum of codes and the block
    sum s as llama.cpp stores it (f16 of the f32 d times the sum)."""
    x = np.asarray(x, dtype=np.float32)
    T, n = x.shape
    B = 256 if kind == "q8_k" else 32
    xb = x.reshape(T, n // B, B)
    if kind == "q8_k":  # scale -127 / (the value of largest magnitude), f32; codes clamped to 127
        imax = np.abs(xb).argmax(-1)[..., None]
        mx = np.take_along_axis(xb, imax, -1)
        with np.errstate(divide="ignore"):
            iscale = np.where(mx == 0, 0, np.float32(-127.0) / mx).astype(np.float32)
        q = np.minimum(127, np.rint(iscale * xb))
        d = np.where(iscale == 0, 0, np.float32(1) / iscale).astype(np.float32)
        return (q * d).reshape(T, n).astype(np.float64), None
    amax = np.abs(xb).max(-1, keepdims=True)
    d = (amax / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(amax == 0, 0, np.float32(127) / amax).astype(np.float32)
    q = np.rint(xb * inv)
    if kind == "ingot":  # kc_q8: the f32 scale amax/127 as is
        return (q * d).reshape(T, n).astype(np.float64), None
    d16 = d.astype(np.float16).astype(np.float64)
    xq = (q * d16).reshape(T, n)
    if kind == "q8_0":
        return xq, None
    qsum = q.sum(-1)
    s16 = (d[..., 0] * qsum.astype(np.float32)).astype(np.float16).astype(np.float64)
    return xq, s16 - d16[..., 0] * qsum  # what the stored block sum adds to the min term


def rmsnorm(x, g, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g


def rope_halves(x, pos, theta):
    hd = x.shape[-1]
    inv = 1.0 / theta ** (np.arange(0, hd, 2) / hd)
    ang = pos[:, None] * inv[None, :]
    cos, sin = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))
    rot = np.concatenate([-x[..., hd // 2:], x[..., :hd // 2]], -1)
    return x * cos[:, None, :] + rot * sin[:, None, :]


def forward(m, tokens, act_quant=False):
    """Teacher-forced logits [len(tokens), vocab] of a GGUF llama (untied output)."""
    meta = m.meta
    H, KV = int(meta["llama.attention.head_count"]), int(meta["llama.attention.head_count_kv"])
    eps = float(meta["llama.attention.layer_norm_rms_epsilon"])
    theta = float(meta.get("llama.rope.freq_base", 10000.0))
    hd = int(meta["llama.embedding_length"]) // H

    def k8_group(names):
        return all(m.types[n] in (QT.Q4_K, QT.Q5_K, QT.Q6_K) and m.w[n].shape[0] % 16 == 0
                   and m.w[n].shape[1] % 256 == 0 for n in names)

    def mm(h, name, group=None):
        kind = VEC_DOT.get(m.types[name]) if act_quant else None
        if kind and act_quant == "ingot":
            kind = "ingot"
        if act_quant == "k8":
            kind = "q8_k" if k8_group(group or [name]) else None
        if kind is None:
            return h @ m.w[name].T
        hq, s_fix = quant_q8(h, kind)
        y = hq @ m.w[name].T
        if s_fix is not None:
            y += s_fix @ m.mins[name].T
        return y

    n = len(tokens)
    pos = np.arange(n, dtype=np.float64)
    mask = np.triu(np.full((n, n), -np.inf), 1)
    x = m.w["token_embd.weight"][np.asarray(tokens)]
    for i in range(int(meta["llama.block_count"])):
        p = f"blk.{i}."
        h = rmsnorm(x, m.w[p + "attn_norm.weight"], eps)
        # GGUF llama rows pair (2i, 2i+1) for RoPE: regroup them into halves
        qkv = [p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"]
        q = mm(h, p + "attn_q.weight", qkv).reshape(n, H, hd // 2, 2).swapaxes(2, 3).reshape(n, H, hd)
        k = mm(h, p + "attn_k.weight", qkv).reshape(n, KV, hd // 2, 2).swapaxes(2, 3).reshape(n, KV, hd)
        v = mm(h, p + "attn_v.weight", qkv).reshape(n, KV, hd)
        q, k = rope_halves(q, pos, theta), rope_halves(k, pos, theta)
        k, v = np.repeat(k, H // KV, axis=1), np.repeat(v, H // KV, axis=1)
        s = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        x = x + mm(np.einsum("hts,shd->thd", s, v).reshape(n, H * hd), p + "attn_output.weight")
        h = rmsnorm(x, m.w[p + "ffn_norm.weight"], eps)
        gu = [p + "ffn_gate.weight", p + "ffn_up.weight"]
        g, u = mm(h, p + "ffn_gate.weight", gu), mm(h, p + "ffn_up.weight", gu)
        x = x + mm(g / (1 + np.exp(-g)) * u, p + "ffn_down.weight")
    return mm(rmsnorm(x, m.w["output_norm.weight"], eps), "output.weight")
