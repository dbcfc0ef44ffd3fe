#!/usr/bin/env python3
"""Quantization error per weight type: ingot's load-time quantizer (--dtype, runtime/load/quantize.c)
against llama.cpp's own (`llama_model_quantize`) on the same f32 tensors.

Two sources of f32 weights, each written as an F32 GGUF:
  * SmolLM2-135M-Instruct, its Q4_1 file converted to F32 by llama.cpp (the only real checkpoint
    offline: its values sit on Q4_1's grid, which flatters q4_1 and the finer types alike);
  * the random Llama of tests/fixtures/make_kquant_models.py (Gaussian weights, rows of 256).
llama.cpp quantizes each source with `pure` set (every matrix in the one type; a tensor whose rows do
not fit the type takes llama.cpp's fallback and is left out of that type's row). ingot quantizes the
very same tensors through `ingot-inspect --dump NAME --as TYPE` (quantize, then dequantize). Both are
read back as f32 (gguf-py dequantizes llama.cpp's blocks) and compared with the source:
RMSE = sqrt(sum (w - q(w))^2 / n) over every compared tensor of the type.

Not a test: it prints a markdown table (and writes it with --out).

  python3 bench/bench_quant_rmse.py [--smollm2-layers 6] [--types q2_k,q3_k] [--out bench/quant_rmse.md]
"""
import argparse
import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
INSPECT = ROOT / "build" / "_obj" / "tools" / "ingot-inspect"
# ingot --dtype -> llama.cpp's ftype of that type (with pure: every matrix in it)
TYPES = {"q8_0": "Q8_0", "q4_0": "Q4_0", "q4_1": "Q4_1", "q5_0": "Q5_0", "q5_1": "Q5_1", "q2_k": "Q2_K",
         "q3_k": "Q3_K_S", "q4_k": "Q4_K_S", "q5_k": "Q5_K_S", "q6_k": "Q6_K"}


def sh(cmd, **kw):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"{' '.join(map(str, cmd))}: {r.stderr.strip()}")
    return r


def llama_quantize(src, dst, ftype):
    import llama_cpp
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_{ftype}")
    p.allow_requantize = True
    p.pure = True
    p.nthread = 2
    if llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), p) != 0:
        sys.exit(f"llama.cpp could not quantize {src} to {ftype}")


def tensors(path):
    """{name: (gguf type name, f32 array [rows, row])} of the file's matrices."""
    import gguf
    import gguf.quants
    out = {}
    for t in gguf.GGUFReader(str(path)).tensors:
        if len(t.shape) != 2:
            continue
        out[t.name] = (t.tensor_type.name.lower(),
                       gguf.quants.dequantize(t.data, t.tensor_type).reshape(-1, int(t.shape[0])).astype(np.float32))
    return out


def ingot_roundtrip(path, name, dtype, work):
    out = work / "rt.f32"
    sh([INSPECT, path, "--dump", name, out, "--as", dtype])
    return np.fromfile(out, dtype="<f4")


def compare(label, f32_path, work, types, layers=None):
    src = {n: w for n, (_, w) in tensors(f32_path).items()
           if layers is None or not n.startswith("blk.") or int(n.split(".")[1]) < layers}
    rows = []
    for dtype in types:
        ftype = TYPES[dtype]
        qpath = work / f"{label}-{dtype}.gguf"
        llama_quantize(f32_path, qpath, "MOSTLY_" + ftype)
        theirs = tensors(qpath)
        se_i = se_l = 0.0
        n = count = 0
        for name, w in src.items():
            ltype, lw = theirs[name]
            if ltype != dtype:  # llama.cpp's fallback for rows that do not fit the type
                continue
            iw = ingot_roundtrip(f32_path, name, dtype, work).reshape(w.shape)
            se_i += float(((w.astype(np.float64) - iw) ** 2).sum())
            se_l += float(((w.astype(np.float64) - lw) ** 2).sum())
            n += w.size
            count += 1
        if not n:
            rows.append(f"| {label} | {dtype} | no tensor fits | | | |")
            continue
        ri, rl = (se_i / n) ** 0.5, (se_l / n) ** 0.5
        rows.append(f"| {label} | {dtype} | {count} ({n / 1e6:.1f} M weights) | {ri:.4e} | {rl:.4e} | {ri / rl:.3f} |")
        print(rows[-1], flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smollm2-layers", type=int, default=6, help="compare blk.0 .. blk.N-1 (and the embedding)")
    ap.add_argument("--types", default=",".join(TYPES), help="comma-separated --dtype names (default: all)")
    ap.add_argument("--out")
    args = ap.parse_args()
    types = args.types.split(",")
    for t in types:
        if t not in TYPES:
            sys.exit(f"--types: unknown {t} (one of {', '.join(TYPES)})")
    if not INSPECT.exists():
        sh(["make", "-C", ROOT, "-s", "-j2", "tools"])
    work = pathlib.Path(tempfile.mkdtemp(prefix="ingot-rmse-"))
    smol = sh([ROOT / "scripts" / "fetch_smollm2.sh"]).stdout.strip()
    smol_f32 = work / "smollm2-f32.gguf"
    llama_quantize(smol, smol_f32, "ALL_F32")
    sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
    import make_kquant_models
    rand_f32 = work / "random-f32.gguf"
    make_kquant_models.write_f32_gguf(rand_f32)
    lines = ["| weights | type | tensors compared | ingot RMSE | llama.cpp RMSE | ingot / llama.cpp |",
             "|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    lines += compare("SmolLM2 (from Q4_1)", smol_f32, work, types, args.smollm2_layers)
    lines += compare("random Llama", rand_f32, work, types)
    table = "\n".join(lines) + "\n"
    print("\n" + table)
    if args.out:
        pathlib.Path(args.out).write_text(table)
    for p in work.iterdir():
        p.unlink()
    os.rmdir(work)


if __name__ == "__main__":
    main()
