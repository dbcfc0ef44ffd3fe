#!/usr/bin/env python3
"""Speculative decoding with n-gram (prompt-lookup) drafts on SmolLM2-135M-Instruct Q4_1.

Not a test: it never asserts on time, and nothing under tests/ uses it.

For each prompt it runs `generate` (greedy, --ignore-eos off, -n G) plain and
with --spec ngram, alternated rep by rep in one run so that drifting load
from other jobs hits both alike, and reports the medians of the binary's own
decode rate (the `decode:` line on stderr: tokens after the first over the
time from the first token to the last; prefill not included), the speedup,
and the acceptance rate (accepted / drafted tokens, from the `spec:` line).
It also checks that the two outputs are the same text (greedy speculative
decoding is exact). tok/step is the tokens generated per scheduler step
with drafting (plain decoding: 1), which load on the machine does not move.

Prompts (SmolLM2's chat format, written out):
  summary    a paragraph and "summarise it, quoting it": the answer repeats the input
  code-edit  a Python function and "rename a variable, give the whole function"
  story      an open-ended request: little to look up (the cost when drafts fail)

Run:  python3 bench/bench_spec.py [--reps 5] [--tokens 128] [--spec-k 4] [--threads 2]
                                  [--model GGUF] [--no-build]
The machine (CPU, nproc) and the load average at start and end are printed:
numbers are only comparable within one run.
"""
import argparse
import os
import pathlib
import platform
import re
import statistics
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]

SUMMARY = (
    "The city council met on Tuesday evening to discuss the new public library. After a long debate, the "
    "council approved a budget of four million dollars for the library, which will be built next to the "
    "central park. The new library will have a reading room for children, a computer lab with forty "
    "computers, and a large hall for community events. Construction will begin in the spring and is "
    "expected to take two years. The mayor said that the new library will be open every day of the week.")
CODE = '''def summarize(orders):
    total = 0
    count = 0
    for order in orders:
        if order.status == "paid":
            total += order.amount
            count += 1
    average = total / count if count else 0
    return {"total": total, "count": count, "average": average}
'''
PROMPTS = {
    "summary": SUMMARY + "\n\nSummarize the text above in a few sentences, quoting it where you can.",
    "code-edit": CODE + "\nRename the variable `total` to `paid_total` in this function and write out the "
                        "whole function again.",
    "story": "Write a short story about a robot who learns to paint.",
}


def chat(text):
    return f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"


def machine():
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, nproc {os.cpu_count()}, affinity {len(os.sched_getaffinity(0))}, kernel {platform.release()}"


def loadavg():
    return "%.2f %.2f %.2f" % os.getloadavg()


def run(binary, prompt, n, threads, spec):
    cmd = [str(binary), "--threads", str(threads), "generate", "-p", prompt, "-n", str(n)]
    if spec:
        cmd += ["--spec", "ngram", "--spec-k", str(spec)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        sys.exit(r.stderr)
    m = re.search(r"decode:\s+(\d+) tokens in ([\d.]+) s \(([\d.]+) tokens/s\)", r.stderr)
    rate = float(m.group(3))
    accept = None
    s = re.search(r"spec:\s+\S+ (\d+) drafted tokens, (\d+) accepted \([^)]*\), (\d+) steps", r.stderr)
    if s:
        accept = (int(s.group(1)), int(s.group(2)), int(s.group(3)))
    return r.stdout, rate, int(m.group(1)), accept


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--spec-k", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model", default=None)
    ap.add_argument("--no-build", action="store_true")
    a = ap.parse_args()
    model = a.model or subprocess.run([str(ROOT / "scripts" / "fetch_smollm2.sh")], capture_output=True,
                                      text=True, check=True).stdout.strip()
    binary = ROOT / "build" / "bench-smollm2" / "bench-smollm2"
    if not a.no_build:
        r = subprocess.run([str(ROOT / "ingot"), "build", model, "--name", "bench-smollm2"], capture_output=True,
                           text=True)
        if r.returncode != 0:
            sys.exit(r.stderr)
        binary = pathlib.Path(r.stdout.strip().splitlines()[-1])
    print(f"machine: {machine()}")
    print(f"load at start: {loadavg()}")
    print(f"SmolLM2-135M-Instruct Q4_1, greedy, {a.tokens} tokens, {a.threads} threads, --spec-k {a.spec_k}, "
          f"{a.reps} reps alternated (medians)\n")
    print(f"{'prompt':<10} {'plain tok/s':>11} {'spec tok/s':>10} {'speedup':>8} {'accepted':>9} {'tok/step':>8} "
          f"{'same text':>9}")
    for name, text in PROMPTS.items():
        prompt = chat(text)
        run(binary, prompt, 8, a.threads, 0)  # warm-up (page cache, huge pages)
        plain, spec, acc, same, n_gen = [], [], None, True, 0
        for _ in range(a.reps):
            out_p, rate_p, _, _ = run(binary, prompt, a.tokens, a.threads, 0)
            out_s, rate_s, n_gen, acc = run(binary, prompt, a.tokens, a.threads, a.spec_k)
            plain.append(rate_p)
            spec.append(rate_s)
            same = same and out_p == out_s
        mp, ms = statistics.median(plain), statistics.median(spec)
        rate = f"{100.0 * acc[1] / acc[0]:.0f}%" if acc and acc[0] else "-"
        per_step = f"{n_gen / acc[2]:.2f}" if acc and acc[2] else "-"
        print(f"{name:<10} {mp:>11.1f} {ms:>10.1f} {ms / mp:>7.2f}x {rate:>9} {per_step:>8} "
              f"{'yes' if same else 'NO':>9}", flush=True)
    print(f"\nload at end: {loadavg()}")


if __name__ == "__main__":
    main()
