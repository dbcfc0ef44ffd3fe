#!/usr/bin/env python3
"""Grammar mask cost: structured output on `smollm2 serve` at batch 1 and 16, against the decode step.

Not a test: it never asserts on time, and nothing under tests/ uses it.

For each batch size B (default 1 and 16), B chat requests run at once, twice:
  constrained    response_format json_schema (a catalogue: 4 items, each a
                 name, a price, up to 3 tags), temperature 0.7, max_tokens N
  unconstrained  the same prompts without response_format, ignore_eos,
                 max_tokens N (the plain decode step to compare with)
From /metrics before and after each run (ingot_scheduler_steps_total,
ingot_grammar_mask_seconds_total, ingot_grammar_masked_tokens_total) and the
wall time it prints:
  step ms        wall / steps of the run (prefill steps included, the same in both)
  mask ms/step   grammar mask seconds / steps (constrained run)
  mask ms/token  grammar mask seconds / masked tokens
  mask % of step mask ms/step / the unconstrained step ms
Then every constrained output is replayed through tools/ingot-grammar (one
thread, the server's vocabulary trie and mask cache) for the per-token
distribution of one mask: mean, p50, p90, max.

Run:  python3 bench/bench_grammar.py [--batches 1,16] [--max-tokens 200] [--threads 2]
                                     [--binary PATH] [--json OUT]
"""
import argparse
import concurrent.futures
import json
import pathlib
import platform
import re
import subprocess
import sys
import tempfile
import time

import requests

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from modelbuild import build, smollm2_gguf  # noqa: E402
from serverproc import ServerProc  # noqa: E402

SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["items"],
    "properties": {"items": {"type": "array", "minItems": 4, "maxItems": 4, "items": {
        "type": "object", "additionalProperties": False, "required": ["name", "price", "tags"],
        "properties": {"name": {"type": "string", "maxLength": 24}, "price": {"type": "number"},
                       "tags": {"type": "array", "maxItems": 3, "items": {"type": "string", "maxLength": 12}}}}}},
}
PROMPTS = ["List the products of a small bakery.", "Describe the stock of a bookshop.",
           "What does a hardware store sell?", "Make a catalogue for a toy shop."]


def metric(text, name):
    m = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def scrape(srv):
    t = requests.get(srv.url + "/metrics", timeout=30).text
    return {k: metric(t, k) for k in ("ingot_scheduler_steps_total", "ingot_grammar_mask_seconds_total",
                                      "ingot_grammar_masked_tokens_total", "ingot_generation_tokens_total")}


def run(srv, batch, max_tokens, constrained):
    def one(i):
        body = {"model": "smollm2", "messages": [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}],
                "max_tokens": max_tokens, "temperature": 0.7, "seed": i}
        if constrained:
            body["response_format"] = {"type": "json_schema", "json_schema": {"name": "catalogue", "schema": SCHEMA}}
        else:
            body["ignore_eos"] = True
        r = requests.post(srv.base_url + "/chat/completions", json=body, timeout=3600)
        r.raise_for_status()
        return r.json()["choices"][0]["message"]["content"]

    before = scrape(srv)
    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(batch) as pool:
        texts = list(pool.map(one, range(batch)))
    wall = time.time() - t0
    after = scrape(srv)
    d = {k: after[k] - before[k] for k in after}
    return texts, wall, d


def replay(tool, gguf, texts):
    """Per-token mask times of one thread along each output (tools/ingot-grammar)."""
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        schema = pathlib.Path(tmp) / "schema.json"
        schema.write_text(json.dumps(SCHEMA))
        for i, t in enumerate(texts):
            f = pathlib.Path(tmp) / f"out{i}.txt"
            f.write_text(t)
            r = subprocess.run([tool, "--gguf", gguf, "--schema", schema, f], capture_output=True, text=True)
            if r.stdout.strip():
                out.append(json.loads(r.stdout))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--binary")
    ap.add_argument("--json")
    a = ap.parse_args()
    gguf = str(smollm2_gguf())
    binary = a.binary or str(build(gguf, "smollm2"))
    subprocess.run(["make", "-s", "-C", str(ROOT), "tools"], check=True)
    tool = str(ROOT / "build" / "_obj" / "tools" / "ingot-grammar")
    try:
        load = open("/proc/loadavg").read().split()[0]
    except OSError:
        load = "?"
    print(f"# {platform.processor() or platform.machine()}, load average {load} at start, "
          f"--threads {a.threads}, max_tokens {a.max_tokens}")
    results = []
    with ServerProc(binary, "--max-running", 64, command=("--threads", a.threads, "serve")) as srv:
        print("| batch | step ms (plain) | step ms (constrained) | mask ms/step | mask ms/token | mask % of step "
              "| tokens (constrained) | one-thread mask ms mean / p50 / p90 / max |")
        print("|---|---|---|---|---|---|---|---|")
        for batch in [int(b) for b in a.batches.split(",")]:
            _, wall_u, du = run(srv, batch, a.max_tokens, False)
            texts, wall_c, dc = run(srv, batch, a.max_tokens, True)
            step_u = wall_u / max(du["ingot_scheduler_steps_total"], 1) * 1e3
            step_c = wall_c / max(dc["ingot_scheduler_steps_total"], 1) * 1e3
            mask_step = dc["ingot_grammar_mask_seconds_total"] / max(dc["ingot_scheduler_steps_total"], 1) * 1e3
            mask_tok = dc["ingot_grammar_mask_seconds_total"] / max(dc["ingot_grammar_masked_tokens_total"], 1) * 1e3
            rep = replay(tool, gguf, texts)
            n = sum(r["tokens"] for r in rep) or 1
            mean = sum(r["mask_ms_mean"] * r["tokens"] for r in rep) / n
            p50 = sorted(r["mask_ms_p50"] for r in rep)[len(rep) // 2] if rep else 0
            p90 = max((r["mask_ms_p90"] for r in rep), default=0)
            mx = max((r["mask_ms_max"] for r in rep), default=0)
            valid = sum(1 for t in texts if _valid(t))
            row = dict(batch=batch, step_ms_plain=step_u, step_ms_constrained=step_c, mask_ms_per_step=mask_step,
                       mask_ms_per_token=mask_tok, mask_pct=100 * mask_step / step_u,
                       tokens=dc["ingot_grammar_masked_tokens_total"], valid=valid, replay_mean=mean,
                       replay_p50=p50, replay_p90_max=p90, replay_max=mx)
            results.append(row)
            print(f"| {batch} | {step_u:.1f} | {step_c:.1f} | {mask_step:.3f} | {mask_tok:.3f} | "
                  f"{row['mask_pct']:.2f}% | {int(row['tokens'])} ({valid}/{batch} complete JSON) | "
                  f"{mean:.3f} / {p50:.4f} / {p90:.3f} / {mx:.2f} |", flush=True)
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(results, indent=1))


def _valid(text):
    try:
        json.loads(text)
        return True
    except ValueError:
        return False


if __name__ == "__main__":
    main()
