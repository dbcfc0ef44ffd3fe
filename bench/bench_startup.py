#!/usr/bin/env python3
"""Start-up benchmark: exec to first token, and peak resident memory, ingot beside llama.cpp.

Not a test: it never asserts on time, and nothing under tests/ uses it.

For each GGUF it builds the ingot binary (./ingot build, which casts the weights into
NAME.weights) and runs, alternated, --reps times each (median, min-max):

  ingot (cast)      BIN generate -p "Hello" -n 1 --ignore-eos   the weights the build cast, read
                                                                into huge pages
  ingot (cast, mmap) the same with --mmap                       the cast file mapped, no copy
  ingot (no cast)   the same with --no-cast                     the checkpoint converted and
                                                                interleaved at load
  llama.cpp         llama-bench -m GGUF -p 0 -n 1 -r 1 -t N     its defaults: load (weights
                                                                repacked where it does), a
                                                                warm-up token and one token

Each figure is the whole process's wall time from fork to exit (what an operator waits for) and
its peak resident set (ru_maxrss). The page cache is warm: every file is read once before
timing. llama-bench is llama.cpp's own, built from source by bench/build_llama_cpp.sh.

Run:  python3 bench/bench_startup.py [--models GGUF,...] [--reps 5] [--threads 2]
"""
import argparse
import os
import pathlib
import statistics
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from bench_smollm2 import ROOT, default_gguf, git_rev, llama_bench_path, loadavg, machine_info  # noqa: E402


def timed(cmd):
    """(wall seconds, peak RSS MiB) of one run of cmd; raises if it fails."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    err = p.stderr.read().decode(errors="replace")
    p.stderr.close()
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({p.returncode}): {err[-400:]}")
    return wall, usage.ru_maxrss / 1024


def build(gguf):
    name = "start-" + gguf.stem.lower().replace("_", "-").replace(".", "-")
    r = subprocess.run([str(ROOT / "ingot"), "build", str(gguf), "--name", name], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"ingot build {gguf} failed:\n{r.stderr[-2000:]}")
    return pathlib.Path(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", help="comma-separated GGUFs (default: SmolLM2 Q4_1 and the 1.1B Q4_K_M of "
                                     "bench/make_synthetic_llama.py when present)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    if a.models:
        models = [pathlib.Path(m) for m in a.models.split(",")]
    else:
        models = [default_gguf()]
        big = ROOT / "models" / "synthetic" / "tinyllama-1.1b-random.Q4_K_M.gguf"
        if big.is_file():
            models.append(big)
    mi = machine_info()
    print(f"machine:  {mi['cpu']}, nproc {mi['nproc']}, {' '.join(mi['isa'])}; ingot {git_rev()}; "
          f"load average {loadavg()}")
    lb = llama_bench_path()
    print(f"{a.reps} alternated runs per engine, median [min-max]; wall: fork to exit; RSS: peak resident set")
    for gguf in models:
        binary = build(gguf)
        cast = binary.parent / (binary.name.removesuffix("-san") + ".weights")
        for f in (gguf, cast, binary):  # warm page cache
            with open(f, "rb") as fh:
                while fh.read(1 << 24):
                    pass
        prompt = [str(binary), "--threads", str(a.threads), "generate", "-p", "Hello", "-n", "1", "--ignore-eos"]
        engines = {
            "ingot (cast)": prompt,
            "ingot (cast, --mmap)": prompt + ["--mmap"],
            "ingot (--no-cast)": prompt + ["--no-cast"],
            "llama.cpp llama-bench": [str(lb), "-m", str(gguf), "-p", "0", "-n", "1", "-r", "1", "-t", str(a.threads)],
        }
        runs = {k: [] for k in engines}
        for k, cmd in engines.items():  # warm-up
            timed(cmd)
        for rep in range(a.reps):
            order = list(engines.items())
            order = order[rep % len(order):] + order[:rep % len(order)]
            for k, cmd in order:
                runs[k].append(timed(cmd))
        print(f"\n{gguf.name} ({gguf.stat().st_size / 2**20:.0f} MiB; cast file {cast.stat().st_size / 2**20:.0f} MiB)")
        print(f"  {'engine':<24}{'wall s':>8} {'[min-max]':<15}{'RSS MiB':>9}")
        for k, rs in runs.items():
            w = [x[0] for x in rs]
            m = [x[1] for x in rs]
            print(f"  {k:<24}{statistics.median(w):8.3f} [{min(w):.3f}-{max(w):.3f}]  {statistics.median(m):8.0f}")
        lw = statistics.median(x[0] for x in runs["llama.cpp llama-bench"])
        cw = statistics.median(x[0] for x in runs["ingot (cast)"])
        print(f"  ingot (cast) / llama.cpp wall: {cw / lw:.2f}x")
    print(f"\nload average at end: {loadavg()}")


if __name__ == "__main__":
    main()
