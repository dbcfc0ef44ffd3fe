"""GPTQ/AWQ/FP8 checkpoints on the CPU: forward time of the repacked types against GGUF's 32-block types.

A random Llama (hidden 1024, ffn 2816, 4 layers; vocab 512, so that the f32 LM head, which --dtype would quantize, weighs little) is quantized with tests/quant_ref.py
into GPTQ 4-bit g128, act-order GPTQ 4-bit g128, AWQ g128 and FP8 (128x128 blocks); each checkpoint
is built as stored (q4_z, act-order q4_z + gathered activations, f8_b32) and, for comparison,
converted at load to q4_0 / q8_0 (the GGUF types of the same bits). Every binary runs
`logits` over 1 token (the fixed cost: loading and repacking), over a 256-token prompt (prefill)
and over 64 tokens one at a time (decode), runs of all binaries alternated, best of N; prints the
fixed cost and, without it, ms per prefill and per decoded token.

    python3 bench/bench_quant_ckpt.py [--reps 5] [--threads 2]

The machine may be shared: compare the ratios within one run, not absolute times across runs.
"""
import argparse
import json
import pathlib
import subprocess
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import quant_ref as qr  # noqa: E402
from test_quant_ckpt import LINEARS, quant_config, quantize, save  # noqa: E402

CASES = [  # name, method, quantization, build options
    ("gptq4", "gptq", dict(bits=4, group_size=128), ()),
    ("gptq4->q4_0", "gptq", dict(bits=4, group_size=128), ("--dtype", "q4_0")),
    ("gptq4-act-order", "gptq", dict(bits=4, group_size=128, desc_act=True), ()),
    ("awq4", "awq", dict(group_size=128), ()),
    ("fp8", "fp8", dict(block=[128, 128]), ()),
    ("fp8->q8_0", "fp8", dict(block=[128, 128]), ("--dtype", "q8_0")),
]


def checkpoint(out, method, q):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    if (out / "config.json").exists():
        return out
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=512, hidden_size=1024, intermediate_size=2816, num_hidden_layers=4,
                      num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=1024,
                      tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).float()
    stored = {}
    for k, v in model.state_dict().items():
        v = v.numpy().astype(np.float32)
        prefix = k[:-len(".weight")]
        if k.endswith(".weight") and prefix.split(".", 3)[-1] in LINEARS:
            parts, _ = quantize(method, v, q)
            stored.update({f"{prefix}.{s}": t for s, t in parts.items()})
        else:
            stored[k] = v
    out.mkdir(parents=True)
    save(out / "model.safetensors", stored)
    c = json.loads(model.config.to_json_string())
    c["architectures"] = ["LlamaForCausalLM"]
    c["quantization_config"] = quant_config(method, q)
    (out / "config.json").write_text(json.dumps(c))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    work = ROOT / "build" / "_bench_quant_ckpt"
    bins = {}
    for name, method, q, opts in CASES:
        d = checkpoint(work / f"{method}-{'-'.join(f'{k}{v}' for k, v in sorted(q.items()))}", method, q)
        r = subprocess.run([str(ROOT / "ingot"), "build", str(d), "--name", f"bq-{name.replace('>', '')}", *opts],
                           capture_output=True, text=True, check=True)
        bins[name] = r.stdout.strip().splitlines()[-1]
    prompt = ",".join(str((37 * i) % 500 + 1) for i in range(256))
    steps = ",".join(str((37 * i) % 500 + 1) for i in range(64))
    modes = (("load", "1", []), ("prefill", prompt, []), ("decode", steps, ["--decode"]))
    best = {(n, m[0]): float("inf") for n in bins for m in modes}
    for _ in range(a.reps):
        for n, b in bins.items():
            for mode, toks, extra in modes:
                t = time.perf_counter()
                subprocess.run([b, "--threads", str(a.threads), "logits", "--tokens", toks, "--out", "/dev/null",
                                *extra], check=True, capture_output=True)
                best[(n, mode)] = min(best[(n, mode)], time.perf_counter() - t)
    # a 1-token run is the process's fixed cost (loading and repacking the checkpoint): subtracted
    print(f"{'binary':18s} {'load+1 (ms)':>12s} {'prefill 256 (ms)':>17s} {'decode (ms/token)':>18s}")
    for n in bins:
        load = best[(n, "load")]
        print(f"{n:18s} {1e3 * load:12.1f} {1e3 * (best[(n, 'prefill')] - load):17.1f} "
              f"{1e3 * (best[(n, 'decode')] - load) / 63:18.2f}")


if __name__ == "__main__":
    main()
