"""`NAME serve` under load, over real sockets: batch invariance, KV pressure, disconnects, prefix caching.

Continuous batching must be invisible to a client: a request returns exactly
the tokens it returns when it runs alone, whatever else shares its steps,
whether it was preempted and recomputed, and whether its prompt prefix came
from the cache. tests/test_scheduler.py checks this through the `batch`
command; here the same properties go through HTTP, SSE streaming and the
event loop, against the real SmolLM2-135M-Instruct binary.

Tokens are compared through `logprobs`: every streamed chunk carries the
pieces of the tokens it adds (completions: logprobs.tokens; chat:
logprobs.content[].bytes), so two runs are compared token by token, not just
by text. Half the requests go to /v1/completions with a token-array prompt,
half to /v1/chat/completions.

Every loop is bounded in count and time, every socket is on 127.0.0.1, and
every server must exit 0 on SIGTERM without a sanitizer report. Under
INGOT_SAN=1 (the --san binary) the load is scaled down (N concurrent streams
instead of 32) and the time limits scaled up; the assertions are the same.
"""
import json
import socket
import struct
import subprocess
import threading
import time

import pytest
import requests

from conftest import SAN
from modelbuild import serving_binary
from serverproc import Poller, ServerProc

MODEL = "smollm2"
SLOW = 8 if SAN else 1           # the sanitizer build is several times slower
N = 6 if SAN else 32             # concurrent streams
MAX_TOKENS = 16                   # tokens per request: a full block, so every request grows by one (KV pressure needs that)
PRESSURE_KV_BLOCKS = 12          # 192 tokens: far less than N requests of 20-53 tokens need
HOST = "127.0.0.1"

TEXT = (
    "The lighthouse keeper climbed the spiral stairs every evening, counting the steps out of habit. "
    "Below him the harbour filled with fishing boats, their lamps swaying like fireflies over black water. "
    "In the village, the baker was already shaping tomorrow's bread, and the schoolteacher graded essays "
    "about volcanoes, prime numbers and the migration of arctic terns. A violinist practised scales by an "
    "open window while a cat watched the pigeons on the church roof. Far to the north, a research station "
    "measured the thickness of the ice and sent its numbers south by radio twice a day. Coffee, winter, "
    "robots and lost keys were the subjects of the children's stories that year."
)
TOPICS = ["the ocean", "a robot", "prime numbers", "Paris", "a lost key", "coffee", "winter", "a violin",
          "the moon", "a lighthouse", "volcanoes", "a library", "bicycles", "rain", "chess", "bread"]


# ---- fixtures -------------------------------------------------------------------


@pytest.fixture(scope="module")
def binary(request):
    return serving_binary(request)


@pytest.fixture(scope="module")
def text_ids(binary):
    r = subprocess.run([str(binary), "tokenize", "-p", TEXT], capture_output=True, text=True, timeout=120 * SLOW)
    assert r.returncode == 0, r.stderr
    ids = [int(t) for t in r.stdout.split()]
    assert len(ids) > 120
    return ids


def check_clean_exit(srv, rc):
    assert rc == 0, srv.log[-20000:]
    assert not srv.sanitizer_report(), srv.log[-20000:]


def start_server(binary, *args):
    return ServerProc(binary, "--grace", "10", *args).start()


@pytest.fixture(scope="module")
def server(binary):
    srv = start_server(binary)
    yield srv
    check_clean_exit(srv, srv.stop())


# ---- requests ---------------------------------------------------------------------


def make_requests(text_ids, n, temperature=0.0):
    """n different prompts: even ones are completions with a slice of TEXT's
    token ids as the prompt, odd ones chat messages. 20-40 prompt tokens each."""
    reqs = []
    for i in range(n):
        if i % 2 == 0:
            start = (i * 5) % (len(text_ids) - 40)
            body = {"prompt": text_ids[start:start + 20 + i % 9]}
            path = "/v1/completions"
            body["logprobs"] = 0
        else:
            body = {"messages": [{"role": "user",
                                 "content": f"Write one sentence about {TOPICS[(i // 2) % len(TOPICS)]}"
                                            f"{'!' * (i // (2 * len(TOPICS)))}."}],
                    "logprobs": True, "top_logprobs": 0}
            path = "/v1/chat/completions"
        body.update(model=MODEL, max_tokens=MAX_TOKENS, ignore_eos=True, stream=True, temperature=temperature)
        if temperature > 0:
            body["seed"] = 1000 + i
        reqs.append((path, body))
    return reqs


def parse_stream(path, lines):
    """SSE data lines of one stream -> {tokens, logprobs, text, finish}."""
    out = {"tokens": [], "logprobs": [], "text": "", "finish": None, "done": False}
    for line in lines:
        if line == "[DONE]":
            out["done"] = True
            continue
        ev = json.loads(line)
        assert "error" not in ev, ev
        for ch in ev["choices"]:
            if ch.get("finish_reason"):
                out["finish"] = ch["finish_reason"]
            lp = ch.get("logprobs")
            if path.endswith("/chat/completions"):
                out["text"] += ch["delta"].get("content") or ""
                for t in (lp or {}).get("content") or []:
                    out["tokens"].append(bytes(t["bytes"]))
                    out["logprobs"].append(t["logprob"])
            else:
                out["text"] += ch["text"]
                if lp:
                    out["tokens"] += [t.encode() for t in lp["tokens"]]
                    out["logprobs"] += lp["token_logprobs"]
    return out


def stream(srv, path, body, timeout=None):
    """One streaming request; the parsed result."""
    timeout = timeout or 120 * SLOW
    with requests.post(srv.url + path, json=body, stream=True, timeout=(10, timeout)) as r:
        assert r.status_code == 200, r.text
        assert r.headers["Content-Type"].startswith("text/event-stream")
        lines = []
        deadline = time.time() + timeout
        for raw in r.iter_lines():
            assert time.time() < deadline, f"stream took over {timeout} s"
            if raw.startswith(b"data: "):
                lines.append(raw[6:].decode())
    return parse_stream(path, lines)


def run_concurrent(srv, reqs, timeout=None):
    """All requests at once (one thread each, released together); results in order."""
    timeout = timeout or 240 * SLOW
    results, errors = [None] * len(reqs), []
    barrier = threading.Barrier(len(reqs))

    def one(i):
        try:
            barrier.wait(30)
            results[i] = stream(srv, *reqs[i], timeout=timeout)
        except Exception as e:  # reported below with the request's index
            errors.append((i, repr(e)))

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(reqs))]
    for t in threads:
        t.start()
    deadline = time.time() + timeout + 30
    for t in threads:
        t.join(max(0.0, deadline - time.time()))
    assert not any(t.is_alive() for t in threads), f"requests still running after {timeout} s\n{srv.log[-5000:]}"
    assert not errors, f"{errors}\n{srv.log[-5000:]}"
    return results


class Sampler(Poller):
    """Polls /health in the background: the largest running / waiting counts seen."""

    def __init__(self, srv, period=0.05):
        super().__init__(self._sample, period)
        self.srv = srv
        self.max_running = self.max_waiting = 0

    def _sample(self):
        h = self.srv.health()
        self.max_running = max(self.max_running, h["running"])
        self.max_waiting = max(self.max_waiting, h["waiting"])


def health(srv):
    return srv.health()


def metrics(srv):
    """{"name{labels}": value} of /metrics."""
    return {n + labels: v for (n, labels), v in srv.metrics()[0].items()}


def assert_same(got, want, i, what):
    assert got["done"] and want["done"], f"request {i}: stream not terminated by [DONE]"
    assert got["finish"] == want["finish"] == "length", f"request {i}: {got['finish']} / {want['finish']}"
    assert len(want["tokens"]) == MAX_TOKENS, f"request {i}: {len(want['tokens'])} tokens alone"
    assert got["tokens"] == want["tokens"], (
        f"request {i} differs {what}:\n  got  {got['tokens']}\n  want {want['tokens']}")
    assert got["text"] == want["text"], f"request {i}: text differs {what}"
    for k, (a, b) in enumerate(zip(got["logprobs"], want["logprobs"])):
        assert abs(a - b) <= 1e-3, f"request {i} token {k}: logprob {a} vs {b} alone ({what})"


def solo(srv, reqs):
    return [stream(srv, path, body) for path, body in reqs]


@pytest.fixture(scope="module")
def greedy_reqs(text_ids):
    return make_requests(text_ids, N)


@pytest.fixture(scope="module")
def greedy_solo(server, greedy_reqs):
    """Each request alone on an idle server: the reference."""
    return solo(server, greedy_reqs)


# ---- batch invariance ---------------------------------------------------------------


def test_batch_invariance_greedy(server, greedy_reqs, greedy_solo):
    with Sampler(server) as smp:
        together = run_concurrent(server, greedy_reqs)
    for i, (t, a) in enumerate(zip(together, greedy_solo)):
        assert_same(t, a, i, "when batched")
    assert smp.max_running >= min(4, N), f"requests never ran together (max running {smp.max_running})"
    assert len({tuple(a["tokens"]) for a in greedy_solo}) > N // 2  # the prompts really differ


def test_batch_invariance_seeded(server, text_ids, greedy_solo):
    reqs = make_requests(text_ids, N, temperature=0.8)
    alone = solo(server, reqs)
    together = run_concurrent(server, reqs)
    for i, (t, a) in enumerate(zip(together, alone)):
        assert_same(t, a, i, "when batched (seeded sampling)")
    # sampling really samples: most continuations differ from the greedy ones
    assert sum(g["tokens"] != a["tokens"] for g, a in zip(greedy_solo, alone)) > N // 2


# ---- KV pressure, preemption and abrupt disconnects ---------------------------------


def open_stream(port, body):
    """A raw streaming request on its own socket; returns the socket after the headers were sent."""
    data = json.dumps(body).encode()
    s = socket.create_connection((HOST, port), timeout=60 * SLOW)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(data) + data)
    return s


def read_chunks(s, n, timeout):
    """Reads until n SSE data chunks arrived (bounded by timeout)."""
    got = b""
    deadline = time.time() + timeout
    while got.count(b"data: ") < n:
        assert time.time() < deadline, f"fewer than {n} chunks in {timeout} s: {got[-500:]!r}"
        s.settimeout(max(0.1, deadline - time.time()))
        chunk = s.recv(65536)
        assert chunk, f"server closed the stream early: {got[-500:]!r}"
        got += chunk
    assert got.startswith(b"HTTP/1.1 200"), got[:200]
    return got


def test_pressure_preempts_and_disconnects_free_blocks(binary, text_ids, greedy_reqs, greedy_solo):
    srv = start_server(binary, "--kv-blocks", PRESSURE_KV_BLOCKS)
    try:
        total = health(srv)["kv_blocks_total"]
        assert total == PRESSURE_KV_BLOCKS
        before = metrics(srv)
        with Sampler(srv) as smp:
            together = run_concurrent(srv, greedy_reqs)
        for i, (t, a) in enumerate(zip(together, greedy_solo)):
            assert_same(t, a, i, "under KV pressure")
        after = metrics(srv)
        assert after["ingot_preemptions_total"] > before["ingot_preemptions_total"], (
            f"no preemption with {PRESSURE_KV_BLOCKS} blocks for {N} requests (max running {smp.max_running})")
        assert smp.max_waiting > 0

        # Settled: nothing runs, nothing holds a block (cached prefix blocks are not "used").
        t0 = time.time()
        while True:
            h = health(srv)
            if h["running"] == 0 and h["waiting"] == 0 and h["requests_in_flight"] == 0:
                break
            assert time.time() - t0 < 10 * SLOW, h
            time.sleep(0.02)
        baseline = h["kv_blocks_used"]
        assert baseline == 0, h

        # 10 long streams, a couple of chunks read from each, then their sockets closed abruptly.
        # 12-token prompts: all 10 are admitted at once (one block each) and
        # make 3 tokens before they need a second block; then they preempt
        # each other, so some are running and some waiting when they go.
        socks = []
        try:
            for k in range(10):
                start = (k * 11) % (len(text_ids) - 30)
                body = {"model": MODEL, "prompt": text_ids[start:start + 12], "max_tokens": 150,
                        "ignore_eos": True, "temperature": 0, "stream": True}
                socks.append(open_stream(srv.port, body))
            for s in socks:
                read_chunks(s, 2, 60 * SLOW)
            h = health(srv)
            assert h["requests_in_flight"] == 10 and h["running"] + h["waiting"] == 10, h
            assert h["kv_blocks_used"] > baseline, h
        finally:
            for k, s in enumerate(socks):
                if k % 2 == 0:  # RST instead of FIN
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.close()
        t0 = time.time()
        limit = 1.0 * SLOW
        while True:
            h = health(srv)
            if (h["running"] == 0 and h["waiting"] == 0 and h["requests_in_flight"] == 0
                    and h["kv_blocks_used"] == baseline):
                break
            assert time.time() - t0 < limit, f"not released {limit} s after the disconnects: {h}\n{srv.log[-5000:]}"
            time.sleep(0.02)
        m = metrics(srv)
        assert m["ingot_client_disconnects_total"] >= 10
        # still serving, and still right
        path, body = greedy_reqs[0]
        assert_same(stream(srv, path, body), greedy_solo[0], 0, "after the disconnects")
        rc = srv.stop()
    finally:
        srv.kill()
    check_clean_exit(srv, rc)


# ---- prefix caching ------------------------------------------------------------------

SYSTEM = (
    "You are a careful assistant for a small maritime museum. Visitors ask about lighthouses, ships, "
    "knots, tides, navigation by the stars, the lives of keepers and the history of the harbour town. "
    "Answer in plain words, in one or two sentences, without lists, and never invent dates or names. "
    "If you do not know something, say so and suggest asking the staff at the front desk."
)


def prefix_pair(srv):
    """Two chat requests sharing SYSTEM, one after the other; their results and the hit counter deltas."""
    out, hits = [], []
    for q in ("How does a lighthouse lens work?", "What is a bowline knot?"):
        body = {"model": MODEL, "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}],
                "max_tokens": MAX_TOKENS, "ignore_eos": True, "temperature": 0, "stream": True,
                "logprobs": True}
        m0 = metrics(srv)
        out.append(stream(srv, "/v1/chat/completions", body))
        m1 = metrics(srv)
        hits.append(m1["ingot_prefix_cache_hit_tokens_total"] - m0["ingot_prefix_cache_hit_tokens_total"])
    return out, hits


def test_prefix_cache_reuses_blocks_and_changes_nothing(binary):
    srv = start_server(binary)
    try:
        cached, hits = prefix_pair(srv)
        rc = srv.stop()
    finally:
        srv.kill()
    check_clean_exit(srv, rc)
    off = start_server(binary, "--no-prefix-cache")
    try:
        uncached, hits_off = prefix_pair(off)
        rc = off.stop()
    finally:
        off.kill()
    check_clean_exit(off, rc)
    assert hits[0] == 0, hits           # a fresh server has nothing cached
    assert hits[1] >= 4 * 16, hits      # the second request reused the shared system prompt's blocks
    assert hits_off == [0, 0], hits_off
    for i, (c, u) in enumerate(zip(cached, uncached)):
        assert_same(c, u, i, "with the prefix cache")


# ---- a tight KV pool never stalls ----------------------------------------------------


def chat_body(i, max_tokens, stream):
    system = "You are a concise assistant. Answer in one short paragraph about the topic you are given."
    return {"model": MODEL, "stream": stream, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "messages": [{"role": "system", "content": system},
                         {"role": "user", "content": f"Tell me about {TOPICS[i % len(TOPICS)]}, please ({i})."}]}


def test_tight_pool_never_stalls(binary):
    """24 blocks, 8 running: 24 concurrent chat requests (about 40 prompt
    tokens with a shared system prefix, 48 new tokens each: far more than the
    pool holds at once), a third streamed, a sixth dropped by their client
    after two chunks. Every request that stays finishes, the queue drains,
    every block comes back, a request after them is served at once, and
    /health never reported a stall."""
    n, max_tokens = (12, 24) if SAN else (24, 48)
    srv = start_server(binary, "--kv-blocks", "24", "--max-running", "8", "--max-waiting", "64")
    results = [None] * n

    def one(i):
        body = chat_body(i, max_tokens, stream=i % 3 == 0)
        if i % 6 == 0:  # dropped after two chunks
            data = json.dumps(body).encode()
            s = socket.create_connection((HOST, srv.port), timeout=120 * SLOW)
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(data) + data)
            read_chunks(s, 2, 300 * SLOW)
            s.close()
            results[i] = "dropped"
        elif body["stream"]:
            results[i] = stream(srv, "/v1/chat/completions", body, timeout=600 * SLOW)["finish"]
        else:
            r = requests.post(srv.url + "/v1/chat/completions", json=body, timeout=600 * SLOW)
            results[i] = r.json()["choices"][0]["finish_reason"] if r.status_code == 200 else r.text

    try:
        with Sampler(srv) as sampler:
            threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(n)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(900 * SLOW)
        assert all(r in ("length", "dropped") for r in results), results
        deadline = time.time() + 30 * SLOW
        while time.time() < deadline:
            h = health(srv)
            if h["running"] == 0 and h["waiting"] == 0:
                break
            time.sleep(0.1)
        assert h["running"] == 0 and h["waiting"] == 0, h
        m = metrics(srv)
        assert m["ingot_kv_blocks_used"] == 0, m
        assert m["ingot_preemptions_total"] > 0  # the pool really was too small
        assert sampler.max_running <= 8
        t0 = time.time()
        r = requests.post(srv.url + "/v1/completions", json={"model": MODEL, "prompt": "Hi", "max_tokens": 2},
                          timeout=60 * SLOW)
        assert r.status_code == 200 and time.time() - t0 < 10 * SLOW
    finally:
        check_clean_exit(srv, srv.stop())


def test_queue_bound_counts_live_requests(binary):
    """--max-running 8 --max-waiting 4: of 16 simultaneous requests 12 are
    taken (8 run, 4 wait) and the rest answered 503 with Retry-After."""
    srv = start_server(binary, "--max-running", "8", "--max-waiting", "4", "--kv-blocks", "128")
    codes, retry = [None] * 16, []
    barrier = threading.Barrier(16)

    def one(i):
        body = chat_body(i, 24 if SAN else 48, stream=False)
        barrier.wait(30)
        r = requests.post(srv.url + "/v1/chat/completions", json=body, timeout=600 * SLOW)
        codes[i] = r.status_code
        if r.status_code == 503:
            retry.append(r.headers.get("Retry-After"))
            assert r.json()["error"]["type"]

    try:
        threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(900 * SLOW)
        assert codes.count(200) >= 12, codes
        assert set(codes) <= {200, 503}, codes
        assert all(r and r.isdigit() for r in retry), retry
    finally:
        check_clean_exit(srv, srv.stop())
