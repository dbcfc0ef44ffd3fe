"""Limits that protect the machine, each over a real socket on the SmolLM2 binary:
--memory-budget (refused start naming what needs how much; the KV pool sized to the budget),
--rate-limit-rpm / --rate-limit-tpm (429, Retry-After, rate_limit_exceeded, the token
reservation corrected at the end), --request-timeout (504, or an error event that ends a
stream; the blocks freed; others served), and their rejection counters in /metrics (promtool).
"""
import json
import re
import shutil
import subprocess
import time

import openai
import pytest
import requests

from conftest import SAN
from modelbuild import build, smollm2_gguf
from serverproc import ServerProc

MODEL = "smollm2"
SLOW = 8 if SAN else 1
MIB = 1048576


@pytest.fixture(scope="module")
def binary(built):
    return build(smollm2_gguf(), MODEL)


def start_fails(binary, *args):
    r = subprocess.run([str(binary), "serve", "--port", "0", *args], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    return r.stderr


def memory_line(log):
    m = re.search(r"memory +weights ([\d.]+) MiB \+ KV cache ([\d.]+) MiB \+ scratch ([\d.]+) MiB = ([\d.]+) MiB", log)
    assert m, log
    return [float(x) for x in m.groups()]


def rejected(srv, reason):
    text = requests.get(srv.url + "/metrics", timeout=30).text
    m = re.search(r'ingot_requests_rejected_total\{reason="%s"\} (\S+)' % reason, text)
    if shutil.which("promtool"):
        r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
    return float(m.group(1)) if m else 0.0


def test_memory_budget_refuses_a_start_that_does_not_fit(binary):
    err = start_fails(binary, "--memory-budget", "64M")
    assert "--memory-budget 64.0 MiB" in err and "weights need" in err and "scratch" in err and "KV" in err, err
    err = start_fails(binary, "--memory-budget", "300M", "--kv-blocks", "1000")
    assert "is too small" in err and "1000 blocks" in err, err
    assert "must be a positive byte count" in start_fails(binary, "--memory-budget", "lots")
    # checked from the build's weight table before the weights are mapped: a missing file is not even opened
    err = start_fails(binary, "--weights", "/nonexistent.gguf", "--memory-budget", "64M")
    assert "leaves no room for the KV cache" in err and "nonexistent" not in err, err


def test_memory_budget_sizes_the_kv_pool(binary):
    with ServerProc(binary, "--memory-budget", "0.25G") as srv:
        weights, kv, scratch, total = memory_line(srv.log)
        assert total <= 256 and total > 256 - 1.0  # the pool takes what is left, to within one block
        assert "budget 256.0 MiB" in srv.log
        blocks = requests.get(srv.url + "/health", timeout=30).json()["kv_blocks_total"]
        assert abs(blocks * 16 * 30 * 2 * 3 * 64 * 4 / MIB - kv) < 0.1  # SmolLM2: 30 layers, 3 KV heads of 64
        c = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0, timeout=120 * SLOW)
        assert c.completions.create(model=MODEL, prompt="Hi", max_tokens=2).choices[0].text is not None


def test_rate_limit_requests_per_minute(binary):
    with ServerProc(binary, "--rate-limit-rpm", "2") as srv:
        c = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0, timeout=120 * SLOW)
        for _ in range(2):
            c.embeddings.create(model=MODEL, input="hello")
        with pytest.raises(openai.RateLimitError) as e:
            c.embeddings.create(model=MODEL, input="hello")
        assert e.value.status_code == 429
        body = e.value.response.json()["error"]
        assert body["code"] == "rate_limit_exceeded" and body["type"] == "requests"
        retry = int(e.value.response.headers["Retry-After"])
        assert 1 <= retry <= 30  # a request comes back every 30 s at 2 per minute
        assert rejected(srv, "rate_limit_requests") == 1
        # a bad request is not charged: it never reaches admission
        r = requests.post(srv.url + "/v1/embeddings", json={"model": MODEL, "input": ""}, timeout=30)
        assert r.status_code == 400


def test_rate_limit_per_api_key_and_tokens(binary):
    with ServerProc(binary, "--rate-limit-tpm", "100", "--api-key", "k1") as srv:
        c = openai.OpenAI(base_url=srv.base_url, api_key="k1", max_retries=0, timeout=120 * SLOW)
        # more than a minute's tokens: refused outright (prompt + max_tokens reserved)
        # with 413 and no Retry-After: no wait would ever admit it
        with pytest.raises(openai.APIStatusError) as e:
            c.completions.create(model=MODEL, prompt=[1, 2, 3], max_tokens=200)
        assert e.value.status_code == 413 and "Retry-After" not in e.value.response.headers
        body = e.value.response.json()["error"]
        assert "too large" in body["message"] and body["code"] == "request_too_large"
        assert rejected(srv, "rate_limit_too_large") == 1
        # prompt + 70 reserved; a stop string ends it after a few tokens, and the rest goes back
        r = c.completions.create(model=MODEL, prompt="1, 2, 3, 4,", max_tokens=70, stop=[","], temperature=0)
        used = r.usage.prompt_tokens + r.usage.completion_tokens
        assert used < 20
        # without the correction under 30 would be left (plus 5/3 a second): this one reserves ~80 again
        r2 = c.completions.create(model=MODEL, prompt="1, 2, 3, 4,", max_tokens=70, stop=[","], temperature=0)
        assert r2.choices[0].text == r.choices[0].text
        # a burst that reserves more than is left is refused with the wait until it fits
        with pytest.raises(openai.RateLimitError) as e:
            for _ in range(3):
                c.completions.create(model=MODEL, prompt=[1, 2, 3], max_tokens=90, stop=[","])
        assert e.value.response.json()["error"]["type"] == "tokens"
        assert int(e.value.response.headers["Retry-After"]) >= 1
        assert rejected(srv, "rate_limit_tokens") == 1  # the 413 above counts as rate_limit_too_large
        # the wrong key is a 401, not a rate-limit charge
        bad = openai.OpenAI(base_url=srv.base_url, api_key="nope", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            bad.completions.create(model=MODEL, prompt="x", max_tokens=1)


def test_request_timeout_cuts_off_and_frees(binary):
    with ServerProc(binary, "--request-timeout", "1.5") as srv:
        long = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 4000, "ignore_eos": True}
        t0 = time.time()
        r = requests.post(srv.url + "/v1/completions", json=long, timeout=60 * SLOW)
        assert r.status_code == 504, r.text
        assert r.json()["error"]["code"] == "request_timeout"
        assert time.time() - t0 < 10 * SLOW
        # streamed: data events, then an error event, then the stream ends (no [DONE])
        with requests.post(srv.url + "/v1/completions", json={**long, "stream": True}, stream=True,
                           timeout=60 * SLOW) as s:
            assert s.status_code == 200
            events = [line for line in s.iter_lines(decode_unicode=True) if line.startswith("data: ")]
        assert events and "request_timeout" in events[-1], events[-3:]
        assert json.loads(events[-1][6:])["error"]["code"] == "request_timeout"
        assert "[DONE]" not in events[-1]
        # others continue, and the cancelled sequences' blocks are back
        c = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0, timeout=120 * SLOW)
        assert c.completions.create(model=MODEL, prompt="Hi", max_tokens=2).usage.completion_tokens >= 1
        deadline = time.time() + 30
        while requests.get(srv.url + "/health", timeout=30).json()["kv_blocks_used"] and time.time() < deadline:
            time.sleep(0.1)
        assert requests.get(srv.url + "/health", timeout=30).json()["kv_blocks_used"] == 0
        assert rejected(srv, "request_timeout") == 2


def test_rate_limit_buckets_unit(built):
    """tests/c/test_rate_limit.c: the buckets at explicit times (charges, waits, refill cap,
    settling, independent keys, eviction of idle keys)."""
    from conftest import run
    r = run([built / "tests" / "test_rate_limit"])
    assert r.returncode == 0 and " 0 failed" in r.stdout, r.stdout[-4000:]
