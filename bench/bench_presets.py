#!/usr/bin/env python3
"""Perplexity of SmolLM2 at every llama.cpp quantization preset, ingot beside llama.cpp.

The real SmolLM2-135M-Instruct GGUF (Q4_1, scripts/fetch_smollm2.sh) is
requantized by llama.cpp's own quantizer (`llama_model_quantize`, with
allow_requantize: the only source offline is Q4_1) into each preset. On each
file both engines compute the perplexity of the same token ids (ingot's
tokenization of GPL-3, `--tokens-out`) over the same non-overlapping windows
of --ctx tokens, each from an empty cache: ingot with `perplexity`, llama.cpp
through llama-cpp-python (logits_all, f32 KV). A second table gives ingot's
own load-time quantization (`--dtype`) of the Q4_1 file.

Not a test: it prints a markdown table (and writes it with --out). The
engines differ by llama.cpp's int8 rounding of activations; the presets differ
by their quantization error (compounded with Q4_1's: requantizing a Q4_1
model is not what a user downloads, but it is what can be made offline).

  python3 bench/bench_presets.py [--windows 8] [--ctx 512] [--out bench/presets.md]
"""
import argparse
import math
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
PRESETS = ["Q8_0", "Q6_K", "Q5_K_M", "Q5_1", "Q5_0", "Q4_K_M", "Q4_1", "Q4_0", "IQ4_NL", "IQ4_XS", "Q3_K_M", "Q2_K"]
DTYPES = ["q8_0", "q6_k", "q5_k_m", "q5_k", "q5_1", "q5_0", "q4_k_m", "q4_k", "q4_0", "q3_k_l", "q3_k_m", "q3_k_s",
          "q2_k"]
TEXT = "/usr/share/common-licenses/GPL-3"


def sh(cmd, **kw):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"{' '.join(map(str, cmd))}\n{r.stderr[-2000:]}")
    return r


def build(model, name, *opts):
    out = sh([ROOT / "ingot", "build", model, "--name", name, *opts], env=dict(os.environ, INGOT_PROGRESS="0"))
    return out.stdout.strip().splitlines()[-1]


def ingot_ppl(binary, ids_file, ctx):
    t0 = time.time()
    r = sh([binary, "perplexity", "--ids", ids_file, "--ctx", ctx])
    ppl = float(r.stdout.split("perplexity")[-1].split()[0])
    return ppl, time.time() - t0


def llama_ppl(path, ids, ctx, windows):
    import llama_cpp
    from make_smollm2_greedy import no_extra_buffer_types
    no_extra_buffer_types()
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=ctx, n_batch=ctx, n_ubatch=ctx, n_threads=2, logits_all=True,
                          seed=0, verbose=False, type_k=0, type_v=0, flash_attn=False)
    t0 = time.time()
    nll, count = 0.0, 0
    for w in range(windows):
        win = ids[w * ctx:(w + 1) * ctx]
        llm.reset()
        llm.eval(win)
        logits = np.array(llm.scores[:ctx], dtype=np.float64)
        m = logits.max(axis=1, keepdims=True)
        lse = (m[:, 0] + np.log(np.exp(logits - m).sum(axis=1)))
        for p in range(ctx - 1):
            nll -= logits[p, win[p + 1]] - lse[p]
            count += 1
    del llm
    return math.exp(nll / count), time.time() - t0


def quantize(src, dst, preset):
    import llama_cpp
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{preset}")
    p.allow_requantize = True
    p.nthread = 2
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), p)
    return rc == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--windows", type=int, default=8)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--out")
    args = ap.parse_args()
    gguf = sh([ROOT / "scripts" / "fetch_smollm2.sh"]).stdout.strip()
    work = pathlib.Path(tempfile.mkdtemp(prefix="ingot-presets-"))
    base = build(gguf, "smollm2")
    ids_path = work / "ids.bin"
    sh([base, "perplexity", "-f", TEXT, "--ctx", args.ctx, "--tokens-out", ids_path])
    ids = np.fromfile(ids_path, dtype="<i4").tolist()
    windows = min(args.windows, len(ids) // args.ctx)
    ids = ids[:windows * args.ctx]
    ids_txt = work / "ids.txt"
    ids_txt.write_text(" ".join(map(str, ids)))
    load = os.getloadavg()[0]
    lines = [f"SmolLM2-135M-Instruct, {windows} windows of {args.ctx} tokens of GPL-3 (ingot's tokenization), "
             f"2 threads, load {load:.1f} at start{' (busy machine: times are indicative)' if load > 0.5 else ''}",
             "", "| preset (llama.cpp file) | size MiB | ingot ppl | llama.cpp ppl | ingot / llama.cpp | ingot s | llama.cpp s |",
             "|---|---|---|---|---|---|---|"]
    for preset in PRESETS:
        dst = work / f"smollm2-{preset}.gguf"
        if preset == "Q4_1":
            dst = pathlib.Path(gguf)
        elif not quantize(gguf, dst, preset):
            lines.append(f"| {preset} | llama.cpp refused | | | | | |")
            continue
        binary = build(dst, f"preset-{preset.lower()}")
        pi, ti = ingot_ppl(binary, ids_txt, args.ctx)
        pl, tl = llama_ppl(dst, ids, args.ctx, windows)
        lines.append(f"| {preset} | {dst.stat().st_size / 2**20:.1f} | {pi:.4f} | {pl:.4f} | {pi / pl:.4f} | "
                     f"{ti:.1f} | {tl:.1f} |")
        print(lines[-1], flush=True)
    lines += ["", "| ingot --dtype (from the Q4_1 file) | ingot ppl |", "|---|---|"]
    for dt in DTYPES:
        binary = build(gguf, f"preset-dtype-{dt}", "--dtype", dt)
        pi, _ = ingot_ppl(binary, ids_txt, args.ctx)
        lines.append(f"| {dt} | {pi:.4f} |")
        print(lines[-1], flush=True)
    table = "\n".join(lines) + "\n"
    print(table)
    if args.out:
        pathlib.Path(args.out).write_text(table)


if __name__ == "__main__":
    main()
