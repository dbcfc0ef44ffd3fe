"""What ingot-router adds to a request: the same SmolLM2 binary asked directly
and through the router, alternately in one run (so machine load hits both).

    python3 bench/bench_router.py [--rounds 30] [--binary build/smollm2/smollm2]

Prints medians of: a non-streamed request for one token (HTTP + prefill, the
router's whole per-request cost shows here), time to first streamed chunk,
and the mean gap between chunks of a 32-token stream (what streaming through
the router keeps); then the router's cold start (first request to a stopped
model: spawn, load, /ready, answer).
"""
import argparse
import json
import pathlib
import statistics
import sys
import time

import requests

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from serverproc import ServerProc  # noqa: E402

CHILD = ["--kv-memory", "64"]


def one_token(url, name):
    t0 = time.perf_counter()
    r = requests.post(url + "/v1/completions", json={"model": name, "prompt": "Hello", "max_tokens": 1}, timeout=60)
    r.raise_for_status()
    return time.perf_counter() - t0


def stream(url, name):
    """(time to first chunk, mean gap between chunks) of a 32-token stream."""
    body = {"model": name, "prompt": "Count: 1, 2,", "max_tokens": 32, "stream": True, "ignore_eos": True}
    t0 = time.perf_counter()
    times = []
    with requests.post(url + "/v1/completions", json=body, stream=True, timeout=60) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line.startswith(b"data: {"):
                times.append(time.perf_counter())
    gaps = [b - a for a, b in zip(times, times[1:])]
    return times[0] - t0, statistics.mean(gaps)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--binary", default=str(ROOT / "build" / "smollm2" / "smollm2"))
    ap.add_argument("--router", default=str(ROOT / "build" / "_obj" / "ingot-router"))
    a = ap.parse_args()
    name = pathlib.Path(a.binary).name
    with ServerProc(a.binary, *CHILD) as direct, \
            ServerProc(a.router, "--model", name, a.binary, "--", *CHILD, command=()) as routed:
        t0 = time.perf_counter()
        one_token(routed.url, name)
        cold = time.perf_counter() - t0
        for url in (direct.url, routed.url):  # warm both
            one_token(url, name)
            stream(url, name)
        res = {k: {"direct": [], "router": []} for k in ("one_token", "ttft", "gap")}
        for _ in range(a.rounds):
            for label, url in (("direct", direct.url), ("router", routed.url)):
                res["one_token"][label].append(one_token(url, name))
                ttft, gap = stream(url, name)
                res["ttft"][label].append(ttft)
                res["gap"][label].append(gap)
    print(f"{'ms (median of ' + str(a.rounds) + ')':<28}{'direct':>10}{'router':>10}{'added':>10}{'ratio':>8}")
    for k, label in (("one_token", "1-token request"), ("ttft", "first streamed chunk"),
                     ("gap", "gap between chunks")):
        d, r = statistics.median(res[k]["direct"]) * 1e3, statistics.median(res[k]["router"]) * 1e3
        print(f"{label:<28}{d:>10.2f}{r:>10.2f}{r - d:>10.2f}{r / d:>8.3f}")
    print(f"cold start through the router (spawn, load, /ready, 1 token): {cold * 1e3:.0f} ms")
    print(json.dumps({k: {lab: statistics.median(v) for lab, v in d.items()} for k, d in res.items()}))


if __name__ == "__main__":
    main()
