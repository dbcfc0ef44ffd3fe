"""Structured output over a real socket: response_format json_object and json_schema, and GBNF grammars.

Runs the SmolLM2-135M-Instruct binary with the openai client. Every output of
a json_schema request is parsed with `json` and validated with the
`jsonschema` package (draft 2020-12, formats checked too): decoding is constrained token by
token, so even this small model must produce conforming JSON every time. The
default tier runs 8 schemas at once (one batch); the rest of the 24 run in
`make test-full`. A tight KV pool forces preemption: recomputed sequences
give exactly the roomy server's outputs. `pattern` is checked the same way
(jsonschema runs Python's re.search), and what its subset refuses is a 400
naming it. Strings and arrays in the schemas carry length bounds so the
shortest valid answer always fits max_tokens (an unbounded string lets a small
model write until max_tokens, which ends with "length" as it should).
"""
import concurrent.futures
import json
import re

import jsonschema
import openai
import pytest
import requests

from conftest import SAN
from modelbuild import serving_binary
from serverproc import ServerProc

MODEL = "smollm2"
SLOW = 8 if SAN else 1
MAX_TOKENS = 160


@pytest.fixture(scope="module")
def binary(request):
    return serving_binary(request)


@pytest.fixture(scope="module")
def server(binary):
    srv = ServerProc(binary, "--grace", "10").start()
    yield srv
    rc = srv.stop()
    assert rc == 0, srv.log
    assert not srv.sanitizer_report(), srv.log


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=300 * SLOW)


def s(maxlen=20, **kw):
    return {"type": "string", "maxLength": maxlen, **kw}


def obj(props, required=None):
    return {"type": "object", "properties": props, "required": list(props) if required is None else required,
            "additionalProperties": False}


# (name, prompt, schema[, extra request fields]); the first 8 run in the default tier
SCHEMAS = [
    ("person", "Describe a person as JSON.",
     obj({"name": s(30), "age": {"type": "integer", "minimum": 0}, "email": {"type": "string", "format": "email"}})),
    ("color", "Pick a color.", obj({"color": {"enum": ["red", "green", "blue"]}, "confidence": {"type": "number"}})),
    ("nested", "Give an address.",
     obj({"owner": s(20), "address": obj({"street": s(30), "city": s(20), "zip": s(5, minLength=5)})})),
    ("tags", "Tag this: a sunny beach holiday.",
     obj({"tags": {"type": "array", "items": s(15), "minItems": 1, "maxItems": 3}})),
    ("any_of", "Give a value.", obj({"value": {"anyOf": [{"type": "integer"}, s(10)]}})),
    ("defs_ref", "List products in a shop.",
     {"$defs": {"item": obj({"name": s(15), "price": {"type": "number"}})},
      **obj({"items": {"type": "array", "items": {"$ref": "#/$defs/item"}, "maxItems": 2}})}),
    ("nullable", "Describe a cat.",
     obj({"nickname": {"type": ["string", "null"], "maxLength": 15}, "age": {"type": ["integer", "null"]}})),
    ("formats", "When and what is the meeting?",
     obj({"day": {"type": "string", "format": "date"}, "at": {"type": "string", "format": "time"},
          "id": {"type": "string", "format": "uuid"}})),
    # recursion is unbounded by nature; a frequency penalty keeps greedy decoding from nesting forever
    ("recursive", "Write a linked list with two values.",
     {"$defs": {"n": obj({"value": {"type": "integer"}, "next": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/n"}]}})},
      "$ref": "#/$defs/n"}, {"frequency_penalty": 1.0}),
    ("const", "Write a report header.", obj({"version": {"const": 2}, "kind": {"const": "report"}, "title": s(20)})),
    ("bool_null", "Did it work?", obj({"ok": {"type": "boolean"}, "error": {"type": "null"}})),
    ("top_array", "List two cities.", {"type": "array", "items": obj({"city": s(15)}), "minItems": 2,
                                       "maxItems": 2}),
    ("optional", "Describe a book.", obj({"title": s(20), "year": {"type": "integer"}, "isbn": s(13)},
                                         required=["title"])),
    ("datetime", "When did it happen?", obj({"when": {"type": "string", "format": "date-time"}})),
    ("mixed_enum", "Choose one.", obj({"choice": {"enum": [1, "two", None, True]}})),
    ("exact_len", "Give a code.", obj({"code": s(4, minLength=4)})),
    ("map", "Count fruits.", {"type": "object", "additionalProperties": {"type": "integer"}, "maxProperties": 3}),
    ("deep", "Nest things.", obj({"a": obj({"b": obj({"c": obj({"d": {"type": "boolean"}})})})})),
    ("top_enum", "Yes or no?", {"enum": ["yes", "no"]}),
    ("numbers", "Give measurements.", obj({"height": {"type": "number"}, "weight": {"type": "number"}})),
    ("int_array", "Give some numbers.", obj({"values": {"type": "array", "items": {"type": "integer"},
                                                        "minItems": 2, "maxItems": 4}})),
    ("shapes", "Describe a shape.",
     obj({"shape": {"anyOf": [obj({"kind": {"const": "circle"}, "r": {"type": "number"}}),
                               obj({"kind": {"const": "square"}, "side": {"type": "number"}})]}})),
    ("definitions", "Describe a user.",
     {"definitions": {"role": {"enum": ["admin", "guest"]}}, **obj({"user": s(12), "role": {"$ref": "#/definitions/role"}})}),
    ("email_list", "Contacts.", obj({"emails": {"type": "array", "items": {"type": "string", "format": "email"},
                                                "maxItems": 2}})),
]
assert len(SCHEMAS) >= 20


def ask(client, name, prompt, schema, max_tokens=MAX_TOKENS, **kw):
    r = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens, temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}, **kw)
    return r


def validate(text, schema):
    value = json.loads(text)
    jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER).validate(value)
    return value


def run_schemas(client, cases):
    with concurrent.futures.ThreadPoolExecutor(len(cases)) as pool:
        results = list(pool.map(lambda c: ask(client, *c[:3], **(c[3] if len(c) > 3 else {})), cases))
    for (name, _, schema, *_), r in zip(cases, results):
        choice = r.choices[0]
        assert choice.finish_reason == "stop", (name, choice.message.content)
        try:
            validate(choice.message.content, schema)
        except Exception as e:
            raise AssertionError(f"{name}: {choice.message.content!r}: {e}") from e


def test_schemas_default_tier(client):
    run_schemas(client, SCHEMAS[:8])


@pytest.mark.full
def test_schemas_breadth(client):
    run_schemas(client, SCHEMAS[8:])


def test_numeric_bounds_hold_under_sampling(client):
    """minimum / maximum / exclusive bounds are compiled into the digits: hot sampling, which
    wanders wherever the grammar lets it, never leaves them (jsonschema checks every output)."""
    schema = obj({"prob": {"type": "number", "minimum": 0, "maximum": 1},
                  "stars": {"type": "integer", "exclusiveMinimum": 0, "maximum": 5},
                  "celsius": {"type": "number", "minimum": -40, "exclusiveMaximum": 60},
                  "offset": {"type": "integer", "minimum": -250, "maximum": -3}})
    assert_holds_when_hot(client, schema, "Rate the weather as JSON.", 7)


def assert_holds_when_hot(client, schema, prompt, seed):
    """Four hot samples (temperature 1.5: they wander wherever the grammar lets them) each finish
    and are valid against the schema."""
    r = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": prompt}], max_tokens=MAX_TOKENS, temperature=1.5, n=4,
        seed=seed, response_format={"type": "json_schema", "json_schema": {"name": "w", "schema": schema, "strict": True}})
    for choice in r.choices:
        assert choice.finish_reason == "stop", choice.message.content
        validate(choice.message.content, schema)


def test_multiple_of_holds_under_sampling(client):
    """multipleOf of an integer: the remainder automaton without bounds or from 0 / 1, the multiples
    listed between two bounds; hot sampling never leaves them (jsonschema checks every output)."""
    schema = obj({"dozen": {"type": "integer", "multipleOf": 12}, "step": {"type": "integer", "multipleOf": 7,
                                                                           "exclusiveMinimum": 0},
                  "even": {"type": "integer", "multipleOf": 2, "minimum": 0},
                  "quarter": {"type": "integer", "multipleOf": 25, "minimum": -100, "maximum": 100}})
    assert_holds_when_hot(client, schema, "Give me some numbers as JSON.", 11)


# pattern: anchored with counts and class escapes, an alternation, unanchored (bounded so a small model
# finishes), quotes the JSON must escape, and a path of optional parts
PATTERN_SCHEMA = obj({"code": {"type": "string", "pattern": "^[A-Z]{3}-\\d{2,4}$"},
                      "level": {"type": "string", "pattern": "^(low|mid|high)$"},
                      "note": {"type": "string", "pattern": "ok", "maxLength": 12},
                      "path": {"type": "string", "pattern": "^/[a-z]+(/[a-z]+)?$", "maxLength": 16},
                      "quoted": {"type": "string", "pattern": '^"[^"\\\\]*"$', "maxLength": 10}})


def test_pattern_constrains_strings(client):
    """pattern is compiled into the grammar (runtime/serve/json_schema_pattern.h): greedy and hot
    sampling (which wanders wherever the grammar lets it) always give strings the regular
    expressions match; jsonschema checks each with Python's re.search."""
    fmt = {"type": "json_schema", "json_schema": {"name": "ticket", "schema": PATTERN_SCHEMA, "strict": True}}
    msgs = [{"role": "user", "content": "File a support ticket as JSON."}]
    greedy = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=MAX_TOKENS, temperature=0,
                                            response_format=fmt)
    hot = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=MAX_TOKENS, temperature=1.3, n=4,
                                         seed=3, response_format=fmt)
    for choice in greedy.choices + hot.choices:
        assert choice.finish_reason == "stop", choice.message.content
        v = validate(choice.message.content, PATTERN_SCHEMA)
        assert re.fullmatch(r"[A-Z]{3}-\d{2,4}", v["code"]) and v["level"] in ("low", "mid", "high"), v
        assert "ok" in v["note"] and len(v["note"]) <= 12, v
        assert v["quoted"][0] == v["quoted"][-1] == '"' and len(v["quoted"]) >= 2, v


def test_pattern_refusals_name_the_construct(server):
    """What the pattern subset leaves out is a 400 naming 'pattern', the construct and the schema path."""
    url = server.base_url + "/chat/completions"
    for pattern, construct in (("^(?=x)[a-z]+$", "lookahead"), ("(a)\\1", "backreference"),
                               ("\\bword", "word boundary"), ("\\p{L}+", "Unicode property")):
        schema = obj({"code": {"type": "string", "pattern": pattern}})
        r = requests.post(url, timeout=60, json={
            "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}})
        assert r.status_code == 400, r.text
        e = r.json()["error"]
        assert e["param"] == "response_format", e
        assert "'pattern' at #/properties/code" in e["message"] and construct in e["message"], e
    # over the limits: refused as quickly, by name
    for schema, what in (({"type": "string", "pattern": "a" * 1001}, "at most 1000"),
                         ({"type": "string", "pattern": "(" * 40 + ")" * 40}, "nest more than 32"),
                         ({"type": "string", "pattern": "^(a{1000}){1000}$"}, "more than 20000 states"),
                         ({"type": "string", "pattern": "^[a-z]+$", "maxLength": 100000}, "minLength / maxLength")):
        r = requests.post(url, timeout=60, json={
            "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}})
        assert r.status_code == 400 and what in r.json()["error"]["message"], r.text


def test_json_object_and_completions(client):
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "A pet as JSON"}],
                                       response_format={"type": "json_object"}, max_tokens=60,
                                       temperature=0)
    c = r.choices[0]
    # any JSON object is allowed, so a small model may run to max_tokens; what it wrote is always a valid prefix
    if c.finish_reason == "stop":
        assert isinstance(json.loads(c.message.content), dict)
    else:
        assert c.finish_reason == "length" and c.message.content.startswith("{")
    schema = obj({"animal": s(12), "legs": {"type": "integer", "minimum": 0}})
    r = client.completions.create(model=MODEL, prompt="A JSON record of an animal:", max_tokens=60, temperature=0,
                                  extra_body={"response_format": {"type": "json_schema",
                                                                  "json_schema": {"name": "a", "schema": schema}}})
    assert r.choices[0].finish_reason == "stop"
    validate(r.choices[0].text, schema)


def test_an_ambiguous_grammar_is_refused_not_followed(server):
    """Nested repetitions of a wildcard make one token's mask cost seconds in the scheduler's step,
    which every other sequence waits on (found by tests/fuzz/fuzz_gbnf). The mask has a budget
    (GRAM_MAX_MASK_WORK, ~130x what a JSON-schema mask takes): past it the request ends with a
    400 naming its grammar, and the server keeps serving. (A repetition of a bare repetition,
    `.+++`, compiles to one repetition now: each level here repeats a group with more in it.)"""
    nested = ".+"
    for _ in range(7):
        nested = f'({nested} "y"?)+'
    grammar = f'root ::= .* {nested} .* "x"\n'
    r = requests.post(server.url + "/v1/completions", timeout=120 * SLOW,
                      json={"model": MODEL, "prompt": "x", "max_tokens": 8, "grammar": grammar})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "grammar" and "too ambiguous" in err["message"], err
    r = requests.post(server.url + "/v1/completions", timeout=120 * SLOW,
                      json={"model": MODEL, "prompt": "x", "max_tokens": 2, "grammar": 'root ::= "ok"'})
    assert r.status_code == 200 and r.json()["choices"][0]["text"] == "ok", r.text


def test_gbnf_grammar(server):
    grammar = r'''
root   ::= "The answer is " answer ". Numbers: " number ("," number){2}
answer ::= "yes" | "no"
number ::= [1-9] [0-9]{0,2}   # at most three digits
'''
    for body in ({"model": MODEL, "messages": [{"role": "user", "content": "Is the sky blue?"}]},
                 {"model": MODEL, "prompt": "Question: is water wet?\n"}):
        endpoint = "/chat/completions" if "messages" in body else "/completions"
        r = requests.post(server.base_url + endpoint, json={**body, "grammar": grammar, "max_tokens": 40,
                                                            "temperature": 0.7, "seed": 5}, timeout=120 * SLOW)
        assert r.status_code == 200, r.text
        c = r.json()["choices"][0]
        text = c["message"]["content"] if "messages" in body else c["text"]
        assert re.fullmatch(r"The answer is (yes|no)\. Numbers: [1-9][0-9]{0,2}(,[1-9][0-9]{0,2}){2}", text), text
        assert c["finish_reason"] == "stop"


def test_streaming_n2_and_length(client):
    name, prompt, schema = SCHEMAS[1]
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": prompt}], max_tokens=MAX_TOKENS, temperature=0.9,
        seed=11, n=2, stream=True,
        response_format={"type": "json_schema", "json_schema": {"name": name, "schema": schema}})
    texts, finish = ["", ""], [None, None]
    for chunk in stream:
        for ch in chunk.choices:
            texts[ch.index] += ch.delta.content or ""
            finish[ch.index] = ch.finish_reason or finish[ch.index]
    assert finish == ["stop", "stop"], texts
    for t in texts:
        validate(t, schema)
    # max_tokens cutting the structure ends with "length", the text a valid prefix
    r = ask(client, *SCHEMAS[0], max_tokens=3)
    assert r.choices[0].finish_reason == "length"
    assert r.choices[0].message.content.startswith("{")


def test_errors_name_the_field(server):
    url = server.base_url + "/chat/completions"
    base = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}

    def err(extra):
        r = requests.post(url, json={**base, **extra}, timeout=60)
        assert r.status_code == 400, r.text
        return r.json()["error"]

    e = err({"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": obj({"code": {"type": "number", "multipleOf": 0.5}})}}})
    assert e["param"] == "response_format" and "'multipleOf'" in e["message"] and "#/properties/code" in e["message"]
    assert "integers only" in e["message"], e
    for schema, words in (({"type": "integer", "multipleOf": 3, "maximum": 10}, "with no bounds"),
                          ({"type": "integer", "multipleOf": 2, "minimum": 0, "maximum": 10 ** 6}, "more than 1000"),
                          ({"type": "integer", "multipleOf": 4, "minimum": 5, "maximum": 7}, "no integer"),
                          ({"type": "integer", "multipleOf": 2.5}, "whole number"), ({"multipleOf": 2}, "integer")):
        e = err({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": obj({"n": schema})}}})
        assert "'multipleOf'" in e["message"] or "multiple" in e["message"], e
        assert words in e["message"] and "#/properties/n" in e["message"], e
    e = err({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"allOf": []}}}})
    assert "'allOf'" in e["message"]
    e = err({"grammar": 'root ::= "a" (\n"b"'})
    assert e["param"] == "grammar" and "line 2" in e["message"] and "expected ')'" in e["message"]
    e = err({"grammar": "root ::= root \"a\""})
    assert e["param"] == "grammar" and "left recursion" in e["message"]
    e = err({"grammar": "start ::= \"a\""})
    assert "root" in e["message"]
    e = err({"grammar": "root ::= \"a\"", "response_format": {"type": "json_object"}})
    assert e["param"] == "grammar"
    e = err({"response_format": {"type": "yaml"}})
    assert e["param"] == "response_format"
    e = err({"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "object"}}}})
    assert "name" in e["message"]
    # the server goes on serving, and the masks show in /metrics
    r = requests.post(url, json={**base, "response_format": {"type": "json_schema", "json_schema": {
        "name": "ok", "schema": obj({"ok": {"type": "boolean"}})}}, "max_tokens": 60}, timeout=120 * SLOW)
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] == "stop", r.text
    assert json.loads(r.json()["choices"][0]["message"]["content"])["ok"] in (True, False)
    metrics = requests.get(server.url + "/metrics", timeout=30).text
    masked = re.search(r"^ingot_grammar_masked_tokens_total (\S+)$", metrics, re.M)
    assert masked and float(masked.group(1)) > 0


def test_preemption_keeps_the_constraint_consistent(binary, client):
    """A pool far too small for 8 concurrent structured requests: sequences
    are preempted and recomputed, and each greedy output is still exactly
    what a roomy server returns (the matcher advances only on new tokens)."""
    cases = [SCHEMAS[i % 4] for i in range(8)]
    prompts = [f"{p} (request {i})" for i, (_, p, _) in enumerate(cases)]

    def run_all(c):
        with concurrent.futures.ThreadPoolExecutor(len(cases)) as pool:
            return list(pool.map(lambda k: ask(c, cases[k][0], prompts[k], cases[k][2], max_tokens=100).choices[0],
                                 range(len(cases))))

    roomy = run_all(client)
    srv = ServerProc(binary, "--kv-blocks", "12", "--grace", "10").start()
    try:
        tight_client = openai.OpenAI(base_url=srv.base_url, api_key="unused", max_retries=0, timeout=300 * SLOW)
        tight = run_all(tight_client)
        metrics = requests.get(srv.url + "/metrics", timeout=30).text
    finally:
        rc = srv.stop()
    assert rc == 0 and not srv.sanitizer_report(), srv.log
    assert float(re.search(r"^ingot_preemptions_total (\S+)$", metrics, re.M).group(1)) > 0
    for (name, _, schema), a, b in zip(cases, roomy, tight):
        assert b.message.content == a.message.content and b.finish_reason == a.finish_reason, name
        if a.finish_reason == "stop":
            validate(a.message.content, schema)


def test_logprobs_are_the_raw_distribution(client):
    """The mask changes what is sampled, not what logprobs report: the first
    position's alternatives are the same with and without a constraint."""
    def first(**kw):
        r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Name a fruit."}],
                                           max_tokens=2, temperature=0, logprobs=True, top_logprobs=5, **kw)
        return r.choices[0].logprobs.content[0]

    free = first()
    forced = first(response_format={"type": "json_schema", "json_schema": {"name": "f", "schema": {"enum": ["kiwi"]}}})
    assert forced.token.startswith('"')  # "kiwi" as JSON
    assert [t.token for t in forced.top_logprobs] == [t.token for t in free.top_logprobs]
    for a, b in zip(forced.top_logprobs, free.top_logprobs):
        assert abs(a.logprob - b.logprob) < 1e-4
    raw = {t.token: t.logprob for t in free.top_logprobs}
    if '"' in raw:
        assert abs(forced.logprob - raw['"']) < 1e-4
