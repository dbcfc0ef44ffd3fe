#!/usr/bin/env python3
"""LoRA serving benchmark: concurrent clients of the base model against the same clients spread
over four adapters, ingot and llama.cpp's llama-server on the same files, alternated.

Not a test: it never asserts on time, and nothing under tests/ uses it.

Four random GGUF LoRA adapters (--rank, default 16; alpha 2 x rank) of every linear of the model
(attn_q, attn_k, attn_v, attn_output, ffn_gate, ffn_up, ffn_down of every layer: the heaviest an
adapter gets), written as llama.cpp's convert_lora_to_gguf.py writes them (gguf-py's writer, f32).
Both servers load all four; --clients (default 16) streaming clients each send one completion
(a prompt of about 40 tokens, temperature 0, max_tokens 64, ignore_eos) at once, either all of
the base model ("base") or client i of adapter i mod 4 ("4 adapters"); each prompt begins with
the client's number, so the prefix cache shares no block. Per engine and mix: the aggregate output
tokens/s of the level; then mixed / base (1.0: four adapters cost nothing). Last, ingot's decode
step of the same sequences (`NAME batch`'s forward seconds to --max-tokens less to one token, over
the steps between): the measure of a step mixing 4 adapters against a base-only step.

ingot: `NAME serve --lora a0=... (x4) --max-running CLIENTS`, a request's "model" naming its
adapter. llama-server: `-m GGUF -t N -tb N -np CLIENTS -c 1024*CLIENTS --lora ... (x4)
--lora-init-without-apply` (its defaults otherwise: -np and -c size it for the clients, as
bench/bench_serve.py does; the adapters start at scale 0 and a request's "lora" list sets its
own to 1). llama-server puts sequences whose adapters differ in different batches; ingot runs
them in one step. Rounds (--rounds, default 3) alternate the engines and the mixes, the order
flipping every round; the table shows each one's median round.

Run:  python3 bench/bench_lora.py [--model GGUF] [--rank 16] [--clients 16] [--threads 2]
                                  [--rounds 3] [--no-llama] [--json OUT]
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import requests

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import bench_serve as bs  # noqa: E402  (LlamaServer, the load average)
import bench_smollm2 as b2  # noqa: E402  (machine, bandwidth, builds)

MODULES = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
PROMPT = ("The history of the printing press begins in the fifteenth century, when movable type "
          "changed how books were made and read across Europe, and")


def linear_shapes(gguf_path):
    """{tensor name: (out, in)} of the model's per-layer linears."""
    import gguf
    r = gguf.GGUFReader(str(gguf_path))
    shapes = {}
    for t in r.tensors:
        parts = t.name.split(".")
        if len(parts) == 4 and parts[0] == "blk" and parts[2] in MODULES:
            shapes[t.name] = (int(t.shape[1]), int(t.shape[0]))  # gguf-py lists ne: innermost first
    return shapes


def write_adapter(path, shapes, rank, seed):
    import gguf
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_type("adapter")
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", 2.0 * rank)
    for name, (out, inp) in sorted(shapes.items()):
        w.add_tensor(name + ".lora_a", rng.normal(0, 1 / np.sqrt(inp), (rank, inp)).astype(np.float32))
        w.add_tensor(name + ".lora_b", rng.normal(0, 0.02, (out, rank)).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


class IngotServer(bs.LlamaServer):
    """`NAME serve` with the adapters, started and stopped as bench_serve's llama-server is (both answer /v1/models)."""

    def __init__(self, binary, threads, clients, adapters):
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.cmd = [str(binary), "--threads", str(threads), *[x for i, p in enumerate(adapters) for x in ("--lora", f"a{i}={p}")],
                    "serve", "--port", str(self.port), "--max-running", str(clients)]
        self.log = open(os.devnull, "w")
        self.proc = None


def prompt_of(i):
    """Client i's prompt: its first words its own, so that no KV block of one client's prompt is
    another's (the prefix cache would otherwise compute a shared prompt once for the base model and
    once per adapter)."""
    return f"Reader {i} asks: " + PROMPT


def body(engine, model_name, adapter, n_adapters, max_tokens, i):
    b = {"prompt": prompt_of(i), "max_tokens": max_tokens, "temperature": 0, "stream": True, "ignore_eos": True}
    if engine == "ingot":
        b["model"] = f"a{adapter}" if adapter is not None else model_name
    else:  # llama-server: every adapter listed, the request's own at scale 1 (none: the base model)
        b["model"] = model_name
        b["lora"] = [{"id": i, "scale": 1.0 if i == adapter else 0.0} for i in range(n_adapters)]
    return b


def stream_tokens(url, b):
    n = 0
    with requests.post(url + "/v1/completions", json=b, stream=True, timeout=(10, 1800)) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line.startswith(b"data: ") and line != b"data: [DONE]":
                ev = json.loads(line[6:])
                if ev.get("choices") and ev["choices"][0].get("text"):
                    n += 1
    return n


def level(url, engine, model_name, clients, mixed, n_adapters, max_tokens):
    """Aggregate output tokens/s of `clients` concurrent requests."""
    counts, errors = [0] * clients, []
    barrier = threading.Barrier(clients)

    def client(i):
        try:
            barrier.wait()
            counts[i] = stream_tokens(url, body(engine, model_name, i % n_adapters if mixed else None, n_adapters,
                                                max_tokens, i))
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(repr(e))
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"{engine}: {errors[0]}")
    return sum(counts) / wall, sum(counts)


def decode_step(binary, adapters, threads, clients, mixed, max_tokens, tmp):
    """Seconds of one ingot decode step of `clients` sequences (`NAME batch`: the forward calls of
    the run to max_tokens less those of the run to 1 token, over the steps between)."""
    times = []
    for n in (1, max_tokens + 1):
        reqs = pathlib.Path(tmp) / "reqs.jsonl"
        reqs.write_text("".join(json.dumps({"prompt": prompt_of(i), "max_tokens": n, "ignore_eos": True,
                                            **({"model": f"a{i % len(adapters)}"} if mixed else {})}) + "\n"
                                for i in range(clients)))
        cmd = [str(binary), "--threads", str(threads), *[x for i, p in enumerate(adapters) for x in ("--lora", f"a{i}={p}")],
               "batch", "-f", str(reqs), "--max-running", str(clients)]
        r = subprocess.run(cmd, capture_output=True, text=True, check=True)
        times.append(json.loads(r.stdout.splitlines()[-1])["stats"]["forward_seconds"])
    return (times[1] - times[0]) / max_tokens


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    default_model = ROOT / "models" / "synthetic" / "tinyllama-1.1b-random.Q4_K_M.gguf"
    ap.add_argument("--model", type=pathlib.Path, default=default_model if default_model.exists() else None,
                    help="a GGUF (default: the 1.1B synthetic Q4_K_M of bench/make_synthetic_llama.py, else SmolLM2)")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--no-llama", action="store_true")
    ap.add_argument("--llama-server", type=pathlib.Path, default=ROOT / "build" / "llama-cpp" / "bin" / "llama-server")
    ap.add_argument("--json", type=pathlib.Path)
    a = ap.parse_args()
    model = a.model or b2.default_gguf()
    name = "bench-lora-" + model.stem.lower().replace(".", "-").replace("_", "-")
    err = b2.build_ingot(model, name, [])  # a no-op when the build is current
    if err:
        raise SystemExit(f"ingot build failed:\n{err}")
    if not a.no_llama and not a.llama_server.is_file():
        subprocess.run(["bash", str(ROOT / "bench" / "build_llama_cpp.sh")], check=True)
    info = b2.machine_info()
    weight_bytes, _ = b2.ingot_bytes(name)
    shapes = linear_shapes(model)
    adapter_bytes = sum(4 * a.rank * (o + i) for o, i in shapes.values())
    print(f"# {model.name}: {len(shapes)} linears, weights {weight_bytes / 2**20:.0f} MiB; adapters of rank {a.rank} "
          f"on all of them, {adapter_bytes / 2**20:.1f} MiB each (f32)")
    print(f"# CPU {info['cpu']}, {info['nproc']} cores ({info['affinity']} usable), ISA {' '.join(info['isa'])}; "
          f"load {b2.loadavg()}; DRAM read {b2.dram_bandwidth(a.threads):.1f} GB/s at {a.threads} threads; "
          f"commit {b2.git_rev()}")
    out = {"model": str(model), "rank": a.rank, "clients": a.clients, "threads": a.threads, "machine": info,
           "rounds": []}
    with tempfile.TemporaryDirectory() as tmp:
        adapters = [write_adapter(pathlib.Path(tmp) / f"a{i}.gguf", shapes, a.rank, i) for i in range(4)]
        engines = ["ingot"] + ([] if a.no_llama else ["llama-server"])
        servers = {}
        try:
            servers["ingot"] = IngotServer(b2.ingot_bin(name), a.threads, a.clients, adapters).start()
            if not a.no_llama:
                extra = [x for p in adapters for x in ("--lora", str(p))] + ["--lora-init-without-apply"]
                servers["llama-server"] = bs.LlamaServer(model, a.threads, a.llama_server, a.clients, extra).start()
            for url in (s.url for s in servers.values()):  # warm: pages in, first-request setup
                stream_tokens(url, {"prompt": PROMPT, "max_tokens": 4, "temperature": 0, "stream": True,
                                    "model": name})
            for k in range(a.rounds):
                order = [(e, m) for e in engines for m in (False, True)]
                for engine, mixed in (order if k % 2 == 0 else order[::-1]):
                    model_name = name if engine == "ingot" else "smollm2"
                    tps, n = level(servers[engine].url, engine, model_name, a.clients, mixed, 4, a.max_tokens)
                    out["rounds"].append({"round": k, "engine": engine, "mix": "4 adapters" if mixed else "base",
                                          "tok_s": tps, "tokens": n})
                    print(f"  round {k} {engine:12s} {'4 adapters' if mixed else 'base':10s} {tps:8.1f} tok/s "
                          f"({n} tokens)", flush=True)
            servers.pop("ingot").stop()  # the decode step alone, through the scheduler without HTTP
            for k in range(a.rounds):
                for mixed in ((False, True) if k % 2 == 0 else (True, False)):
                    step = decode_step(b2.ingot_bin(name), adapters, a.threads, a.clients, mixed, a.max_tokens, tmp)
                    out["rounds"].append({"round": k, "engine": "ingot step", "mix": "4 adapters" if mixed else "base",
                                          "step_s": step})
                    print(f"  round {k} ingot decode step of {a.clients} {'4 adapters' if mixed else 'base':10s} "
                          f"{step * 1e3:7.2f} ms", flush=True)
        finally:
            for s in servers.values():
                s.stop()
    print(f"\n| engine | base tok/s | 4 adapters tok/s | 4 adapters / base |")
    print("| --- | ---: | ---: | ---: |")
    for engine in engines:
        med = {m: statistics.median(r["tok_s"] for r in out["rounds"] if r["engine"] == engine and r["mix"] == m)
               for m in ("base", "4 adapters")}
        out[engine] = med
        print(f"| {engine} | {med['base']:.1f} | {med['4 adapters']:.1f} | {med['4 adapters'] / med['base']:.2f} |")
    steps = {m: statistics.median(r["step_s"] for r in out["rounds"] if r["engine"] == "ingot step" and r["mix"] == m)
             for m in ("base", "4 adapters")}
    out["ingot step"] = steps
    print(f"\ningot decode step of {a.clients} sequences: base {steps['base'] * 1e3:.2f} ms, 4 adapters "
          f"{steps['4 adapters'] * 1e3:.2f} ms: {steps['4 adapters'] / steps['base']:.2f}x the cost")
    if not a.no_llama:
        print(f"\ningot / llama-server, 4 adapters: {out['ingot']['4 adapters'] / out['llama-server']['4 adapters']:.2f}x; "
              f"base: {out['ingot']['base'] / out['llama-server']['base']:.2f}x")
    print(f"load after: {b2.loadavg()}")
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
