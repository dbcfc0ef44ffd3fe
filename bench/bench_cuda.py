#!/usr/bin/env python3
"""Fused vs unfused CUDA builds of one model: launches per decode step, estimated global-memory
bytes per decoded token, and the bandwidth roofline on an H100 (3.35 TB/s) — ESTIMATES from the
generator's plan (what each launch reads and writes), printed by `NAME --info`. Where a GPU is
present, it also measures decode tokens/s of both builds (`generate`, greedy) in the same run, and
prefill tokens/s of an f16 build with cuBLASLt against the same build's tiled GEMM, and decode
tokens/s of builds converted to q8_0, q4_k_m and q6_k.

    python3 bench/bench_cuda.py [MODEL] [--tokens 128] [--bin-dir DIR [--build-only]]

MODEL defaults to the SmolLM2-135M-Instruct Q4_1 GGUF (scripts/fetch_smollm2.sh). Not a test:
nothing here passes or fails on a number.

--bin-dir DIR runs binaries already built elsewhere instead of building them (a GPU host without the
build's tools): DIR/NAME for each NAME below, built with `./ingot build MODEL --name NAME --backend
cuda OPTIONS` (`--build-only --bin-dir DIR` builds and copies them there, on the machine with the tools).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# name: the `./ingot build` options of each binary the benchmark runs
BUILDS = {"bench-cuda": (), "bench-cuda-nofuse": ("--no-fuse",), "bench-cuda-f16": ("--dtype", "f16"),
          "bench-cuda-q8-0": ("--dtype", "q8_0"), "bench-cuda-q4-k-m": ("--dtype", "q4_k_m"),
          "bench-cuda-q6-k": ("--dtype", "q6_k")}
BIN_DIR = None
MODEL = None  # the checkpoint every run reads (--weights): the build's own path may not exist on a GPU host


def build(model, name):
    """The binary NAME: built now, or taken from --bin-dir."""
    if BIN_DIR:
        path = os.path.join(BIN_DIR, name)
        if not os.access(path, os.X_OK):
            sys.exit(f"{path}: missing; build it with ./ingot build MODEL --name {name} --backend cuda "
                     + " ".join(BUILDS[name]))
        return path
    r = subprocess.run([os.path.join(ROOT, "ingot"), "build", model, "--name", name, "--backend", "cuda",
                        *BUILDS[name]], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(r.stderr)
    return r.stdout.strip().splitlines()[-1]


def info(binary):
    r = subprocess.run([binary, "--weights", MODEL, "--info"], capture_output=True, text=True)
    out = r.stdout
    launches = re.search(r"(\d+) launches per decode step: (\S+) per layer", out)
    est = re.search(r"decode estimate: (\S+) MB weights \+ (\S+) KB activations \+ (\S+) KB KV \((\d+) positions\) = "
                    r"(\S+) MB moved per token; H100 roofline \(3.35 TB/s\): (\d+) tokens/s", out)
    if not launches or not est:
        sys.exit(f"{binary} --info: unexpected output\n{out}")
    gpu = r.returncode == 0
    return {"launches": int(launches.group(1)), "per_layer": launches.group(2), "weights_mb": float(est.group(1)),
            "act_kb": float(est.group(2)), "kv_kb": float(est.group(3)), "ctx": int(est.group(4)),
            "total_mb": float(est.group(5)), "roofline": int(est.group(6)), "gpu": gpu,
            "no_gpu_reason": "" if gpu else r.stderr.strip().splitlines()[-1]}


def decode_tps(binary, n):
    r = subprocess.run([binary, "--weights", MODEL, "generate", "-p", "The lighthouse keeper", "-n", str(n),
                        "--ignore-eos"], capture_output=True, text=True)
    m = re.search(r"decode:.*\(([\d.]+) tokens/s\)", r.stderr)
    return float(m.group(1)) if m else None


def prefill_tps(binary, n_words, env=None):
    prompt = " ".join(["the lighthouse keeper climbed the stairs"] * (n_words // 6 + 1))
    r = subprocess.run([binary, "--weights", MODEL, "generate", "-p", prompt, "-n", "1"], capture_output=True,
                       text=True, env={**os.environ, **(env or {})})
    m = re.search(r"prefill:.*\(([\d.]+) tokens/s\)", r.stderr)
    return float(m.group(1)) if m else None


def main():
    global BIN_DIR, MODEL
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--bin-dir", help="run the binaries in DIR (built elsewhere) instead of building them")
    ap.add_argument("--build-only", action="store_true", help="with --bin-dir: build every binary and copy it "
                    "into DIR, then stop (for a GPU host that cannot build)")
    a = ap.parse_args()
    model = a.model or subprocess.run([os.path.join(ROOT, "scripts", "fetch_smollm2.sh")], capture_output=True,
                                      text=True, check=True).stdout.strip()
    MODEL = model
    if a.build_only:
        if not a.bin_dir:
            sys.exit("--build-only needs --bin-dir")
        os.makedirs(a.bin_dir, exist_ok=True)
        for name in BUILDS:
            shutil.copy(build(model, name), os.path.join(a.bin_dir, name))
        print(f"built {len(BUILDS)} binaries into {a.bin_dir}")
        return
    BIN_DIR = a.bin_dir
    fused_bin, unfused_bin = build(model, "bench-cuda"), build(model, "bench-cuda-nofuse")
    fused, unfused = info(fused_bin), info(unfused_bin)
    print(f"model: {model}")
    print(f"ESTIMATES (generator's plan; batch of one sequence, KV at {fused['ctx']} positions, f32 KV):")
    print(f"{'build':10s} {'launches/step':>14s} {'per layer':>10s} {'weights MB':>11s} {'activ. KB':>10s} "
          f"{'KV KB':>9s} {'MB/token':>9s} {'H100 roofline tok/s':>20s}")
    for name, r in (("fused", fused), ("unfused", unfused)):
        print(f"{name:10s} {r['launches']:14d} {r['per_layer']:>10s} {r['weights_mb']:11.3f} {r['act_kb']:10.1f} "
              f"{r['kv_kb']:9.1f} {r['total_mb']:9.3f} {r['roofline']:20d}")
    print(f"ratio fused/unfused: launches {fused['launches'] / unfused['launches']:.2f}x, "
          f"bytes {fused['total_mb'] / unfused['total_mb']:.3f}x, roofline {fused['roofline'] / unfused['roofline']:.3f}x")
    if fused["gpu"]:
        f, u = decode_tps(fused_bin, a.tokens), decode_tps(unfused_bin, a.tokens)
        print(f"MEASURED decode ({a.tokens} tokens, greedy): fused {f} tok/s, unfused {u} tok/s"
              + (f", ratio {f / u:.2f}x" if f and u else ""))
        # prefill GEMMs: cuBLASLt (F16 in, F32 accumulate) against the tiled GEMM, same f16 build
        half = build(model, "bench-cuda-f16")
        lt, tiled = prefill_tps(half, 480), prefill_tps(half, 480, {"INGOT_CUBLASLT": "0"})
        print(f"MEASURED prefill (--dtype f16, ~480 tokens): cuBLASLt {lt} tok/s, tiled GEMM {tiled} tok/s"
              + (f", ratio {lt / tiled:.2f}x" if lt and tiled else ""))
        # the weight types of llama.cpp's presets, cast from the same file (--dtype converts at load)
        for dtype in ("q8_0", "q4_k_m", "q6_k"):
            binary = build(model, "bench-cuda-" + dtype.replace("_", "-"))
            print(f"MEASURED decode --dtype {dtype}: {decode_tps(binary, a.tokens)} tok/s")
    else:
        print(f"measured decode: skipped ({fused['no_gpu_reason']})")


if __name__ == "__main__":
    main()
