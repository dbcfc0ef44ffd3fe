"""`NAME serve`: the OpenAI-compatible HTTP server, over real sockets with the real openai client.

Runs against the SmolLM2-135M-Instruct binary. One server serves most tests
(module scope); API-key, SIGTERM and small-limit cases start their own.
Every server is stopped with SIGTERM and must exit 0 without a sanitizer
report (INGOT_SAN=1 uses the --san binary).
"""
import json
import re
import shutil
import signal
import socket
import subprocess
import threading
import time

import openai
import pytest
import requests

from conftest import SAN, run
from modelbuild import serving_binary
from serverproc import ServerProc

MODEL = "smollm2"
SLOW = 8 if SAN else 1  # the sanitizer build is several times slower
PROMPT = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def binary(request):
    return serving_binary(request)


def check_clean_exit(srv, rc):
    assert rc == 0, srv.log
    assert not srv.sanitizer_report(), srv.log


@pytest.fixture(scope="module")
def server(binary):
    srv = ServerProc(binary, "--grace", "10").start()
    yield srv
    check_clean_exit(srv, srv.stop())


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=120 * SLOW)


def health(srv):
    return srv.health()


def metrics(srv):
    """The /metrics text parsed into {(name, labels): value}, and the text."""
    return srv.metrics()


def expect_error(resp, status, param=None, code=None):
    assert resp.status_code == status, resp.text
    body = resp.json()
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"]
    if param is not None:
        assert err["param"] == param, err
    if code is not None:
        assert err["code"] == code, err
    return err


# ---- basic endpoints --------------------------------------------------------


def test_models_list(client):
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert models.data[0].object == "model"


def test_health_ready_alive(server):
    h = health(server)
    assert h["model"] == MODEL and h["state"] == "ready"
    for k in ("kv_blocks_used", "kv_blocks_total", "running", "waiting"):
        assert isinstance(h[k], int)
    assert h["kv_blocks_total"] > 0
    r = requests.get(server.url + "/ready", timeout=10)
    assert r.status_code == 200 and r.json()["ready"] is True
    r = requests.get(server.url + "/alive", timeout=10)
    assert r.status_code == 200 and r.json()["alive"] is True


# ---- chat and completions ------------------------------------------------------


def test_chat_completion(client):
    r = client.chat.completions.create(model=MODEL, messages=PROMPT, max_tokens=12, temperature=0)
    assert r.object == "chat.completion" and r.model == MODEL and r.id.startswith("chatcmpl-")
    c = r.choices[0]
    assert c.index == 0 and c.message.role == "assistant"
    assert "Paris" in c.message.content
    assert c.finish_reason in ("stop", "length")
    u = r.usage
    assert u.prompt_tokens > 5 and 0 < u.completion_tokens <= 12
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens


def test_chat_stream_matches_non_stream(client):
    kw = dict(model=MODEL, messages=PROMPT, max_tokens=10, temperature=0)
    full = client.chat.completions.create(**kw)
    chunks = list(client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    assert all(ch.object == "chat.completion.chunk" for ch in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == full.choices[0].message.content
    finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert finishes == [full.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == full.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == full.usage.prompt_tokens


def test_completion_text_and_token_prompt(client, binary):
    r = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=6, temperature=0)
    assert r.object == "text_completion" and r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 6
    assert "Paris" in r.choices[0].text
    ids = subprocess.run([str(binary), "tokenize", "-p", "The capital of France is"], capture_output=True,
                         text=True, timeout=120).stdout.split()
    r2 = client.completions.create(model=MODEL, prompt=[int(t) for t in ids], max_tokens=6, temperature=0)
    assert r2.choices[0].text == r.choices[0].text
    assert r2.usage.prompt_tokens == r.usage.prompt_tokens == len(ids)


def test_completion_stream(client):
    kw = dict(model=MODEL, prompt="Once upon a time", max_tokens=8, temperature=0)
    full = client.completions.create(**kw)
    chunks = list(client.completions.create(stream=True, **kw))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == full.choices[0].text
    assert chunks[-1].choices[0].finish_reason == "length"


def test_raw_sse_framing(server):
    body = {"model": MODEL, "prompt": "Hello", "max_tokens": 3, "temperature": 0, "stream": True}
    r = requests.post(server.base_url + "/completions", json=body, stream=True, timeout=60 * SLOW)
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/event-stream")
    raw = r.content.decode()
    events = raw.split("\n\n")
    assert events[-1] == "" and events[-2] == "data: [DONE]"
    for e in events[:-2]:
        assert e.startswith("data: ")
        json.loads(e[6:])


def test_n_choices_and_logprobs(client):
    r = client.chat.completions.create(model=MODEL, messages=PROMPT, max_tokens=4, temperature=0.8, seed=5, n=3,
                                       logprobs=True, top_logprobs=2)
    assert [c.index for c in r.choices] == [0, 1, 2]
    for c in r.choices:
        lp = c.logprobs.content
        assert 1 <= len(lp) <= 4
        for t in lp:
            assert t.logprob <= 0 and len(t.top_logprobs) == 2
            assert t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob
    assert r.usage.completion_tokens == sum(len(c.logprobs.content) for c in r.choices)
    c = client.completions.create(model=MODEL, prompt="The sky is", max_tokens=3, temperature=0, logprobs=2)
    lp = c.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 3
    assert "".join(lp.tokens) == c.choices[0].text
    assert lp.text_offset[0] == 0
    # greedy: the chosen token is the most likely one
    for tok, top in zip(lp.tokens, lp.top_logprobs):
        assert max(top, key=top.get) == tok


# ---- stop strings ---------------------------------------------------------------


def _stop_case(client, stream, as_list):
    kw = dict(model=MODEL, prompt="The capital of France is", temperature=0)
    full = client.completions.create(max_tokens=16, **kw).choices[0].text
    words = re.findall(r" [A-Za-z]+", full)
    assert len(words) >= 3, full
    stop = words[2]  # a word in the middle, crossing token boundaries in general
    expected = full[: full.index(stop)]
    stop_arg = ["zzzz-not-there", stop] if as_list else stop
    if stream:
        chunks = list(client.completions.create(max_tokens=16, stop=stop_arg, stream=True, **kw))
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        reason = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        assert reason == ["stop"]
    else:
        r = client.completions.create(max_tokens=16, stop=stop_arg, **kw)
        text = r.choices[0].text
        assert r.choices[0].finish_reason == "stop"
    assert text == expected
    assert stop not in text


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("as_list", [False, True])
def test_stop_sequences(client, stream, as_list):
    _stop_case(client, stream, as_list)


def test_stop_across_tokens_chat(client):
    full = client.chat.completions.create(model=MODEL, messages=PROMPT, max_tokens=12, temperature=0)
    text = full.choices[0].message.content
    i = text.index("Paris")
    stop = text[i - 3 : i + 3]  # spans the end of one token and the start of another
    chunks = list(client.chat.completions.create(model=MODEL, messages=PROMPT, max_tokens=12, temperature=0,
                                                 stop=stop, stream=True))
    out = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert out == text[: text.index(stop)]


# ---- sampling ---------------------------------------------------------------------


def test_seeded_sampling_reproducible(client):
    kw = dict(model=MODEL, messages=[{"role": "user", "content": "Tell me a short story."}], max_tokens=12,
              temperature=0.8)
    a = client.chat.completions.create(seed=1234, **kw).choices[0].message.content
    b = client.chat.completions.create(seed=1234, **kw).choices[0].message.content
    assert a == b
    others = {client.chat.completions.create(seed=s, **kw).choices[0].message.content for s in (1, 2, 3)}
    assert len(others | {a}) > 1  # sampling really samples


def test_content_parts_and_extensions(client):
    parts = [{"role": "system", "content": [{"type": "text", "text": "You are terse."}]},
             {"role": "user", "content": [{"type": "text", "text": "What is the capital "},
                                          {"type": "text", "text": "of France?"}]}]
    r = client.chat.completions.create(model=MODEL, messages=parts, max_tokens=5, temperature=0,
                                       extra_body={"top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1,
                                                   "ignore_eos": True},
                                       presence_penalty=0.5, frequency_penalty=0.5, top_p=0.9)
    assert r.usage.completion_tokens == 5 and r.choices[0].finish_reason == "length"


# ---- errors -----------------------------------------------------------------------

CHAT = "/v1/chat/completions"
COMPL = "/v1/completions"
OK_CHAT = {"model": MODEL, "messages": PROMPT, "max_tokens": 2}

ERRORS = [
    # (path, body, status, param)
    (CHAT, b"{not json", 400, None),
    (CHAT, b"[1, 2]", 400, None),
    (CHAT, b'{"model": "smollm2", "messages": []} trailing', 400, None),
    (CHAT, {"messages": PROMPT}, 400, "model"),
    (CHAT, {"model": 7, "messages": PROMPT}, 400, "model"),
    (CHAT, {"model": MODEL}, 400, "messages"),
    (CHAT, {"model": MODEL, "messages": "hi"}, 400, "messages"),
    (CHAT, {"model": MODEL, "messages": [{"role": "wizard", "content": "x"}]}, 400, "messages[0].role"),
    (CHAT, {"model": MODEL, "messages": [{"role": "user", "content": 5}]}, 400, "messages[0].content"),
    (CHAT, {"model": MODEL, "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, 400,
     "messages[0].content"),
    (CHAT, dict(OK_CHAT, temperature=-0.1), 400, "temperature"),
    (CHAT, dict(OK_CHAT, temperature=2.5), 400, "temperature"),
    (CHAT, dict(OK_CHAT, temperature="hot"), 400, "temperature"),
    (CHAT, dict(OK_CHAT, top_p=0), 400, "top_p"),
    (CHAT, dict(OK_CHAT, top_p=1.5), 400, "top_p"),
    (CHAT, dict(OK_CHAT, n=0), 400, "n"),
    (CHAT, dict(OK_CHAT, n=17), 400, "n"),
    (CHAT, dict(OK_CHAT, n=1.5), 400, "n"),
    (CHAT, dict(OK_CHAT, max_tokens=0), 400, "max_tokens"),
    (CHAT, dict(OK_CHAT, max_tokens="5"), 400, "max_tokens"),
    (CHAT, dict(OK_CHAT, max_completion_tokens=-3), 400, "max_completion_tokens"),
    (CHAT, dict(OK_CHAT, presence_penalty=3), 400, "presence_penalty"),
    (CHAT, dict(OK_CHAT, frequency_penalty=-2.5), 400, "frequency_penalty"),
    (CHAT, dict(OK_CHAT, stop=["a"] * 17), 400, "stop"),
    (CHAT, dict(OK_CHAT, stop=[1]), 400, "stop"),
    (CHAT, dict(OK_CHAT, stop=""), 400, "stop"),
    (CHAT, dict(OK_CHAT, seed=1.5), 400, "seed"),
    (CHAT, dict(OK_CHAT, logprobs="yes"), 400, "logprobs"),
    (CHAT, dict(OK_CHAT, top_logprobs=3), 400, "top_logprobs"),
    (CHAT, dict(OK_CHAT, logprobs=True, top_logprobs=21), 400, "top_logprobs"),
    (CHAT, dict(OK_CHAT, stream="yes"), 400, "stream"),
    (CHAT, dict(OK_CHAT, stream_options={"include_usage": True}), 400, "stream_options"),
    (CHAT, dict(OK_CHAT, min_p=1.5), 400, "min_p"),
    (CHAT, dict(OK_CHAT, repetition_penalty=0), 400, "repetition_penalty"),
    (CHAT, b'{"model": "smollm2", "messages": [{"role": "user", "content": "x"}], "temperature": 1e999}', 400,
     "temperature"),
    (COMPL, {"model": MODEL}, 400, "prompt"),
    (COMPL, {"model": MODEL, "prompt": ""}, 400, "prompt"),
    (COMPL, {"model": MODEL, "prompt": [1, -2]}, 400, "prompt"),
    (COMPL, {"model": MODEL, "prompt": [1, 10 ** 7]}, 400, "prompt"),
    (COMPL, {"model": MODEL, "prompt": ["a", "b"]}, 400, "prompt"),
    (COMPL, {"model": MODEL, "prompt": "x", "logprobs": 21}, 400, "logprobs"),
    (COMPL, {"model": MODEL, "prompt": "x", "logprobs": True}, 400, "logprobs"),
]


@pytest.mark.parametrize("path,body,status,param", ERRORS, ids=[f"{i}" for i in range(len(ERRORS))])
def test_request_errors(server, path, body, status, param):
    if isinstance(body, (dict, list)):
        r = requests.post(server.url + path, json=body, timeout=30)
    else:
        r = requests.post(server.url + path, data=body, headers={"Content-Type": "application/json"}, timeout=30)
    expect_error(r, status, param)


def test_unknown_model_404(client, server):
    r = requests.post(server.url + CHAT, json=dict(OK_CHAT, model="gpt-4"), timeout=30)
    expect_error(r, 404, "model", "model_not_found")
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-4", messages=PROMPT, max_tokens=2)


def test_context_length_exceeded(server, client):
    ctx = client.models.list().data[0].max_model_len
    r = requests.post(server.url + COMPL, json={"model": MODEL, "prompt": [1] * (ctx + 5), "max_tokens": 1}, timeout=30)
    expect_error(r, 400, "prompt", "context_length_exceeded")
    r = requests.post(server.url + COMPL, json={"model": MODEL, "prompt": [1] * 100, "max_tokens": ctx}, timeout=30)
    expect_error(r, 400, "prompt", "context_length_exceeded")
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hello " * (ctx + 10)}],
                                       max_tokens=2)
    assert e.value.code == "context_length_exceeded"


def test_routes_and_methods(server):
    expect_error(requests.get(server.url + "/v1/nothing", timeout=10), 404)
    expect_error(requests.get(server.url + "/nothing", timeout=10), 404)
    r = requests.get(server.url + CHAT, timeout=10)
    expect_error(r, 405)
    assert r.headers["Allow"] == "POST"
    expect_error(requests.post(server.url + "/health", timeout=10), 405)
    expect_error(requests.delete(server.url + "/v1/models", timeout=10), 405)


def test_garbage_never_kills_the_server(server):
    for payload in (b"\x00\xff\xfe garbage\r\n\r\n", b"GET /" + b"a" * 100000 + b" HTTP/1.1\r\n\r\n",
                    b"POST /v1/completions HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
                    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX: " + b"y" * 200000 + b"\r\n\r\n"):
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
            try:
                s.sendall(payload)
                s.shutdown(socket.SHUT_WR)
                s.recv(4096)
            except OSError:
                pass
    body = "\xff\xfe invalid utf-8? \ud800".encode("utf-8", "surrogatepass")
    r = requests.post(server.url + CHAT, data=body, timeout=10)
    assert r.status_code == 400
    r = requests.post(server.url + COMPL, json={"model": MODEL, "prompt": "caf\u00e9 \u2603 \U0001F600", "max_tokens": 3,
                                                "temperature": 0}, timeout=60 * SLOW)
    assert r.status_code == 200
    json.loads(r.content.decode("utf-8"))  # valid UTF-8 JSON
    assert requests.get(server.url + "/alive", timeout=10).status_code == 200


# ---- metrics --------------------------------------------------------------------------


def test_metrics_move_and_promtool(server, client):
    before, _ = metrics(server)
    client.completions.create(model=MODEL, prompt="Hello there", max_tokens=4, temperature=0, extra_body={"ignore_eos": True})
    requests.post(server.url + CHAT, data=b"{", timeout=10)
    after, text = metrics(server)

    def get(m, name, labels=""):
        return m.get((name, labels), 0.0)

    assert get(after, "ingot_http_requests_total", '{code="200"}') >= get(before, "ingot_http_requests_total", '{code="200"}') + 2
    assert get(after, "ingot_http_requests_total", '{code="400"}') >= get(before, "ingot_http_requests_total", '{code="400"}') + 1
    assert get(after, "ingot_generation_tokens_total") == get(before, "ingot_generation_tokens_total") + 4
    assert get(after, "ingot_prompt_tokens_total") > get(before, "ingot_prompt_tokens_total")
    for h in ("ingot_time_to_first_token_seconds", "ingot_e2e_request_latency_seconds",
              "ingot_time_per_output_token_seconds"):
        assert get(after, h + "_count") == get(before, h + "_count") + 1
        assert get(after, h + "_bucket", '{le="+Inf"}') == get(after, h + "_count")
        assert get(after, h + "_sum") > get(before, h + "_sum")
    for g in ("ingot_num_requests_running", "ingot_num_requests_waiting", "ingot_kv_cache_usage_ratio",
              "ingot_batch_size", "ingot_prefix_cache_hit_tokens_total", "ingot_preemptions_total",
              "ingot_scheduler_steps_total", "ingot_kv_blocks_capacity"):
        assert (g, "") in after, g
    assert get(after, "ingot_scheduler_steps_total") > get(before, "ingot_scheduler_steps_total")
    # the last step's forward pass lies inside it (the two gauges come from one snapshot)
    assert 0 < get(after, "ingot_last_forward_seconds") <= get(after, "ingot_last_step_seconds")
    assert "# TYPE ingot_time_to_first_token_seconds histogram" in text
    assert "# HELP ingot_http_requests_total " in text
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus)")
    r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


# ---- disconnects -----------------------------------------------------------------------


def _wait_running(srv, want, timeout):
    t0 = time.time()
    while True:
        h = health(srv)
        if h["running"] + h["waiting"] == want and h["requests_in_flight"] == want:
            return time.time() - t0
        if time.time() - t0 > timeout:
            raise AssertionError(f"still running after {timeout} s: {h}")
        time.sleep(0.02)


@pytest.mark.parametrize("stream", [True, False])
def test_client_disconnect_cancels(server, stream):
    body = {"model": MODEL, "prompt": "Count forever: 1, 2, 3,", "max_tokens": 4000, "temperature": 0,
            "stream": stream, "ignore_eos": True}
    data = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", server.port), timeout=60 * SLOW)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(data) + data)
    if stream:
        got = b""
        while got.count(b"data: ") < 4:  # a few chunks
            chunk = s.recv(4096)
            assert chunk, got
            got += chunk
        assert got.startswith(b"HTTP/1.1 200")
    else:
        t0 = time.time()
        while health(server)["running"] == 0:
            assert time.time() - t0 < 30 * SLOW
            time.sleep(0.02)
        time.sleep(0.2)
    assert health(server)["running"] == 1
    s.close()
    took = _wait_running(server, 0, 1.0 * SLOW)
    assert took <= 1.0 * SLOW
    assert health(server)["kv_blocks_used"] >= 0
    m, _ = metrics(server)
    assert m[("ingot_client_disconnects_total", "")] >= 1


# ---- API key ------------------------------------------------------------------------------


def test_api_key(binary):
    with ServerProc(binary, "--api-key", "sekrit") as srv:
        r = requests.get(srv.base_url + "/models", timeout=10)
        expect_error(r, 401)
        r = requests.get(srv.base_url + "/models", headers={"Authorization": "Bearer wrong"}, timeout=10)
        expect_error(r, 401, code="invalid_api_key")
        r = requests.post(srv.base_url + "/completions", json={"model": MODEL, "prompt": "x"}, timeout=10)
        expect_error(r, 401)
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=srv.base_url, api_key="nope", max_retries=0).models.list()
        good = openai.OpenAI(base_url=srv.base_url, api_key="sekrit", max_retries=0, timeout=60 * SLOW)
        assert good.models.list().data[0].id == MODEL
        r = good.completions.create(model=MODEL, prompt="Hi", max_tokens=2, temperature=0)
        assert r.usage.completion_tokens >= 1
        for path in ("/health", "/ready", "/alive", "/metrics"):
            assert requests.get(srv.url + path, timeout=10).status_code == 200
        rc = srv.stop()
    check_clean_exit(srv, rc)


def test_body_limit_413(binary):
    with ServerProc(binary, "--max-body", "4096") as srv:
        r = requests.post(srv.base_url + "/completions", json={"model": MODEL, "prompt": "x" * 10000}, timeout=10)
        assert r.status_code == 413
        r = requests.post(srv.base_url + "/completions", json={"model": MODEL, "prompt": "Hi", "max_tokens": 1},
                          timeout=60 * SLOW)
        assert r.status_code == 200
        rc = srv.stop()
    check_clean_exit(srv, rc)


def test_env_configuration(binary):
    srv = ServerProc(binary, env={"INGOT_API_KEY": "k2", "INGOT_KV_BLOCKS": "700", "INGOT_GRACE": "5"})
    with srv:
        assert requests.get(srv.base_url + "/models", timeout=10).status_code == 401
        assert health(srv)["kv_blocks_total"] == 700
        rc = srv.stop()
    check_clean_exit(srv, rc)
    assert "grace             5 s" in srv.log


def test_bad_option_exits_2(binary):
    r = subprocess.run([str(binary), "serve", "--port", "99999"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--port" in r.stderr


# ---- shutdown --------------------------------------------------------------------------------


def test_sigterm_finishes_in_flight(binary):
    srv = ServerProc(binary, "--grace", str(60 * SLOW)).start()
    result = {}

    def call():
        c = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0, timeout=120 * SLOW)
        result["r"] = c.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=24, temperature=0,
                                           extra_body={"ignore_eos": True})

    t = threading.Thread(target=call)
    t.start()
    t0 = time.time()
    while health(srv)["running"] == 0:
        assert time.time() - t0 < 60 * SLOW
        time.sleep(0.01)
    srv.signal(signal.SIGTERM)
    time.sleep(0.2)
    # the listener is closed: new connections are refused
    with pytest.raises(requests.ConnectionError):
        requests.get(srv.url + "/alive", timeout=5)
    t.join(120 * SLOW)
    rc = srv.wait(60 * SLOW)
    assert result["r"].usage.completion_tokens == 24
    assert result["r"].choices[0].finish_reason == "length"
    check_clean_exit(srv, rc)


def test_sigterm_idle_exits_promptly(binary):
    srv = ServerProc(binary).start()
    t0 = time.time()
    rc = srv.stop()
    check_clean_exit(srv, rc)
    assert time.time() - t0 < 10 * SLOW


def test_logit_bias(client, server):
    """logit_bias adds to the raw logits before sampling: -100 bans the
    greedy answer's first token (" Paris", id 7042), +100 forces another
    (id 504, "The"); ids outside the vocabulary or biases outside
    [-100, 100] are a 400 naming the field, on both endpoints."""
    prompt = "The capital of France is"
    plain = client.completions.create(model=MODEL, prompt=prompt, max_tokens=1, temperature=0)
    assert plain.choices[0].text == " Paris"
    banned = client.completions.create(model=MODEL, prompt=prompt, max_tokens=1, temperature=0,
                                       logit_bias={"7042": -100})
    assert banned.choices[0].text not in ("", " Paris")
    forced = client.completions.create(model=MODEL, prompt=prompt, max_tokens=3, temperature=0.9, seed=3,
                                       logit_bias={"504": 100})
    assert forced.choices[0].text == "TheTheThe"
    chat = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Say hi"}],
                                          max_tokens=2, temperature=0, logit_bias={"504": 100})
    assert chat.choices[0].message.content == "TheThe"
    for path, base in (("/v1/completions", {"prompt": prompt}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})):
        for lb in ({"999999": 1}, {"7042": 101}, {"x": 1}, [1, 2]):
            r = requests.post(server.url + path, json={"model": MODEL, "max_tokens": 1, "logit_bias": lb, **base},
                              timeout=60)
            assert r.status_code == 400 and r.json()["error"]["param"] == "logit_bias", (lb, r.text)


def test_intake_pool_unit(built):
    """tests/c/test_intake.c: work on workers, done on the loop thread, once each; the queue bound;
    intake_free finishing what was queued."""
    r = run([built / "tests" / "test_intake"])
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert " 0 failed" in r.stdout
