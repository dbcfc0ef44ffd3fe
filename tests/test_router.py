"""ingot-router: several model binaries behind one port, over real sockets with the openai client.

The two models are the real SmolLM2-135M-Instruct cast twice (the f32 and the
f16 KV cache builds the other tests use: "smollm2" and "smollm2-kvf16"). Each
child gets a 64 MiB KV cache, so its footprint (weights + KV + scratch, from
`serve --print-memory`) is about 192 MiB; a 300 MiB budget fits one of them.
The gateway test puts nginx (Debian) in front of two `serve` processes.
"""
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

import openai
import pytest
import requests

from conftest import OBJDIR, ROOT, SAN
from modelbuild import build, serving_binary, smollm2_gguf
from serverproc import ServerProc, parse_metrics

A, B = "smollm2", "smollm2-kvf16"
SLOW = 8 if SAN else 1
CHILD = ("--kv-memory", "64", "--grace", "5")
ONE_FITS = "300M"  # one ~192 MiB child fits, two do not
PROMPT = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def binaries(request):
    a = serving_binary(request)  # also builds the router (make all)
    b = build(smollm2_gguf(), B, "--kv-dtype", "f16")
    return {A: a, B: b}


def router(binaries, *opts):
    """A ServerProc for ingot-router serving both models (start it with `with`)."""
    args = [*opts]
    for name, path in binaries.items():
        args += ["--model", name, path]
    return ServerProc(OBJDIR / "ingot-router", *args, "--", *CHILD, command=(), start_timeout=60 * SLOW)


def client_of(srv):
    return openai.OpenAI(base_url=srv.base_url, api_key="unused", max_retries=0, timeout=120 * SLOW)


def health(srv):
    return srv.health()["models"]


def wait_for(cond, timeout, what):
    t0 = time.time()
    while not cond():
        assert time.time() - t0 < timeout, what
        time.sleep(0.02)


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purposes (the router reaps it)
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(")")[-1].split()[0] != "Z"


def promtool_ok(text):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus)")
    r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr + text


def check_clean_exit(srv):
    rc = srv.stop()
    assert rc == 0, srv.log
    assert not srv.sanitizer_report(), srv.log


def test_metrics_merge_c(built):
    """tests/c/test_metrics_merge.c: the merge on children's text (label placement, one HELP/TYPE per
    family, histogram series, CRLF, a missing final newline, junk lines)."""
    r = subprocess.run([built / "tests" / "test_metrics_merge"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and " 0 failed" in r.stdout, r.stdout + r.stderr


# ---- two models on one port ----------------------------------------------------------------


def test_two_models_answer_listed_and_merged_metrics(binaries):
    srv = router(binaries)
    with srv:
        c = client_of(srv)
        listed = {m.id for m in c.models.list().data}
        assert listed == {A, B}
        assert c.models.retrieve(B).id == B
        with pytest.raises(openai.NotFoundError):
            c.models.retrieve("no-such-model")
        assert {m["state"] for m in health(srv).values()} == {"stopped"}  # nothing starts before its first request

        r = c.chat.completions.create(model=A, messages=PROMPT, max_tokens=8, temperature=0)
        assert r.model == A and r.choices[0].message.content and r.usage.completion_tokens > 0
        chunks = list(c.chat.completions.create(model=B, messages=PROMPT, max_tokens=8, temperature=0, stream=True))
        assert {ch.model for ch in chunks} == {B}
        streamed = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        assert streamed and chunks[-1].choices[0].finish_reason in ("length", "stop")
        # the same greedy answer from the f32 and the f16 KV cache builds of one checkpoint (8 tokens)
        assert streamed.split()[0] == r.choices[0].message.content.split()[0]
        comp = c.completions.create(model=B, prompt="The capital of France is", max_tokens=4, temperature=0)
        assert comp.model == B and comp.choices[0].text

        with pytest.raises(openai.NotFoundError) as e:
            c.chat.completions.create(model="no-such-model", messages=PROMPT, max_tokens=4)
        assert e.value.body["code"] == "model_not_found" and e.value.body["param"] == "model"
        bad = requests.post(srv.base_url + "/chat/completions", json={"messages": PROMPT}, timeout=30)
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "model"
        bad = requests.post(srv.base_url + "/chat/completions", data=b"{not json", timeout=30)
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_json"
        # a child's own validation passes through: its 400 names the field
        bad = requests.post(srv.base_url + "/chat/completions", json={"model": A, "messages": "x"}, timeout=30)
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "messages"

        states = health(srv)
        assert states[A]["state"] == states[B]["state"] == "ready"  # no budget: both stay
        m, text = srv.metrics()
        for name in (A, B):
            assert m[("ingot_http_requests_total", f'{{model="{name}",code="200"}}')] >= 1
            assert m[("ingot_router_model_starts_total", f'{{model="{name}"}}')] == 1
            assert m[("ingot_kv_blocks_capacity", f'{{model="{name}"}}')] > 0
        assert m[("ingot_router_requests_total", '{code="404"}')] == 2  # retrieve and create
        assert text.count("# TYPE ingot_time_to_first_token_seconds histogram") == 1
        promtool_ok(text)
    check_clean_exit(srv)
    assert "ingot-router: stopped" in srv.log


def test_client_disconnect_cancels_in_the_child(binaries):
    srv = router(binaries)
    with srv:
        body = json.dumps({"model": A, "prompt": "Count forever: 1, 2, 3,", "max_tokens": 1000, "temperature": 0,
                           "stream": True, "ignore_eos": True}).encode()
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=60 * SLOW)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body)
        got = b""
        while got.count(b"data: ") < 4:  # a few chunks came through the router as they were made
            chunk = s.recv(4096)
            assert chunk, got
            got += chunk
        assert got.startswith(b"HTTP/1.1 200") and b"text/event-stream" in got
        s.close()

        def cancelled():
            m, _ = srv.metrics()
            return m.get(("ingot_client_disconnects_total", f'{{model="{A}"}}'), 0) >= 1

        wait_for(cancelled, 5 * SLOW, "the child never saw the client go")
        wait_for(lambda: health(srv)[A]["in_flight"] == 0, 5 * SLOW, "the router still counts the request")
        assert srv.metrics()[0][("ingot_router_requests_total", '{code="499"}')] == 1
        wait_for(lambda: srv.metrics()[0][("ingot_num_requests_running", f'{{model="{A}"}}')] == 0, 2 * SLOW,
                 "the child still runs the sequence")
    check_clean_exit(srv)


def test_concurrent_first_requests_start_the_model_once(binaries):
    srv = router(binaries)
    with srv:
        c = client_of(srv)
        results, errors = [], []

        def ask():
            try:
                results.append(c.completions.create(model=B, prompt="Hello", max_tokens=2).model)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=ask) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60 * SLOW)
        assert not errors and results == [B] * 4
        m, _ = srv.metrics()
        assert m[("ingot_router_model_starts_total", f'{{model="{B}"}}')] == 1
        assert srv.log.count(f"ingot-router: starting {B} ") == 1
    check_clean_exit(srv)


def raw_exchange(port, data, wait=None):
    """Sends raw bytes (optionally waiting between the two halves of a list), returns the reply's bytes."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        for i, part in enumerate(data if isinstance(data, list) else [data]):
            if i and wait:
                time.sleep(wait)
            s.sendall(part)
        got = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return got
            got += chunk
            if b"\r\n\r\n" in got and b'"error"' in got:
                return got


def test_the_http_guard_is_in_front_of_the_router(binaries):
    # nothing here reaches a model: no process starts
    srv = router(binaries, "--max-body", "4K", "--read-timeout", "0.5")
    with srv:
        big = json.dumps({"model": A, "prompt": "x" * 8192}).encode()
        got = raw_exchange(srv.port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
                           % len(big) + big)
        assert got.startswith(b"HTTP/1.1 413") and b'"error"' in got, got
        got = raw_exchange(srv.port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                           b"\r\n5\r\nhello\r\n0\r\n\r\n")
        assert got.startswith(b"HTTP/1.1 411"), got
        got = raw_exchange(srv.port, [b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n", b"Content-Length: 2\r\n\r\n{}"],
                           wait=1.0)
        assert got.startswith(b"HTTP/1.1 408"), got
        m, _ = srv.metrics()
        for code in ("408", "411", "413"):
            assert m[("ingot_router_requests_total", f'{{code="{code}"}}')] == 1
        assert {s["state"] for s in health(srv).values()} == {"stopped"}
    check_clean_exit(srv)


# ---- the memory budget: least recently used goes ------------------------------------------


def test_lru_under_a_budget_that_fits_one(binaries):
    srv = router(binaries, "--memory-budget", ONE_FITS)
    with srv:
        c = client_of(srv)
        c.completions.create(model=A, prompt="Hello", max_tokens=2)
        first_a = health(srv)[A]["pid"]
        assert health(srv)[B]["state"] == "stopped"
        c.completions.create(model=B, prompt="Hello", max_tokens=2)  # A has to go first
        states = health(srv)
        assert states[A]["state"] == "stopped" and states[B]["state"] == "ready"
        assert not alive(first_a)
        c.completions.create(model=A, prompt="Hello", max_tokens=2)  # and back
        states = health(srv)
        assert states[A]["state"] == "ready" and states[B]["state"] == "stopped"
        assert states[A]["pid"] != first_a
        m, text = srv.metrics()
        assert m[("ingot_router_model_evictions_total", f'{{model="{A}"}}')] == 1
        assert m[("ingot_router_model_evictions_total", f'{{model="{B}"}}')] == 1
        assert m[("ingot_router_model_starts_total", f'{{model="{A}"}}')] == 2
        assert m[("ingot_router_memory_used_bytes", "")] <= m[("ingot_router_memory_budget_bytes", "")]
        assert f'model="{B}",' not in text.split("# HELP ingot_http_requests_total")[1]  # only A's process reports
        promtool_ok(text)
    check_clean_exit(srv)


LONG = 30 if SAN else 120  # tokens of a request that keeps a model busy for a few seconds


@pytest.mark.full
def test_a_busy_model_is_not_evicted_the_other_waits(binaries):
    srv = router(binaries, "--memory-budget", ONE_FITS)
    with srv:
        c = client_of(srv)
        c.completions.create(model=A, prompt="Hello", max_tokens=2)
        done = {}

        def long_a():
            done["a"] = c.completions.create(model=A, prompt="Count: 1, 2,", max_tokens=LONG,
                                             extra_body={"ignore_eos": True}).usage.completion_tokens

        def then_b():
            done["b"] = c.completions.create(model=B, prompt="Hello", max_tokens=2).model

        ta = threading.Thread(target=long_a)
        ta.start()
        wait_for(lambda: health(srv)[A]["in_flight"] == 1, 10 * SLOW, "A never got the request")
        tb = threading.Thread(target=then_b)
        tb.start()
        wait_for(lambda: health(srv)[B]["waiting"] == 1, 10 * SLOW, "B's request is not waiting")
        assert health(srv)[A]["state"] == "ready"  # busy: not stopped under its request
        ta.join(120 * SLOW)
        tb.join(120 * SLOW)
        assert done == {"a": LONG, "b": B}
        states = health(srv)
        assert states[A]["state"] == "stopped" and states[B]["state"] == "ready"
    check_clean_exit(srv)

    # a start that cannot happen in time: 503 model_unavailable, and the busy model is untouched
    srv = router(binaries, "--memory-budget", ONE_FITS, "--start-timeout", "3")
    with srv:
        c = client_of(srv)
        c.completions.create(model=A, prompt="Hello", max_tokens=2)
        t = threading.Thread(target=lambda: c.completions.create(
            model=A, prompt="Count: 1, 2,", max_tokens=LONG * 3, extra_body={"ignore_eos": True}))
        t.start()
        wait_for(lambda: health(srv)[A]["in_flight"] == 1, 10 * SLOW, "A never got the request")
        with pytest.raises(openai.APIStatusError) as e:
            c.completions.create(model=B, prompt="Hello", max_tokens=2)
        assert e.value.status_code == 503 and e.value.body["code"] == "model_unavailable"
        t.join(120 * SLOW)
        assert health(srv)[A]["state"] == "ready"
    check_clean_exit(srv)


@pytest.mark.full
def test_a_client_gone_while_its_model_starts_is_forgotten(binaries):
    srv = router(binaries)
    with srv:
        body = json.dumps({"model": B, "prompt": "Hello", "max_tokens": 2}).encode()
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        s.close()  # at once: the model is still starting
        wait_for(lambda: health(srv)[B]["waiting"] == 0 and health(srv)[B]["state"] == "ready", 30 * SLOW,
                 "the model did not start, or the request still waits")
        assert health(srv)[B]["in_flight"] == 0
        m, _ = srv.metrics()
        assert m[("ingot_router_requests_total", '{code="499"}')] == 1
        assert client_of(srv).completions.create(model=B, prompt="Hi", max_tokens=2).model == B
    check_clean_exit(srv)


def test_a_model_larger_than_the_budget_is_an_error_at_start(binaries):
    args = ["--memory-budget", "100M"]
    for name, path in binaries.items():
        args += ["--model", name, path]
    r = subprocess.run([OBJDIR / "ingot-router", "--port", "0", *args, "--", *CHILD], capture_output=True,
                       text=True, timeout=60 * SLOW)
    assert r.returncode == 1
    # the size the router measured for the model (weights + KV cache + scratch arena), as it reports it
    need = re.search(rf"ingot-router: {A}: ([0-9.]+) MiB \(weights [0-9.]+ MiB \+ KV cache", r.stderr)
    assert need and float(need[1]) > 150, r.stderr
    assert f"model '{A}' needs {need[1]} MiB, more than the whole --memory-budget of 100.0 MiB" in r.stderr, r.stderr
    r = subprocess.run([OBJDIR / "ingot-router", "--model", "other-name", binaries[A]], capture_output=True,
                       text=True, timeout=60 * SLOW)
    assert r.returncode == 1 and f"serves the model '{A}', not 'other-name'" in r.stderr, r.stderr
    # a child's serve options are checked by the binary itself, before the router listens
    r = subprocess.run([OBJDIR / "ingot-router", "--model", A, binaries[A], "--", "--kv-memory", "lots"],
                       capture_output=True, text=True, timeout=60 * SLOW)
    assert r.returncode == 1 and "--kv-memory" in r.stderr and "--print-memory' failed" in r.stderr, r.stderr
    r = subprocess.run([OBJDIR / "ingot-router", "--port", "0"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "no models" in r.stderr


def test_config_counts_are_bounded(built, tmp_path):
    """A configuration of more models than RT_MAX_MODELS (1024), or a model with more serve
    arguments than RT_MAX_SERVE_ARGS (256), is refused at once (exit 2, as for any bad
    configuration), naming the bound (the models are
    looked up by a linear scan: a million of them would stall every request)."""
    cases = [([{"name": f"m{i}", "binary": "/bin/true"} for i in range(1025)], "more than 1024 models"),
             ([{"name": "m", "binary": "/bin/true", "serve": ["-v"] * 257}], "model 'm': more than 256 serve arguments")]
    for models, want in cases:
        cfg = tmp_path / "router.json"
        cfg.write_text(json.dumps({"models": models}))
        r = subprocess.run([OBJDIR / "ingot-router", "--port", "0", "--config", cfg], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 2 and f"ingot-router: error: {want}" in r.stderr, r.stderr


# ---- crashes -----------------------------------------------------------------------------------


def start_long_request(srv, c):
    """A 1000-token request to model A on a thread, once the child holds it: (the thread, the list
    its APIStatusError lands in)."""
    failed = []

    def long_request():
        try:
            c.completions.create(model=A, prompt="Count forever: 1, 2,", max_tokens=1000,
                                 extra_body={"ignore_eos": True})
        except openai.APIStatusError as e:
            failed.append(e)

    t = threading.Thread(target=long_request)
    t.start()
    wait_for(lambda: health(srv)[A]["in_flight"] == 1, 10 * SLOW, "the request never reached the child")
    return t, failed


def test_crash_fails_in_flight_with_502_and_the_next_request_restarts(binaries):
    srv = router(binaries)
    with srv:
        c = client_of(srv)
        c.completions.create(model=A, prompt="Hello", max_tokens=2)
        t, failed = start_long_request(srv, c)
        os.kill(health(srv)[A]["pid"], signal.SIGKILL)
        t.join(30 * SLOW)
        assert not t.is_alive()
        assert failed and failed[0].status_code == 502 and failed[0].body["code"] == "model_crashed"
        wait_for(lambda: health(srv)[A]["state"] == "stopped", 5 * SLOW, "the crash was not noticed")

        r = c.completions.create(model=A, prompt="Hello", max_tokens=2)  # restarts it (after a 0.5 s backoff)
        assert r.choices[0].text is not None and health(srv)[A]["state"] == "ready"
        m, text = srv.metrics()
        assert m[("ingot_router_model_crashes_total", f'{{model="{A}"}}')] == 1
        assert m[("ingot_router_model_restarts_total", f'{{model="{A}"}}')] == 1
        assert m[("ingot_router_model_starts_total", f'{{model="{A}"}}')] == 2
        assert m[("ingot_router_requests_total", '{code="502"}')] == 1
        assert "exited unexpectedly (killed by signal 9)" in srv.log
        promtool_ok(text)
    check_clean_exit(srv)


def test_a_stopped_child_is_killed_after_the_liveness_timeout(binaries):
    """A child that stops answering (SIGSTOP: alive, its event loop frozen) holds its requests only
    until --liveness-timeout: then it is killed, its request fails with a 502 instead of waiting
    for the client to give up, and the next request restarts it."""
    srv = router(binaries, "--liveness-timeout", "2")
    with srv:
        c = client_of(srv)
        c.completions.create(model=A, prompt="Hello", max_tokens=2)
        pid = health(srv)[A]["pid"]
        t, failed = start_long_request(srv, c)
        os.kill(pid, signal.SIGSTOP)
        t.join(60 * SLOW)
        assert not t.is_alive(), "the request is still held by the stopped child"
        assert failed and failed[0].status_code == 502, failed
        assert "answered no /alive probe" in srv.log
        wait_for(lambda: not alive(pid), 10 * SLOW, "the stopped child was not killed")
        r = c.completions.create(model=A, prompt="Hello", max_tokens=2)  # restarts it
        assert r.choices[0].text is not None and health(srv)[A]["pid"] != pid
    check_clean_exit(srv)


@pytest.mark.full
def test_a_crash_mid_stream_ends_the_stream_with_an_error_event(binaries):
    srv = router(binaries)
    with srv:
        c = client_of(srv)
        got = []
        with pytest.raises(openai.APIError) as e:
            for chunk in c.completions.create(model=A, prompt="Count: 1, 2,", max_tokens=1000, stream=True,
                                              extra_body={"ignore_eos": True}):
                got.append(chunk.choices[0].text)
                if len(got) == 3:
                    os.kill(health(srv)[A]["pid"], signal.SIGKILL)
        assert len(got) >= 3 and "exited mid-stream" in str(e.value)
        wait_for(lambda: health(srv)[A]["state"] == "stopped", 5 * SLOW, "the crash was not noticed")
        assert "the reply was cut short" in srv.log
        assert c.completions.create(model=A, prompt="Hi", max_tokens=2).model == A  # restarted
    check_clean_exit(srv)


# ---- the front end -------------------------------------------------------------------------------


def test_ingot_serve_config_builds_then_routes(binaries, tmp_path):
    gguf = smollm2_gguf()
    build_opts = ["--kv-dtype", "f32"] + (["--san"] if SAN else [])  # the options of the cached build
    cfg = tmp_path / "models.json"
    cfg.write_text(json.dumps({"models": [
        {"path": gguf, "name": A, "build": build_opts, "serve": ["--kv-memory", "64"]},
        {"path": gguf, "name": B, "build": ["--kv-dtype", "f16"] + (["--san"] if SAN else []),
         "serve": ["--kv-memory", "32"]},
    ]}))
    srv = ServerProc(ROOT / "ingot", "--api-key", "sekrit", "--", "--grace", "5",
                     command=["serve", "--config", cfg], start_timeout=300 * SLOW)
    with srv:
        denied = requests.get(srv.base_url + "/models", timeout=30)
        assert denied.status_code == 401 and denied.json()["error"]["code"] == "missing_api_key"
        c = openai.OpenAI(base_url=srv.base_url, api_key="sekrit", max_retries=0, timeout=120 * SLOW)
        assert {m.id for m in c.models.list().data} == {A, B}
        assert c.completions.create(model=B, prompt="Hi", max_tokens=2).model == B
        m, _ = srv.metrics()
        # each model's own serve options: B's KV cache is 32 MiB smaller
        mib = 1 << 20
        assert m[("ingot_router_model_memory_bytes", f'{{model="{A}"}}')] - \
            m[("ingot_router_model_memory_bytes", f'{{model="{B}"}}')] == pytest.approx(32 * mib, abs=mib)
    check_clean_exit(srv)
    bad = subprocess.run([ROOT / "ingot", "serve", "--dtype", "f32", gguf, gguf], capture_output=True, text=True,
                         timeout=300)
    assert bad.returncode == 2 and "two models are named" in bad.stderr  # refused before anything is built
    cfg.write_text(json.dumps({"models": [{"path": gguf, "serve": "--kv-memory 64"}]}))
    bad = subprocess.run([ROOT / "ingot", "serve", "--config", cfg], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 1 and "models[0].serve must be an array of strings" in bad.stderr, bad.stderr


# ---- a gateway in front of several serve processes ------------------------------------------------


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


NGINX_CONF = """
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {prefix}/body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    upstream smollm2 {{
        server 127.0.0.1:{p1};
        server 127.0.0.1:{p2};
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://smollm2;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 600s;
        }}
    }}
}}
"""


def test_nginx_gateway_in_front_of_two_serve_processes(binaries):
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
    if nginx is None:
        pytest.skip("nginx not installed (Debian package nginx-light; scripts/setup.sh installs it)")
    with ServerProc(binaries[A], *CHILD) as s1, ServerProc(binaries[A], *CHILD) as s2, \
            tempfile.TemporaryDirectory() as prefix:
        port = free_port()
        conf = pathlib.Path(prefix) / "nginx.conf"
        conf.write_text(NGINX_CONF.format(prefix=prefix, p1=s1.port, p2=s2.port, port=port))
        gw = subprocess.Popen([nginx, "-p", prefix, "-c", str(conf), "-e", f"{prefix}/error.log",
                               "-g", "daemon off;"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            wait_for(lambda: gw.poll() is not None or _connects(port), 10, "nginx did not listen")
            assert gw.poll() is None, gw.stderr.read()
            c = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0,
                              timeout=120 * SLOW)
            for _ in range(2):  # round robin: one each
                r = c.chat.completions.create(model=A, messages=PROMPT, max_tokens=4, temperature=0)
                assert r.choices[0].message.content
            chunks = list(c.chat.completions.create(model=A, messages=PROMPT, max_tokens=4, stream=True))
            assert chunks[-1].choices[0].finish_reason in ("length", "stop")
            served = [s.metrics()[0].get(("ingot_http_requests_total", '{code="200"}'), 0) for s in (s1, s2)]
            assert min(served) >= 1 and sum(served) >= 3, served
        finally:
            gw.terminate()
            gw.wait(10)


def _connects(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False
