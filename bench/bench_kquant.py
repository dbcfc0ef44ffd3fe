#!/usr/bin/env python3
"""Decode speed of SmolLM2-135M-Instruct as Q4_K_M against the Q4_1 file, on ingot's CPU backend.

Not a test: it never asserts on time, and nothing under tests/ uses it.

The Q4_K_M file is made once (models/smollm2/SmolLM2-135M-Instruct.Q4_K_M.gguf)
by llama.cpp's quantizer from the Q4_1 file (allow_requantize: no f16 source
is at hand offline; the speed depends on the types, not on the values).
SmolLM2's hidden size 576 is not a multiple of 256, so llama.cpp keeps the
K-quants for ffn_down only (Q4_K / Q6_K) and falls back to Q5_0 for the
576-wide matrices and Q8_0 for the tied embedding / LM head and some attn_v:
what a downloaded SmolLM2 Q4_K_M holds. The script prints the type counts.

For each file, ingot's default build (f32 activations, weights dequantized
in registers) and its --act-quant q8 build (int8 activations, integer dot
products) run `generate -p PROMPT -n N --ignore-eos --threads T`; the decode
rate is the binary's own figure. Reps are interleaved across builds so that
load from other jobs hits all alike; the median is shown with the load
average at start and end.

Run:  python3 bench/bench_kquant.py [--threads 1] [--reps 5] [--tokens 128]
"""
import argparse
import os
import pathlib
import re
import statistics
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
Q41 = ROOT / "models" / "smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
Q4KM = ROOT / "models" / "smollm2" / "SmolLM2-135M-Instruct.Q4_K_M.gguf"
PROMPT = "The history of the city begins with a small settlement on the river, where"
RE_DECODE = re.compile(r"^decode:\s+(\d+) tokens in ([\d.]+) s \(([\d.]+) tokens/s\)", re.M)


def make_q4km():
    """llama.cpp's Q4_K_M of the Q4_1 file, its log kept out of the output."""
    import llama_cpp
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M
    p.nthread = 2
    p.allow_requantize = True
    devnull = os.open(os.devnull, os.O_WRONLY)
    saved = os.dup(2)
    os.dup2(devnull, 2)
    try:
        rc = llama_cpp.llama_model_quantize(str(Q41).encode(), str(Q4KM).encode(), p)
    finally:
        os.dup2(saved, 2)
        os.close(devnull)
    if rc != 0:
        sys.exit(f"llama_model_quantize failed ({rc})")


def types(path):
    import gguf
    counts = {}
    for t in gguf.GGUFReader(str(path)).tensors:
        counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))


def build(model, name, *flags):
    r = subprocess.run([str(ROOT / "ingot"), "build", str(model), "--name", name, *flags], capture_output=True,
                       text=True)
    if r.returncode != 0:
        sys.exit(r.stderr)
    return r.stdout.strip().splitlines()[-1]


def decode_rate(binary, n, threads):
    r = subprocess.run([binary, "--threads", str(threads), "generate", "-p", PROMPT, "-n", str(n), "--ignore-eos"],
                       capture_output=True, text=True)
    m = RE_DECODE.search(r.stderr)
    if r.returncode != 0 or not m:
        sys.exit(f"{binary}: {r.stderr[-400:]}")
    return float(m.group(3))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=128)
    a = ap.parse_args()
    if not Q41.exists():
        sys.exit(f"{Q41} missing: scripts/fetch_smollm2.sh")
    if not Q4KM.exists():
        make_q4km()
    for f in (Q41, Q4KM):
        print(f"{f.name}: {f.stat().st_size / 2**20:.1f} MiB; {types(f)}")
    builds = {"Q4_1": build(Q41, "bench-kq-q4_1"), "Q4_1 a8": build(Q41, "bench-kq-q4_1-a8", "--act-quant", "q8"),
              "Q4_K_M": build(Q4KM, "bench-kq-q4_k_m"),
              "Q4_K_M a8": build(Q4KM, "bench-kq-q4_k_m-a8", "--act-quant", "q8")}
    load0 = os.getloadavg()[0]
    rates = {k: [] for k in builds}
    for k, b in builds.items():  # warm-up
        decode_rate(b, 16, a.threads)
    for _ in range(a.reps):
        for k, b in builds.items():
            rates[k].append(decode_rate(b, a.tokens, a.threads))
    print(f"decode tokens/s, {a.threads} thread(s), {a.tokens} tokens, median of {a.reps} "
          f"(load average {load0:.1f} -> {os.getloadavg()[0]:.1f}):")
    for k, v in rates.items():
        print(f"  {k:10s} {statistics.median(v):6.1f}   (runs: {', '.join(f'{x:.1f}' for x in v)})")


if __name__ == "__main__":
    main()
