#!/usr/bin/env python3
"""Serving benchmark: `smollm2 serve` under 1, 4, 16 and 64 concurrent streaming clients.

Not a test: it never asserts on time, and nothing under tests/ uses it.

Each client runs a fixed list of prompts (--prompts-per-client, default 2)
one after the other through /v1/completions with stream=true, temperature 0,
max_tokens 64 and ignore_eos; all clients of a level start together. Per
level it prints:

  tok/s        aggregate output tokens / wall time of the level
  TTFT         time from sending a request to its first token chunk (p50/p99)
  TPOT         per request, (last chunk - first chunk) / (tokens - 1) (p50/p99)
  step         the scheduler's step time, sampled from /metrics
               (ingot_last_step_seconds, each new step counted once) (p50/p99)
  sched        step minus forward (p50/p99): the scheduler's own time. Only
               if the server exposes ingot_last_forward_seconds next to
               ingot_last_step_seconds; otherwise "n/a" (see bench/RESULTS.md)

and finally scaling = tok/s at 16 clients / tok/s at 1 client. Tokens are
counted as SSE chunks carrying text (one per token for both servers on
English text); for ingot the count is cross-checked against
ingot_generation_tokens_total.

The peer is llama.cpp's own C++ server, which batches concurrent requests
(build/llama-cpp/bin/llama-server, built from the llama-cpp-python source
distribution by bench/build_llama_cpp.sh when missing; --llama-server PATH
takes another; --no-llama skips it), at its defaults but for what the
comparison fixes: `llama-server -m GGUF -t N -tb N -np P -c 1024*P`, P slots
of 1024 tokens each, continuous batching. P is each level's number of clients
(--llama-slots level, the default: a server sized for that concurrency) or the
largest level (--llama-slots max); ingot serves with --max-running = the
largest level. Should llama-server die on its first request at its defaults
(llama.cpp's AMX kernels did on an Intel Xeon with llama-cpp-python 0.3.36's
tree), the run restarts it with --no-repack and says so. The two engines
alternate: per level, --rounds rounds (default 3), each running one engine
then the other, the order flipping every round, so that a drift of the shared
host falls on both; the tables show each engine's median round and every
round's tok/s, the ratios line each round's own ratio.

Run:  python3 bench/bench_serve.py [--levels 1,4,16,64] [--prompts-per-client 2]
                                   [--max-tokens 64] [--threads 2] [--rounds 3] [--no-llama]
                                   [--llama-server PATH] [--llama-slots level|max]
                                   [--binary PATH] [--model GGUF] [--json OUT]
"""
import argparse
import json
import os
import pathlib
import platform
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import requests

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from serverproc import Poller, ServerProc  # noqa: E402

PROMPTS = [
    "The history of the lighthouse begins",
    "Once upon a time, in a village by the sea,",
    "A prime number is a natural number that",
    "The best way to make coffee at home is",
    "In winter, the northern research station",
    "The violin is a string instrument that",
    "Robots in factories have changed the way",
    "My grandmother kept the key to the attic",
]

def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, int(round(p / 100 * len(xs) + 0.5)) - 1))
    return xs[k]


def load_avg():
    try:
        return os.getloadavg()
    except OSError:
        return (float("nan"),) * 3


# ---- servers ------------------------------------------------------------------


class LlamaServer:
    def __init__(self, gguf, threads, server_binary, slots=1, extra=()):
        self.slots = slots
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        # llama.cpp's C++ server: continuous batching over `slots` sequences of 1024 tokens each
        self.cmd = [str(server_binary), "-m", str(gguf), "-t", str(threads), "-tb", str(threads),
                    "-np", str(slots), "-c", str(1024 * slots), "--host", "127.0.0.1", "--port", str(self.port),
                    "-a", "smollm2", "--no-webui", *extra]
        self.log = open(os.devnull, "w")
        self.proc = None

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout=120):
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.cmd[0]} exited with {self.proc.returncode}")
            try:
                with urllib.request.urlopen(self.url + "/v1/models", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"{self.cmd[0]} did not come up")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# ---- load -----------------------------------------------------------------------


SERVED = {}  # url: the model id its /v1/models lists (a binary's id is its build name)


def served_model(url):
    if url not in SERVED:
        r = requests.get(url + "/v1/models", timeout=30)
        r.raise_for_status()
        SERVED[url] = r.json()["data"][0]["id"]
    return SERVED[url]


def one_request(url, prompt, max_tokens, timeout):
    body = {"model": served_model(url), "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "ignore_eos": True}
    t0 = time.perf_counter()
    times = []
    with requests.post(url + "/v1/completions", json=body, stream=True, timeout=(10, timeout)) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if ev.get("choices") and ev["choices"][0].get("text"):
                times.append(time.perf_counter())
    n = len(times)
    return {"tokens": n, "ttft": times[0] - t0 if n else float("nan"),
            "tpot": (times[-1] - times[0]) / (n - 1) if n > 1 else float("nan")}


class StepSampler(Poller):
    """Polls ingot's /metrics; one sample per new scheduler step seen."""

    def __init__(self, url, period=0.02):
        super().__init__(self._sample, period)
        self.url = url
        self.steps, self.sched = [], []
        self.exposes_forward = False
        self._last = None

    def _sample(self):
        text = requests.get(self.url + "/metrics", timeout=5).text
        m = dict(re.findall(r"^(ingot_[a-z_]+) (\S+)$", text, re.M))
        n = m.get("ingot_scheduler_steps_total")
        if n is not None and n != self._last and self._last is not None and float(m.get("ingot_batch_size", 0)) > 0:
            step = float(m["ingot_last_step_seconds"])
            self.steps.append(step)
            if "ingot_last_forward_seconds" in m:
                self.exposes_forward = True
                self.sched.append(step - float(m["ingot_last_forward_seconds"]))
        self._last = n


def gen_tokens_total(url):
    text = requests.get(url + "/metrics", timeout=10).text
    m = re.search(r"^ingot_generation_tokens_total (\S+)$", text, re.M)
    return float(m.group(1)) if m else float("nan")


def run_level(url, clients, ppc, max_tokens, ingot):
    results, errors = [], []
    barrier = threading.Barrier(clients)
    lock = threading.Lock()

    def client(c):
        try:
            barrier.wait(60)
            for k in range(ppc):
                r = one_request(url, PROMPTS[(c + k) % len(PROMPTS)], max_tokens, 900)
                with lock:
                    results.append(r)
        except Exception as e:
            with lock:
                errors.append(repr(e))

    before = gen_tokens_total(url) if ingot else None
    sampler = StepSampler(url) if ingot else None
    threads = [threading.Thread(target=client, args=(c,), daemon=True) for c in range(clients)]
    if sampler:
        sampler.__enter__()
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(1800)
    wall = time.perf_counter() - t0
    if sampler:
        sampler.__exit__()
    tokens = sum(r["tokens"] for r in results)
    row = {"clients": clients, "requests": len(results), "errors": errors[:3], "tokens": tokens, "wall_s": wall,
           "tok_s": tokens / wall,
           "ttft_p50": pct([r["ttft"] for r in results], 50), "ttft_p99": pct([r["ttft"] for r in results], 99),
           "tpot_p50": pct([r["tpot"] for r in results], 50), "tpot_p99": pct([r["tpot"] for r in results], 99)}
    if ingot:
        row["server_tokens"] = gen_tokens_total(url) - before
        row["step_samples"] = len(sampler.steps)
        row["step_p50"], row["step_p99"] = pct(sampler.steps, 50), pct(sampler.steps, 99)
        row["sched_p50"] = pct(sampler.sched, 50) if sampler.exposes_forward else None
        row["sched_p99"] = pct(sampler.sched, 99) if sampler.exposes_forward else None
    return row


def ms(x):
    return "n/a" if x is None or x != x else f"{x * 1000:.1f}"


def print_table(name, rows):
    print(f"\n{name}")
    print("| clients | requests | tok/s | every round | TTFT p50 / p99 ms | TPOT p50 / p99 ms | step p50 / p99 ms | "
          "sched p50 / p99 ms |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        step = f"{ms(r.get('step_p50'))} / {ms(r.get('step_p99'))}" if "step_p50" in r else "-"
        sch = f"{ms(r.get('sched_p50'))} / {ms(r.get('sched_p99'))}" if "step_p50" in r else "-"
        every = " / ".join(f"{x:.0f}" for x in r.get("rounds_tok_s", [r["tok_s"]]))
        print(f"| {r['clients']} | {r['requests']} | {r['tok_s']:.1f} | {every} | {ms(r['ttft_p50'])} / {ms(r['ttft_p99'])} | "
              f"{ms(r['tpot_p50'])} / {ms(r['tpot_p99'])} | {step} | {sch} |")
        if r["errors"]:
            print(f"  errors: {r['errors']}")
    by = {r["clients"]: r["tok_s"] for r in rows}
    if 1 in by and 16 in by:
        print(f"scaling (tok/s at 16 / at 1): {by[16] / by[1]:.2f}")


def report_level(label, r):
    extra = f", server counted {r['server_tokens']:.0f}, {r['step_samples']} step samples" if "server_tokens" in r else ""
    print(f"  {label:>12} {r['clients']:3d} clients: {r['tokens']} tokens in {r['wall_s']:.1f} s"
          f" ({r['tok_s']:.1f} tok/s){extra}", flush=True)


def median_row(rows):
    """The round whose aggregate tok/s is the median (the lower middle one for an even count), with every
    round's figure beside it: the table shows one real round, not a blend of several."""
    order = sorted(rows, key=lambda r: r["tok_s"])
    row = dict(order[(len(order) - 1) // 2])
    row["rounds_tok_s"] = [r["tok_s"] for r in rows]
    return row


def bench(url, levels, ppc, max_tokens, ingot, rounds=1, label="ingot"):
    one_request(url, PROMPTS[0], 8, 300)  # warm-up
    out = []
    for c in levels:
        rows = []
        for _ in range(rounds):
            rows.append(run_level(url, c, ppc, max_tokens, ingot))
            report_level(label, rows[-1])
        out.append(median_row(rows))
    return out


def start_llama_server(gguf, a, slots):
    """llama-server at its defaults, answering a first request; if it dies on that request (the AMX
    crash above), again with --no-repack, remembered in a.llama_extra for the rest of the run."""
    server = LlamaServer(gguf, a.threads, a.llama_server, slots, a.llama_extra).start()
    try:
        one_request(server.url, PROMPTS[0] * 8, 8, 300)
        return server
    except Exception:
        died = server.proc.poll()
        server.stop()
        if a.llama_extra or died is None or died >= 0:
            raise
        print(f"  llama-server died of signal {-died} at its defaults: --no-repack from here on", flush=True)
        a.llama_extra = ["--no-repack"]
        return start_llama_server(gguf, a, slots)


def alternate_with_llama_server(out, ingot_url, levels, gguf, a):
    """ingot and llama-server on the same load, level by level, alternated: each round runs one engine
    then the other, the order flipping every round, so that a drift of the shared host (the two
    cores, the memory bus) falls on both. llama-server is started per level with -np = that level's
    clients (--llama-slots level: a deployment sized for that concurrency, the issue's `-np 16`) or
    once with -np = the largest level (--llama-slots max); ingot serves with --max-running = the largest
    level throughout, as its scheduler admits what the KV pool holds."""
    out["ingot"], out["llama-server"], out["rounds"] = [], [], []
    one_request(ingot_url, PROMPTS[0], 8, 300)
    server = None
    try:
        for c in levels:
            slots = c if a.llama_slots == "level" else max(levels)
            if server is None or server.slots != slots:
                if server:
                    server.stop()
                server = start_llama_server(gguf, a, slots)
                print(f"  llama-server -np {slots} -c {1024 * slots} {' '.join(a.llama_extra)} up", flush=True)
            ri, rl = [], []
            for k in range(a.rounds):
                for name in (("ingot", "llama-server") if k % 2 == 0 else ("llama-server", "ingot")):
                    if name == "ingot":
                        ri.append(run_level(ingot_url, c, a.prompts_per_client, a.max_tokens, True))
                        report_level(name, ri[-1])
                    else:
                        rl.append(run_level(server.url, c, a.prompts_per_client, a.max_tokens, False))
                        report_level(name, rl[-1])
                out["rounds"].append({"clients": c, "round": k, "ingot": ri[-1]["tok_s"], "llama-server": rl[-1]["tok_s"]})
            out["ingot"].append(median_row(ri))
            out["llama-server"].append(median_row(rl))
    finally:
        if server:
            server.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", default="1,4,16,64")
    ap.add_argument("--prompts-per-client", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3, help="alternated rounds per level; tables show the median round")
    ap.add_argument("--binary", help="an already built ingot SmolLM2 binary")
    ap.add_argument("--model", help="the SmolLM2 GGUF (default: scripts/fetch_smollm2.sh)")
    ap.add_argument("--no-llama", action="store_true", help="ingot alone, no llama-server")
    ap.add_argument("--llama-server", help="llama.cpp's llama-server binary (default: "
                    "build/llama-cpp/bin/llama-server, built by bench/build_llama_cpp.sh when missing)")
    ap.add_argument("--llama-slots", choices=("level", "max"), default="level",
                    help="llama-server's -np: each level's clients (default) or the largest level")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.rounds < 1:
        ap.error("--rounds must be at least 1")
    a.llama_extra = []
    if not a.no_llama and not a.llama_server:
        a.llama_server = ROOT / "build" / "llama-cpp" / "bin" / "llama-server"
        if not a.llama_server.is_file():
            print("building llama.cpp's tools (bench/build_llama_cpp.sh; minutes on 2 cores)", flush=True)
            subprocess.run(["bash", str(ROOT / "bench" / "build_llama_cpp.sh")], check=True,
                           stdout=subprocess.DEVNULL)
    if a.llama_server and not os.access(a.llama_server, os.X_OK):
        ap.error(f"--llama-server {a.llama_server}: not an executable (bench/build_llama_cpp.sh builds one)")
    levels = [int(x) for x in a.levels.split(",")]
    gguf = a.model or subprocess.run([str(ROOT / "scripts" / "fetch_smollm2.sh")], capture_output=True, text=True,
                                     check=True).stdout.strip()
    binary = a.binary
    if not binary:
        r = subprocess.run([str(ROOT / "ingot"), "build", gguf, "--name", "smollm2"], capture_output=True, text=True,
                           check=True)
        binary = r.stdout.strip().splitlines()[-1]
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"machine: {cpu}, nproc {os.cpu_count()}, {platform.platform()}")
    load = load_avg()[0]
    print(f"load average at start: {load:.2f}" + ("  WARNING: above 0.5, the machine is not idle" if load > 0.5 else ""))
    print(f"workload: {levels} clients x {a.prompts_per_client} prompts, max_tokens {a.max_tokens}, "
          f"greedy, ignore_eos, streaming /v1/completions, {a.threads} threads, {a.rounds} round(s) per level")
    out = {}

    print(f"\ningot: {binary} serve --max-running {max(levels)}")
    srv = ServerProc(binary, "--weights", str(gguf), "--max-running", str(max(levels)), "--grace", "5",
                     env={"INGOT_THREADS": str(a.threads)}).start()
    try:
        if not a.no_llama:
            print(f"llama-server: {a.llama_server} -np {'<clients>' if a.llama_slots == 'level' else max(levels)} "
                  f"-t {a.threads}, its defaults otherwise, alternated with ingot")
            try:
                alternate_with_llama_server(out, srv.url, levels, gguf, a)
            except Exception as e:  # what was measured before it stopped is still printed below
                print(f"llama-server: stopped: {e!r}")
        else:
            out["ingot"] = bench(srv.url, levels, a.prompts_per_client, a.max_tokens, True, a.rounds)
    finally:
        srv.stop()

    print(f"\nload average at end: {load_avg()[0]:.2f}")
    if "ingot" in out and "llama-server" in out:
        print("\ningot / llama-server, aggregate tok/s by clients (median rounds; each round's own ratio):")
        for ri, rl in zip(out["ingot"], out["llama-server"]):
            per = [x["ingot"] / x["llama-server"] for x in out["rounds"] if x["clients"] == ri["clients"] and x["llama-server"]]
            each = ", ".join(f"{x:.2f}" for x in per)
            print(f"  {ri['clients']:>3}: {ri['tok_s'] / rl['tok_s']:.2f}x  ({each})" if rl["tok_s"] else
                  f"  {ri['clients']:>3}: n/a")
    for name, rows in out.items():
        if name != "rounds":
            print_table(name, rows)
    if out.get("ingot") and not any(r.get("sched_p50") is not None for r in out["ingot"]):
        print("\nsched (step - forward): n/a: the server exposes only ingot_last_step_seconds; it needs "
              "ingot_last_forward_seconds (sched_stats.last_forward_seconds) or a histogram of step - forward")
    if a.llama_extra:
        print(f"\nllama-server ran with {' '.join(a.llama_extra)}: it crashed at its defaults on this CPU")
    if a.json:
        out["llama_server_extra"] = a.llama_extra
        pathlib.Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
