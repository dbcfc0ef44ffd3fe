"""Embeddings: the generated forward's hidden rows, pooled by the scheduler, served on /v1/embeddings.

Oracle: tests/fixtures/embeddings/reference.json, transformers' last_hidden_state
(LlamaModel, float32) of tiny random Llama checkpoints, pooled last and mean and
L2-normalised (tests/fixtures/make_embedding_reference.py). `NAME batch` with
"embed" runs the same scheduler path as the server, with the prompt in one
chunk and in chunks of 5 tokens (mean pooling accumulates across them), mixed
with a generation request in the same steps.

Then the real SmolLM2 binary over a socket with the openai client: float and
base64 encodings, list inputs, token-id inputs, dimensions, identical inputs
giving cosine 1, mean pooling, and the 400s that name the field.
"""
import base64
import json
import subprocess

import numpy as np
import openai
import pytest
import requests

from conftest import BREADTH, SAN, ROOT
from modelbuild import TINY, build, run_batch, smollm2_gguf
from serverproc import ServerProc

REF = json.loads((ROOT / "tests" / "fixtures" / "embeddings" / "reference.json").read_text())
TOL = 1e-4
MODEL = "smollm2"
SLOW = 8 if SAN else 1


@pytest.fixture(scope="module")
def tiny_binaries(built):
    return {name: build(TINY / name, f"emb-{name}") for name in REF["models"]}


@pytest.mark.parametrize("name", [n for n in REF["models"]])
@pytest.mark.parametrize("chunk", [None, 5], ids=["one-chunk", "chunks-of-5"])
def test_pooled_embeddings_match_transformers(tiny_binaries, name, chunk, tmp_path):
    ref = REF["models"][name]
    reqs = []
    for pooling in ("last", "mean"):
        for ids in ref["inputs"]:
            reqs.append({"prompt": ids, "embed": pooling})
    reqs.append({"prompt": ref["inputs"][-1], "max_tokens": 6})  # generation in the same steps
    opts = ["--max-batch-tokens", chunk] if chunk else []
    results, stats = run_batch(tiny_binaries[name], reqs, *opts, tmp_path=tmp_path)
    k = 0
    for pooling in ("last", "mean"):
        for i, ids in enumerate(ref["inputs"]):
            got = np.array(results[k]["embedding"])
            want = np.array(ref[pooling][i])
            assert results[k]["finish"] == "length" and results[k]["tokens"] == []
            err = np.abs(got - want).max()
            assert err <= TOL, f"{name} {pooling} input {i} ({len(ids)} tokens): max |d| {err:.2e}"
            assert abs(np.linalg.norm(got) - 1) < 1e-5
            k += 1
    assert len(results[k]["tokens"]) == 6
    if chunk:
        assert stats["steps"] >= len(ref["inputs"][-1]) // chunk


def test_unfused_build_matches_transformers(built, tmp_path):
    """--no-fuse: the final norm of the hidden rows is a kernel of its own."""
    name = "gqa_untied_8h2kv"
    ref = REF["models"][name]
    binary = build(TINY / name, f"emb-{name}-nofuse", "--no-fuse")
    reqs = [{"prompt": ids, "embed": p} for p in ("last", "mean") for ids in ref["inputs"]]
    results, _ = run_batch(binary, reqs, "--max-batch-tokens", 5, tmp_path=tmp_path)
    for r, want in zip(results, ref["last"] + ref["mean"]):
        assert np.abs(np.array(r["embedding"]) - np.array(want)).max() <= TOL


def test_last_pooling_with_prefix_cache_hits(tiny_binaries, tmp_path):
    """A repeated input is served partly from the prefix cache (last pooling needs only the last
    row); the vector does not change, and nothing stays referenced in the pool."""
    name = next(iter(REF["models"]))
    ref = REF["models"][name]
    ids = ref["inputs"][-1]
    reqs = [{"prompt": ids, "embed": "last"}]
    results, _ = run_batch(tiny_binaries[name], reqs, tmp_path=tmp_path)
    f = tmp_path / "again.jsonl"
    f.write_text((json.dumps({"prompt": ids, "embed": "last"}) + "\n") * 2)
    # two identical requests one after the other: the second starts after the first published its blocks
    r = subprocess.run([str(tiny_binaries[name]), "batch", "-f", str(f), "--max-running", "1"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert lines[1]["cached_tokens"] >= 32
    for line in lines[:2]:
        assert np.abs(np.array(line["embedding"]) - np.array(ref["last"][-1])).max() <= TOL
    assert np.abs(np.array(results[0]["embedding"]) - np.array(ref["last"][-1])).max() <= TOL


def test_cuda_backend_on_cudasim_matches_transformers(built, tmp_path):
    """The CUDA backend's hidden rows (the generated kernels under cudasim): the same oracle, chunked."""
    name = "gqa_tied_hd16"
    ref = REF["models"][name]
    sim = build(TINY / name, f"cu-emb-{name}", "--backend", "cuda", "--cudasim")
    reqs = [{"prompt": ids, "embed": p} for p in ("last", "mean") for ids in ref["inputs"]]
    reqs.append({"prompt": ref["inputs"][1], "max_tokens": 3})
    results, _ = run_batch(sim, reqs, "--max-batch-tokens", 8, tmp_path=tmp_path)
    k = 0
    for pooling in ("last", "mean"):
        for i in range(len(ref["inputs"])):
            err = np.abs(np.array(results[k]["embedding"]) - np.array(ref[pooling][i])).max()
            assert err <= TOL, f"cudasim {pooling} input {i}: max |d| {err:.2e}"
            k += 1
    assert len(results[k]["tokens"]) == 3


# ---- /v1/embeddings on SmolLM2 -------------------------------------------------


@pytest.fixture(scope="module")
def binary(built):
    return build(smollm2_gguf(), MODEL)


@pytest.fixture(scope="module")
def server(binary):
    srv = ServerProc(binary, "--grace", "10", "--max-running", "4", "--max-waiting", "4").start()
    yield srv
    assert srv.stop() == 0, srv.log
    assert not srv.sanitizer_report(), srv.log


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=120 * SLOW)


def cosine(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def test_embeddings_float_base64_and_lists(client):
    texts = ["The capital of France is Paris.", "Paris is the capital of France.",
             "Photosynthesis turns light into chemical energy.", "The capital of France is Paris."]
    r = client.embeddings.create(model=MODEL, input=texts, encoding_format="float")
    assert r.object == "list" and r.model == MODEL
    assert [d.index for d in r.data] == [0, 1, 2, 3]
    vecs = [np.array(d.embedding) for d in r.data]
    assert all(len(v) == 576 for v in vecs)  # SmolLM2-135M's hidden size
    assert all(abs(np.linalg.norm(v) - 1) < 1e-5 for v in vecs)
    assert cosine(vecs[0], vecs[3]) > 1 - 1e-6  # identical inputs
    assert cosine(vecs[0], vecs[1]) > cosine(vecs[0], vecs[2])  # the paraphrase is nearer
    assert r.usage.prompt_tokens == r.usage.total_tokens > 20
    # base64: little-endian float32 of the same numbers (the client decodes it itself)
    raw = requests.post(client.base_url.join("embeddings").__str__(), json={
        "model": MODEL, "input": texts[:1], "encoding_format": "base64"}, timeout=60 * SLOW).json()
    decoded = np.frombuffer(base64.b64decode(raw["data"][0]["embedding"]), dtype="<f4")
    assert np.abs(decoded - vecs[0]).max() < 1e-6
    b = client.embeddings.create(model=MODEL, input=texts[0], encoding_format="base64")
    assert np.abs(np.frombuffer(base64.b64decode(b.data[0].embedding), dtype="<f4") - vecs[0]).max() < 1e-6
    # with no encoding_format the client asks for base64 and decodes it itself
    d = client.embeddings.create(model=MODEL, input=texts[0])
    assert np.abs(np.array(d.data[0].embedding) - vecs[0]).max() < 1e-6
    # token ids, one array and a list of them
    ids = client.embeddings.create(model=MODEL, input=[1, 2, 3, 4, 5])
    idl = client.embeddings.create(model=MODEL, input=[[1, 2, 3, 4, 5], [6, 7]])
    assert np.abs(np.array(ids.data[0].embedding) - np.array(idl.data[0].embedding)).max() < 1e-6
    assert ids.usage.prompt_tokens == 5 and idl.usage.prompt_tokens == 7


def test_embeddings_dimensions_truncate_and_renormalize(client):
    full = np.array(client.embeddings.create(model=MODEL, input="hello world").data[0].embedding)
    cut = np.array(client.embeddings.create(model=MODEL, input="hello world", dimensions=64).data[0].embedding)
    assert len(cut) == 64
    assert abs(np.linalg.norm(cut) - 1) < 1e-5
    assert np.abs(cut - full[:64] / np.linalg.norm(full[:64])).max() < 1e-6


@pytest.mark.parametrize("body,param", [
    ({"input": ""}, "input"),
    ({"input": []}, "input"),
    ({"input": ["ok", ""]}, "input[1]"),
    ({"input": ["ok", 5]}, "input[1]"),
    ({"input": [[1, 2], [3, -1]]}, "input[1]"),
    ({"input": [49152]}, "input"),
    ({"input": ["x"] * 9}, "input"),  # more than --max-running + --max-waiting
    ({"input": "a \u0000 b"}, "input"),
    ({"input": [1] * 8193}, "input"),  # longer than the context (8192)
    ({"input": "hi", "dimensions": 0}, "dimensions"),
    ({"input": "hi", "dimensions": 577}, "dimensions"),
    ({"input": "hi", "encoding_format": "int8"}, "encoding_format"),
    ({"input": "hi", "user": 5}, "user"),
    ({}, "input"),
])
def test_embeddings_bad_requests_name_the_field(server, client, body, param):
    r = requests.post(server.url + "/v1/embeddings", json={"model": MODEL, **body}, timeout=60 * SLOW)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param, err
    assert err["type"] == "invalid_request_error"
    # the server keeps serving
    assert len(client.embeddings.create(model=MODEL, input="still here").data) == 1


def test_embeddings_unknown_model_is_404(server):
    r = requests.post(server.url + "/v1/embeddings", json={"model": "nope", "input": "x"}, timeout=30)
    assert r.status_code == 404 and r.json()["error"]["param"] == "model"


def test_mean_pooling_server(binary):
    with ServerProc(binary, "--pooling", "mean", "--max-batch-tokens", "8") as srv:
        c = openai.OpenAI(base_url=srv.base_url, api_key="unused", max_retries=0, timeout=120 * SLOW)
        text = "A longer sentence so that the prompt is prefilled in several chunks of eight tokens."
        a, b = c.embeddings.create(model=MODEL, input=[text, text]).data
        assert cosine(a.embedding, b.embedding) > 1 - 1e-6
        assert "mean pooling" in srv.log
        # chat still works beside it
        chat = c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}],
                                         max_tokens=4, temperature=0)
        assert chat.choices[0].message.content
