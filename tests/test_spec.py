"""Speculative decoding: n-gram drafts (--spec ngram) and a draft model built into the
binary (./ingot build TARGET --draft DRAFT, --spec draft), verified in one forward.

Greedy output must be exactly plain decoding's: the tiny model through the
scheduler's `batch` command (with and without a KV pool so tight that
sequences are preempted), and the real SmolLM2 through `generate` and the
OpenAI-compatible server (streamed and not, n > 1, logprobs, penalties, a
tight pool). The draft model is the tiny target's own architecture with
perturbed weights (--draft-weights), so that it agrees with the target only
sometimes, or SmolLM2 as its own draft. The acceptance rule's sampled
distribution is checked exactly in C (tests/c/test_spec_accept.c).
"""
import concurrent.futures
import random
import re
import shutil
import subprocess

import openai
import pytest

from conftest import ROOT, run
from modelbuild import TINY, build, run_batch, serving_binary, smollm2_gguf
from serverproc import ServerProc


def test_acceptance_rule_unit(built):
    """tests/c/test_spec_accept.c: the emitted token's distribution is p for point-mass
    and draft-model drafts (computed over the RNG draws, not sampled); greedy
    verification is plain decoding's argmax after bias and penalties; seeded runs repeat."""
    r = run([built / "tests" / "test_spec_accept"])
    assert r.returncode == 0 and " 0 failed" in r.stdout, r.stdout[-4000:]


@pytest.fixture(scope="module")
def tiny(built):
    return build(TINY / "gqa_untied_8h2kv", "t-gqa_untied_8h2kv")


def repetitive_requests(n, seed, temperature=0.0):
    """Prompts that repeat a random phrase, so n-gram drafts exist (and a random model's
    output, which loops, gives drafts of its own)."""
    rng = random.Random(seed)
    reqs = []
    for i in range(n):
        phrase = [rng.randrange(1, 600) for _ in range(rng.randrange(3, 20))]
        prompt = phrase * 3 + phrase[:rng.randrange(1, len(phrase))]
        reqs.append({"prompt": prompt, "max_tokens": rng.randrange(8, 40), "ignore_eos": True,
                     "temperature": temperature, "seed": 100 + i})
    return reqs


@pytest.mark.parametrize("pool", [[], ["--kv-blocks", "8", "--max-batch-tokens", "32"]], ids=["roomy", "preempting"])
def test_greedy_identical_to_plain_tiny(tiny, tmp_path, pool):
    reqs = repetitive_requests(16, 1)
    plain, _ = run_batch(tiny, reqs, tmp_path=tmp_path)
    spec, stats = run_batch(tiny, reqs, "--spec", "ngram", "--spec-k", "5", *pool, tmp_path=tmp_path)
    for i, (a, b) in enumerate(zip(plain, spec)):
        assert b["tokens"] == a["tokens"], f"request {i} differs with speculative decoding"
        assert b["finish"] == a["finish"] == "length" and len(b["tokens"]) == reqs[i]["max_tokens"]
    assert 0 < stats["spec_accepted"] <= stats["spec_proposed"]
    if pool:
        assert stats["preemptions"] > 0
    else:  # accepted drafts save steps
        plain_alone, plain_stats = run_batch(tiny, reqs[:1], tmp_path=tmp_path)
        spec_alone, spec_stats = run_batch(tiny, reqs[:1], "--spec", "ngram", tmp_path=tmp_path)
        assert spec_alone[0]["tokens"] == plain_alone[0]["tokens"]
        assert spec_stats["steps"] < plain_stats["steps"] or spec_stats["spec_accepted"] == 0


def test_sampled_seeded_reproducible_tiny(tiny, tmp_path):
    """Sampling under speculative decoding draws from the request's seeded generator:
    the same seed gives the same tokens again (alone and batched: drafts depend
    only on the sequence's own text)."""
    reqs = repetitive_requests(8, 2, temperature=0.8)
    a, stats = run_batch(tiny, reqs, "--spec", "ngram", tmp_path=tmp_path)
    b, _ = run_batch(tiny, reqs, "--spec", "ngram", tmp_path=tmp_path)
    assert [r["tokens"] for r in a] == [r["tokens"] for r in b]
    alone = [run_batch(tiny, [r], "--spec", "ngram", tmp_path=tmp_path)[0][0]["tokens"] for r in reqs[:3]]
    assert alone == [r["tokens"] for r in a[:3]]
    assert stats["spec_proposed"] > 0


def test_spec_options_are_checked(tiny, tmp_path):
    r = subprocess.run([str(tiny), "batch", "-f", "/dev/null", "--spec", "eagle"], capture_output=True, text=True)
    assert r.returncode != 0 and "--spec is off, ngram or draft" in r.stderr
    f = tmp_path / "one.jsonl"
    f.write_text('{"prompt": [1, 2, 3], "max_tokens": 2}\n')
    r = subprocess.run([str(tiny), "batch", "-f", str(f), "--spec", "draft"], capture_output=True, text=True)
    assert r.returncode != 0 and "needs a binary built with a draft model" in r.stderr


# ---- a draft model ----------------------------------------------------------

TARGET = TINY / "gqa_tied_hd16"


@pytest.fixture(scope="module")
def with_draft(built):
    """The tiny target with a draft of the same architecture and vocabulary (itself, as built)."""
    return build(TARGET, "t-spec-draft", "--draft", str(TARGET))


@pytest.fixture(scope="module")
def perturbed_draft(tmp_path_factory):
    """The target's weights plus noise: a draft that agrees with the target only sometimes."""
    import numpy as np
    import safetensors.numpy

    weights = safetensors.numpy.load_file(str(TARGET / "model.safetensors"))
    rng = np.random.default_rng(0)
    noisy = {k: (v + rng.normal(0, 0.2 * v.std() + 1e-3, v.shape)).astype(v.dtype) for k, v in weights.items()}
    path = tmp_path_factory.mktemp("draft") / "model.safetensors"
    safetensors.numpy.save_file(noisy, str(path))
    return path


def random_requests(n, seed, temperature=0.0):
    rng = random.Random(seed)
    return [{"prompt": [rng.randrange(1, 300) for _ in range(rng.randrange(3, 40))], "max_tokens": rng.randrange(8, 50),
             "ignore_eos": True, "temperature": temperature, "seed": 200 + i} for i in range(n)]


@pytest.mark.parametrize("pool", [[], ["--kv-blocks", "10", "--max-batch-tokens", "32"]], ids=["roomy", "preempting"])
def test_draft_model_greedy_identical_tiny(with_draft, perturbed_draft, tmp_path, pool):
    reqs = random_requests(12, 3)
    plain, _ = run_batch(with_draft, reqs, tmp_path=tmp_path)
    spec, stats = run_batch(with_draft, reqs, "--draft-weights", perturbed_draft, "--spec", "draft", *pool,
                            tmp_path=tmp_path)
    for i, (a, b) in enumerate(zip(plain, spec)):
        assert b["tokens"] == a["tokens"], f"request {i} differs with the draft model"
    # the perturbed draft is right sometimes and wrong sometimes: both paths ran
    assert 0 < stats["spec_accepted"] < stats["spec_proposed"]
    if pool:
        assert stats["preemptions"] > 0
    # the unperturbed draft is the target itself: its drafts are accepted (but for near-ties that the
    # draft, which sees other chunks than the target, may break the other way)
    _, same = run_batch(with_draft, reqs[:2], "--spec", "draft", tmp_path=tmp_path)
    assert same["spec_proposed"] > 0 and same["spec_accepted"] >= 0.9 * same["spec_proposed"]


def test_draft_model_sampled_seeded_reproducible(with_draft, perturbed_draft, tmp_path):
    reqs = random_requests(6, 4, temperature=0.9)
    opts = ("--draft-weights", perturbed_draft, "--spec", "draft")
    a, stats = run_batch(with_draft, reqs, *opts, tmp_path=tmp_path)
    b, _ = run_batch(with_draft, reqs, *opts, tmp_path=tmp_path)
    assert [r["tokens"] for r in a] == [r["tokens"] for r in b]
    assert all(len(r["tokens"]) == q["max_tokens"] for r, q in zip(a, reqs))
    assert 0 < stats["spec_accepted"] < stats["spec_proposed"]


def test_draft_with_another_vocabulary_is_a_build_error(built):
    r = subprocess.run([str(ROOT / "ingot"), "build", str(TARGET), "--name", "t-spec-badvocab", "--draft",
                        str(TINY / "gqa_untied_8h2kv")], capture_output=True, text=True, timeout=300)
    assert r.returncode != 0
    assert "the draft's vocabulary has 600 tokens, the target's 300" in r.stderr, r.stderr


def test_draft_with_another_tokenizer_is_refused(built, tmp_path):
    """Same vocabulary size, other pieces: the build cannot tell, the binary refuses --spec draft."""
    import shutil

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    def checkpoint(name, shift):  # the tiny target's weights with a 300-token byte-level vocabulary
        d = tmp_path / name
        d.mkdir()
        for f in ("config.json", "model.safetensors"):
            shutil.copy(TARGET / f, d / f)
        tok = Tokenizer(models.BPE(vocab={chr(0x100 + (i + shift) % 300): i for i in range(300)}, merges=[]))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        tok.save(str(d / "tokenizer.json"))
        return d

    binary = build(checkpoint("target", 0), "t-spec-tokdiff", "--draft", str(checkpoint("draft", 1)))
    f = tmp_path / "one.jsonl"
    f.write_text('{"prompt": [1, 2, 3], "max_tokens": 2}\n')
    r = subprocess.run([str(binary), "batch", "-f", str(f), "--spec", "draft"], capture_output=True, text=True)
    assert r.returncode != 0
    assert "the draft model's tokenizer is not the model's: token 0 is '\\x00' in one vocabulary and '\\x01'" \
        in r.stderr, r.stderr
    assert run_batch(binary, [{"prompt": [1, 2, 3], "max_tokens": 2}], "--spec", "ngram", tmp_path=tmp_path)[0]


def test_info_names_the_draft(with_draft, tiny):
    info = subprocess.run([str(with_draft), "--info"], capture_output=True, text=True).stdout
    assert re.search(r"draft model:\s+t-spec-draft-draft \(llama, dim 64, layers 2, vocab 300", info), info
    info = subprocess.run([str(tiny), "--info"], capture_output=True, text=True).stdout
    assert re.search(r"draft model:\s+none", info), info


# ---- the real model ---------------------------------------------------------

SUMMARY_PROMPT = ("Summarize this in one sentence, quoting it: The committee met on Tuesday to review the "
                  "budget for the new library. The committee agreed that the budget for the new library "
                  "should include funds for books, computers and a reading room for children.")


def test_generate_cli_identical(built, tmp_path):
    binary = build(smollm2_gguf(), "smollm2")
    plain = subprocess.run([str(binary), "generate", "-p", SUMMARY_PROMPT, "-n", "48"], capture_output=True,
                           text=True, timeout=300)
    spec = subprocess.run([str(binary), "generate", "-p", SUMMARY_PROMPT, "-n", "48", "--spec", "ngram"],
                          capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0 and spec.returncode == 0, plain.stderr + spec.stderr
    assert spec.stdout == plain.stdout
    m = re.search(r"spec:\s+ngram, (\d+) drafted tokens, (\d+) accepted", spec.stderr)
    assert m and 0 < int(m.group(2)) <= int(m.group(1)), spec.stderr


@pytest.fixture(scope="module")
def servers(request):
    """A plain server and a speculative one with a KV pool tight enough to preempt."""
    binary = serving_binary(request)
    with ServerProc(binary, "--max-running", "4") as plain, \
            ServerProc(binary, "--spec", "ngram", "--spec-k", "4", "--kv-blocks", "12", "--max-running", "4",
                       "--max-batch-tokens", "64") as spec:
        yield plain, spec


def chat(srv, model="smollm2", **kw):
    client = openai.OpenAI(base_url=srv.base_url, api_key="x")
    kw.setdefault("temperature", 0)
    return client.chat.completions.create(model=model, messages=[{"role": "user", "content": SUMMARY_PROMPT}], **kw)


def test_serve_greedy_identical_with_logprobs_and_n(servers):
    plain, spec = servers
    assert re.search(r"speculative\s+ngram", spec.log)
    kw = dict(max_tokens=40, n=2, logprobs=True, top_logprobs=3, frequency_penalty=0.3)
    a, b = chat(plain, **kw), chat(spec, **kw)
    for ca, cb in zip(a.choices, b.choices):
        assert cb.message.content == ca.message.content
        assert cb.finish_reason == ca.finish_reason
        la, lb = ca.logprobs.content, cb.logprobs.content
        assert [t.token for t in lb] == [t.token for t in la]
        for ta, tb in zip(la, lb):
            assert tb.logprob == pytest.approx(ta.logprob, abs=1e-4)
            assert [t.token for t in tb.top_logprobs] == [t.token for t in ta.top_logprobs]
    # streamed: the same text (no penalty here)
    stream = chat(spec, max_tokens=40, stream=True)
    streamed = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert streamed == chat(plain, max_tokens=40).choices[0].message.content


def test_serve_seeded_sampling_and_structured_output(servers):
    """A seeded sampled request repeats on the speculative server; a JSON-schema request (which
    decodes plainly: its grammar is not advanced through drafts) gives what the plain server gives."""
    plain, spec = servers
    kw = dict(max_tokens=32, temperature=0.8, seed=7)
    first = chat(spec, **kw).choices[0].message.content
    assert chat(spec, **kw).choices[0].message.content == first
    schema = {"type": "object", "properties": {"title": {"type": "string"}, "year": {"type": "integer"}},
              "required": ["title", "year"], "additionalProperties": False}
    fmt = {"type": "json_schema", "json_schema": {"name": "book", "schema": schema, "strict": True}}
    a = chat(plain, max_tokens=48, response_format=fmt).choices[0].message.content
    b = chat(spec, max_tokens=48, response_format=fmt).choices[0].message.content
    assert b == a


def test_serve_preemption_identical_and_metrics(servers):
    plain, spec = servers
    prompts = [SUMMARY_PROMPT, "Repeat after me: one two three four five, one two three four five, one two",
               "Write the word hello ten times:", "List the days of the week, then list them again:"]

    def both(srv):
        client = openai.OpenAI(base_url=srv.base_url, api_key="x")
        with concurrent.futures.ThreadPoolExecutor(4) as ex:
            futs = [ex.submit(client.completions.create, model="smollm2", prompt=p, max_tokens=64, temperature=0)
                    for p in prompts]
            return [f.result().choices[0].text for f in futs]

    assert both(spec) == both(plain)
    values, text = spec.metrics()
    proposed = values[("ingot_spec_proposed_tokens_total", "")]
    accepted = values[("ingot_spec_accepted_tokens_total", "")]
    assert 0 < accepted <= proposed
    assert values[("ingot_preemptions_total", "")] > 0
    plain_values, _ = plain.metrics()
    assert plain_values[("ingot_spec_proposed_tokens_total", "")] == 0
    if shutil.which("promtool"):
        r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr


@pytest.fixture(scope="module")
def selfdraft(built):
    """SmolLM2 with itself as its draft (greedy drafts are accepted but for near-ties)."""
    gguf = smollm2_gguf()
    return build(gguf, "smollm2-selfdraft", "--draft", gguf)


def test_draft_model_generate_smollm2(selfdraft):
    args = [str(selfdraft), "generate", "-p", "The three primary colors are", "-n", "24", "--ignore-eos"]
    plain = subprocess.run(args, capture_output=True, text=True, timeout=300)
    spec = subprocess.run(args + ["--spec", "draft", "--spec-k", "3"], capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0 and spec.returncode == 0, plain.stderr + spec.stderr
    assert spec.stdout == plain.stdout
    m = re.search(r"spec:\s+draft, (\d+) drafted tokens, (\d+) accepted", spec.stderr)
    assert m and int(m.group(1)) > 0 and int(m.group(2)) >= 0.8 * int(m.group(1)), spec.stderr


@pytest.mark.full
def test_draft_model_serve_smollm2(selfdraft):
    with ServerProc(selfdraft, "--max-running", "2") as plain, \
            ServerProc(selfdraft, "--spec", "draft", "--max-running", "2", "--kv-blocks", "10") as spec:
        assert re.search(r"speculative\s+draft model smollm2-selfdraft-draft", spec.log)
        kw = dict(model="smollm2-selfdraft", max_tokens=32, n=2, logprobs=True, top_logprobs=2)
        a, b = chat(plain, **kw), chat(spec, **kw)
        for ca, cb in zip(a.choices, b.choices):
            assert cb.message.content == ca.message.content
            assert [t.token for t in cb.logprobs.content] == [t.token for t in ca.logprobs.content]
        values, _ = spec.metrics()
        proposed = values[("ingot_spec_proposed_tokens_total", "")]
        assert proposed > 0 and values[("ingot_spec_accepted_tokens_total", "")] >= 0.8 * proposed


def test_draft_counts_in_the_memory_plan(selfdraft):
    """--spec draft adds the draft's weights and a KV pool as large as the target's to serve's plan."""
    import json

    def plan(*opts):
        r = subprocess.run([str(selfdraft), "serve", "--print-memory", "--kv-blocks", "100", *opts],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    off, draft = plan(), plan("--spec", "draft")
    assert draft["kv_blocks"] == off["kv_blocks"] == 100
    assert draft["weights_bytes"] == 2 * off["weights_bytes"]  # the draft is the target's own checkpoint
    assert draft["kv_bytes"] == 2 * off["kv_bytes"]
    assert draft["scratch_bytes"] > off["scratch_bytes"]
