#!/usr/bin/env python3
"""`make soak`: mixed traffic against one `serve` process for a while, and what it did to the server.

    python3 scripts/soak.py [--minutes 10] [--clients 6] [--binary PATH]

The SmolLM2-135M-Instruct binary (built as `smollm2-soak`, the default f16 KV cache, unless --binary
names one) serves with a small KV pool (64 blocks of 16 tokens: eight 300-token sequences do not
fit, so the scheduler preempts), a rate limit of 60 requests a minute (below what the clients
send: some are answered 429), a 5 s read timeout and a 1 MiB body limit.
CLIENTS threads each pick, request after request, one of:

  chat_stream      a streamed chat completion, read to its end
  disconnect       a streamed chat completion dropped after its first chunks
  tools            a chat completion with two tools and tool_choice "auto"
  schema           a chat completion under a JSON schema (the reply must parse and match)
  long_prompt      a ~300-token completion prompt (KV pressure, preemption)
  embeddings       /v1/embeddings
  hostile          one of: a body that is not JSON, wrong types, a body over the limit, bytes that
                   are not HTTP, a head that never ends (the read timeout closes it)

while one more thread asks /health every 200 ms and another reads the server's RSS every 2 s.

A request ends as `ok` (200, a finished stream, a parsed schema reply), as a refusal the request
asked for (4xx for hostile ones, 429 from the rate limit, 503 when the queue is full), or as an
`error`: anything else (a 5xx, a dropped connection, a timeout, a malformed reply). It prints a
table per kind (requests, outcomes, p50/p99 latency), /health's latency, and RSS after the first
minute and at the end, and exits 1 where anything was lost: an error, /health p99 over 50 ms, a
server that did not exit 0 on SIGTERM, or RSS grown after the first minute by more than
max(8 MiB, 3%) (allocator arenas settle in the first minute; a leak grows with the traffic).
"""
import argparse
import collections
import json
import os
import pathlib
import random
import socket
import subprocess
import sys
import threading
import time

import requests

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from serverproc import ServerProc  # noqa: E402

HEALTH_P99_MS = 50.0
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}},
         {"type": "function", "function": {"name": "add", "description": "Add two integers",
                                            "parameters": {"type": "object",
                                                           "properties": {"a": {"type": "integer"},
                                                                          "b": {"type": "integer"}},
                                                           "required": ["a", "b"]}}}]
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}
WORDS = ("the river runs past old stone walls while evening light settles over quiet fields and "
         "distant hills where travellers rest before the long road north").split()
KINDS = {"chat_stream": 4, "disconnect": 2, "tools": 2, "schema": 2, "long_prompt": 2, "embeddings": 1, "hostile": 2}


def percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


class Soak:
    def __init__(self, url, deadline):
        self.url = url
        self.model = requests.get(url + "/v1/models", timeout=10).json()["data"][0]["id"]
        self.deadline = deadline
        self.lock = threading.Lock()
        self.outcomes = collections.defaultdict(collections.Counter)  # kind -> outcome -> n
        self.latency = collections.defaultdict(list)                    # kind -> seconds (ok only)
        self.errors = []                                                # (kind, what), first 20 kept
        self.refusals = collections.Counter()                           # HTTP status (or what) -> n
        self.health = []                                                # (t, seconds, status)

    def record(self, kind, outcome, seconds=None, what=None):
        with self.lock:
            self.outcomes[kind][outcome] += 1
            if outcome == "ok" and seconds is not None:
                self.latency[kind].append(seconds)
            if outcome == "refused":
                self.refusals[what] += 1
            if outcome == "error" and len(self.errors) < 20:
                self.errors.append((kind, what))

    # ---- the request kinds: each returns (outcome, detail) ------------------
    def post(self, session, path, body, **kw):
        return session.post(self.url + path, json=body, timeout=120, **kw)

    @staticmethod
    def refusal(r, allowed):
        if r.status_code in allowed:
            return "refused", r.status_code
        return "error", f"{r.status_code} {r.text[:200]}"

    def chat_stream(self, s, rng):
        body = {"model": self.model, "stream": True, "max_tokens": rng.randint(8, 48),
                "messages": [{"role": "user", "content": " ".join(rng.choices(WORDS, k=12))}]}
        with self.post(s, "/v1/chat/completions", body, stream=True) as r:
            if r.status_code != 200:
                return self.refusal(r, (429, 503))
            done = finish = False
            for line in r.iter_lines():
                if line == b"data: [DONE]":
                    done = True
                elif line.startswith(b"data: "):
                    chunk = json.loads(line[6:])
                    finish = finish or any(c.get("finish_reason") for c in chunk["choices"])
            return ("ok", None) if done and finish else ("error", "a stream without its finish or [DONE]")

    def disconnect(self, s, rng):
        body = {"model": self.model, "stream": True, "max_tokens": 200,
                "messages": [{"role": "user", "content": "Tell me a long story about " + rng.choice(WORDS)}]}
        with self.post(s, "/v1/chat/completions", body, stream=True) as r:
            if r.status_code != 200:
                return self.refusal(r, (429, 503))
            for i, _ in enumerate(r.iter_lines()):
                if i >= 3:
                    break
        return "ok", None  # leaving the block closes the connection mid-stream

    def tools(self, s, rng):
        body = {"model": self.model, "max_tokens": 64, "tools": TOOLS, "tool_choice": "auto",
                "messages": [{"role": "user", "content": rng.choice(["What is the weather in Paris?", "Add 2 and 40."])}]}
        r = self.post(s, "/v1/chat/completions", body)
        if r.status_code != 200:
            return self.refusal(r, (429, 503))
        msg = r.json()["choices"][0]["message"]
        for call in msg.get("tool_calls") or []:
            json.loads(call["function"]["arguments"])
        return "ok", None

    def schema(self, s, rng):
        body = {"model": self.model, "max_tokens": 80,
                "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}},
                "messages": [{"role": "user", "content": "Invent a person."}]}
        r = self.post(s, "/v1/chat/completions", body)
        if r.status_code != 200:
            return self.refusal(r, (429, 503))
        choice = r.json()["choices"][0]
        if choice["finish_reason"] == "length":
            return "ok", None  # cut by max_tokens: a prefix of a valid reply
        import jsonschema
        jsonschema.validate(json.loads(choice["message"]["content"]), SCHEMA)
        return "ok", None

    def long_prompt(self, s, rng):
        body = {"model": self.model, "max_tokens": 16, "prompt": " ".join(rng.choices(WORDS, k=300))}
        r = self.post(s, "/v1/completions", body)
        return ("ok", None) if r.status_code == 200 else self.refusal(r, (429, 503))

    def embeddings(self, s, rng):
        r = self.post(s, "/v1/embeddings", {"model": self.model, "input": " ".join(rng.choices(WORDS, k=20))})
        return ("ok", None) if r.status_code == 200 else self.refusal(r, (429, 503))

    def hostile(self, s, rng):
        how = rng.choice(["not_json", "wrong_types", "too_large", "not_http", "endless_head"])
        if how == "not_json":
            r = s.post(self.url + "/v1/chat/completions", data=b'{"messages": [', timeout=60,
                       headers={"Content-Type": "application/json"})
            return self.refusal(r, (400, 429))
        if how == "wrong_types":
            r = self.post(s, "/v1/chat/completions", {"messages": "hello", "max_tokens": "many"})
            return self.refusal(r, (400, 429))
        if how == "too_large":
            r = s.post(self.url + "/v1/completions", data=b'{"prompt": "' + b"a" * (2 << 20) + b'"}', timeout=60,
                       headers={"Content-Type": "application/json"})
            return self.refusal(r, (413,))
        host, port = self.url.split("//")[1].split(":")
        with socket.create_connection((host, int(port)), timeout=30) as c:
            c.sendall(bytes(rng.randrange(256) for _ in range(64)) if how == "not_http"
                      else b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            reply = c.recv(64)  # the guard answers garbage at once, and a stalled head after --read-timeout
            if reply and not reply.startswith(b"HTTP/1."):
                return "error", f"{how}: a reply that is not HTTP: {reply!r}"
        return "refused", f"{how} ({reply[9:12].decode(errors='replace') if reply else 'closed'})"

    # ---- the threads ---------------------------------------------------------
    def client(self, seed):
        rng = random.Random(seed)
        s, last = requests.Session(), time.time()
        kinds, weights = zip(*KINDS.items())
        while time.time() < self.deadline:
            kind = rng.choices(kinds, weights)[0]
            # the server closes a connection idle for --read-timeout (5 s); a client that sends on it
            # just then gets no answer (HTTP/1.1's keep-alive race, which clients retry): fresh
            # connections after 4 s idle, so that every dropped connection here is the server's fault
            if time.time() - last > 4:
                s.close()
                s = requests.Session()
            t0 = time.time()
            try:
                outcome, what = getattr(self, kind)(s, rng)
            except Exception as e:  # a dropped connection, a timeout, a reply that does not parse
                outcome, what = "error", f"{type(e).__name__}: {str(e)[:200]}"
                s = requests.Session()
            last = time.time()
            self.record(kind, outcome, last - t0, what)
            if what == 429:  # as a client should: wait before the next request
                time.sleep(1.0)

    def prober(self):
        s = requests.Session()
        while time.time() < self.deadline:
            t0 = time.time()
            try:
                status = s.get(self.url + "/health", timeout=10).status_code
            except requests.RequestException:
                status = 0
            with self.lock:
                self.health.append((t0, time.time() - t0, status))
            time.sleep(max(0.0, 0.2 - (time.time() - t0)))


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--binary")
    a = ap.parse_args()
    binary = a.binary
    if not binary:
        gguf = subprocess.run([ROOT / "scripts" / "fetch_smollm2.sh"], capture_output=True, text=True,
                              check=True).stdout.strip()
        r = subprocess.run([ROOT / "ingot", "build", gguf, "--name", "smollm2-soak"], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(r.stderr)
        binary = r.stdout.strip().splitlines()[-1]
    args = ["--kv-blocks", "64", "--max-running", "8", "--max-waiting", "32", "--rate-limit-rpm", "60",
            "--read-timeout", "5", "--max-body", "1048576", "--grace", "10"]
    srv = ServerProc(binary, *args).start()
    start = time.time()
    soak = Soak(srv.url, start + 60 * a.minutes)
    rss = []
    threads = [threading.Thread(target=soak.client, args=(i,)) for i in range(a.clients)]
    threads.append(threading.Thread(target=soak.prober))
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        rss.append((time.time() - start, rss_kib(srv.proc.pid)))
        time.sleep(2)
    for t in threads:
        t.join()
    rc = srv.stop()

    print(f"soak: {a.minutes:g} min, {a.clients} clients, {binary} serve {' '.join(args)}")
    print(f"cpu: {next((l.split(':')[1].strip() for l in open('/proc/cpuinfo') if l.startswith('model name')), '?')}, "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}\n")
    print("| kind | requests | ok | refused (asked for) | errors | p50 ms | p99 ms |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    total = collections.Counter()
    for kind in KINDS:
        o = soak.outcomes[kind]
        total.update(o)
        lat = soak.latency[kind]
        ms = [f"{1000 * percentile(lat, q):.0f}" if lat else "-" for q in (0.5, 0.99)]
        print(f"| {kind} | {sum(o.values())} | {o['ok']} | {o['refused']} | {o['error']} | {ms[0]} | {ms[1]} |")
    print(f"| all | {sum(total.values())} | {total['ok']} | {total['refused']} | {total['error']} | | |\n")
    print("refusals: " + ", ".join(f"{k}: {n}" for k, n in sorted(soak.refusals.items(), key=str)))
    h = [d for _, d, status in soak.health if status == 200]
    bad_health = sum(1 for _, _, status in soak.health if status != 200)
    p99 = 1000 * percentile(h, 0.99)
    print(f"/health: {len(soak.health)} probes, {bad_health} not 200, p50 {1000 * percentile(h, 0.5):.1f} ms, "
          f"p99 {p99:.1f} ms, max {1000 * max(h, default=float('nan')):.1f} ms")
    after_minute = next((kib for t, kib in rss if t >= 60), rss[0][1] if rss else 0)
    end = rss[-1][1] if rss else 0
    growth = end - after_minute
    print(f"RSS: {rss[0][1] / 1024:.1f} MiB at start, {after_minute / 1024:.1f} MiB after the first minute, "
          f"{end / 1024:.1f} MiB at the end ({growth / 1024:+.1f} MiB)")
    print(f"server exit status on SIGTERM: {rc}")
    for kind, what in soak.errors:
        print(f"error: {kind}: {what}")
    lost = []
    if total["error"]:
        lost.append(f"{total['error']} requests ended in errors")
    if bad_health or not p99 < HEALTH_P99_MS:
        lost.append(f"/health p99 {p99:.1f} ms (limit {HEALTH_P99_MS:.0f}), {bad_health} probes not 200")
    if growth > max(8 * 1024, 0.03 * after_minute):
        lost.append(f"RSS grew {growth / 1024:.1f} MiB after the first minute")
    if rc != 0:
        lost.append(f"the server exited {rc} on SIGTERM")
    print("soak: " + ("; ".join(lost) if lost else "nothing lost"))
    sys.exit(1 if lost else 0)


if __name__ == "__main__":
    main()
