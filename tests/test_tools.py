"""Tool calling on /v1/chat/completions, over a real socket with the openai client on SmolLM2-135M-Instruct.

SmolLM2's template does not mention tools, so the server describes them in a
system message of its own and writes the history in Hermes markup
(runtime/serve/tool_prompt.h); at temperature 0 the model answers a question
it has seen answered with a call by a call of its own, which the server
parses into message.tool_calls (streamed: delta.tool_calls). The parser on
every format, malformed markup included, is tests/c/test_tool_calls.c; the
templates that render tools themselves are compared with jinja2 in
test_jinja.py (fixtures in tests/fixtures/chat_templates/).
"""
import json
import os

import openai
import pytest
import requests

from conftest import SAN, run
from modelbuild import build, smollm2_gguf
from serverproc import ServerProc

MODEL = "smollm2"
SLOW = 8 if SAN else 1
CHAT = "/v1/chat/completions"

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def call(i, city):
    return {"id": f"call_{i}", "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps({"city": city})}}


# a question answered once with a call: the 135M model calls again for the next one
ASK = [{"role": "system", "content": "Always answer with a tool call."},
       {"role": "user", "content": "Weather in London?"},
       {"role": "assistant", "content": None, "tool_calls": [call(1, "London")]},
       {"role": "user", "content": "Weather in Paris?"}]


@pytest.fixture(scope="module")
def binary(request):
    if os.environ.get("INGOT_SERVER_BIN"):
        return os.environ["INGOT_SERVER_BIN"]
    request.getfixturevalue("built")
    return build(smollm2_gguf(), MODEL)


@pytest.fixture(scope="module")
def server(binary):
    srv = ServerProc(binary, "--kv-blocks", "128", "--grace", "10").start()
    yield srv
    rc = srv.stop()
    assert rc == 0 and not srv.sanitizer_report(), srv.log


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=120 * SLOW)


def test_parser_c(built):
    """tests/c/test_tool_calls.c: Hermes, Llama 3 JSON and Mistral markup, whole and split at every
    byte, malformed markup given back as content; format detection; call ids."""
    r = run([built / "tests" / "test_tool_calls"])
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert " 0 failed" in r.stdout


def test_models_tells_the_tool_format(server):
    m = requests.get(server.url + "/v1/models", timeout=10).json()["data"][0]
    assert m["tool_call_format"] == "hermes" and m["tool_prompt"] == "server"


def streamed(client, **kw):
    """Content, tool calls (rebuilt from delta.tool_calls) and finish_reason of a streamed reply."""
    content, calls, finish = "", {}, None
    for ch in client.chat.completions.create(model=MODEL, stream=True, **kw):
        d = ch.choices[0].delta
        content += d.content or ""
        for tc in d.tool_calls or []:
            c = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
            if tc.id:
                assert c["id"] is None, "the id comes once, in the call's first chunk"
                c["id"] = tc.id
                assert tc.type == "function" and tc.function.name, "the name comes with the id"
            if tc.function.name:
                c["name"] += tc.function.name
            c["arguments"] += tc.function.arguments or ""
        if ch.choices[0].finish_reason:
            finish = ch.choices[0].finish_reason
    return content, [calls[i] for i in sorted(calls)], finish


def test_call_result_answer_loop(client):
    """The whole loop, non-streamed and streamed: a call, its result sent back, a final answer."""
    r = client.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER], temperature=0, max_tokens=60)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    assert choice.message.content is None
    (tc,) = choice.message.tool_calls
    assert tc.type == "function" and tc.function.name == "get_weather"
    assert tc.id.startswith("call_") and len(tc.id) == 29
    assert json.loads(tc.function.arguments) == {"city": "Paris"}

    content, calls, finish = streamed(client, messages=ASK, tools=[WEATHER], temperature=0, max_tokens=60)
    assert finish == "tool_calls" and content == ""
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [("get_weather", {"city": "Paris"})]
    assert calls[0]["id"].startswith("call_") and calls[0]["id"] != tc.id

    # the call and its result go back; the model answers in text
    history = ASK + [choice.message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": tc.id, "content": '{"temp_c": 21, "sky": "clear"}'}]
    final = client.chat.completions.create(model=MODEL, messages=history, tools=[WEATHER], tool_choice="none",
                                           temperature=0, max_tokens=40)
    answer = final.choices[0]
    assert answer.message.tool_calls is None and answer.message.content
    assert answer.finish_reason in ("stop", "length")
    # the call and its result reached the prompt (more tokens than without them)
    before = client.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER], tool_choice="none",
                                            max_tokens=1)
    assert final.usage.prompt_tokens > before.usage.prompt_tokens + 20
    content, calls, finish = streamed(client, messages=history, tools=[WEATHER], tool_choice="none",
                                      temperature=0, max_tokens=40)
    assert calls == [] and content == answer.message.content and finish == answer.finish_reason


def test_parallel_calls(client):
    """Two cities after an example of two calls: two calls, in order, streamed the same way; with
    parallel_tool_calls=false generation ends after the first."""
    ask = [ASK[0], {"role": "user", "content": "Weather in London and Berlin?"},
           {"role": "assistant", "content": None, "tool_calls": [call(1, "London"), call(2, "Berlin")]},
           {"role": "user", "content": "Weather in Paris and Rome?"}]
    kw = dict(messages=ask, tools=[WEATHER], temperature=0, max_tokens=80)
    r = client.chat.completions.create(model=MODEL, **kw)
    both = [(t.function.name, json.loads(t.function.arguments)) for t in r.choices[0].message.tool_calls]
    assert both == [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"})]
    assert len({t.id for t in r.choices[0].message.tool_calls}) == 2
    content, calls, finish = streamed(client, **kw)
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == both and finish == "tool_calls"
    one = client.chat.completions.create(model=MODEL, parallel_tool_calls=False, **kw)
    assert [(t.function.name, json.loads(t.function.arguments)) for t in one.choices[0].message.tool_calls] == both[:1]
    assert one.choices[0].finish_reason == "tool_calls"
    assert one.usage.completion_tokens < r.usage.completion_tokens
    content, calls, finish = streamed(client, parallel_tool_calls=False, **kw)
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == both[:1] and finish == "tool_calls"


def test_tool_choice_none_shows_no_tools(client):
    """tool_choice none: the tools are not described to the model (a shorter prompt) and nothing is parsed."""
    user = [{"role": "user", "content": "Weather in Paris?"}]
    with_tools = client.chat.completions.create(model=MODEL, messages=user, tools=[WEATHER], max_tokens=1)
    none = client.chat.completions.create(model=MODEL, messages=user, tools=[WEATHER], tool_choice="none",
                                          max_tokens=1)
    plain = client.chat.completions.create(model=MODEL, messages=user, max_tokens=1)
    assert none.usage.prompt_tokens == plain.usage.prompt_tokens < with_tools.usage.prompt_tokens


def test_text_answer_is_content(client):
    """auto with an ordinary question: no call is made up; the text is the content."""
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Say hello."}],
                                       tools=[WEATHER], temperature=0, max_tokens=20)
    assert r.choices[0].message.tool_calls is None and r.choices[0].message.content
    assert "<tool_call>" not in r.choices[0].message.content


def expect_400(server, body, param):
    r = requests.post(server.url + CHAT, json=body, timeout=30 * SLOW)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param, err
    return err


def base(**kw):
    return dict({"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}, **kw)


BAD_TOOLS = [
    ({"tools": {"type": "function"}}, "tools"),
    ({"tools": [WEATHER] * 129}, "tools"),
    ({"tools": ["f"]}, "tools[0]"),
    ({"tools": [{"type": "retrieval"}]}, "tools[0].type"),
    ({"tools": [{"type": "function"}]}, "tools[0].function"),
    ({"tools": [{"type": "function", "function": {"description": "x"}}]}, "tools[0].function.name"),
    ({"tools": [{"type": "function", "function": {"name": "has space"}}]}, "tools[0].function.name"),
    ({"tools": [{"type": "function", "function": {"name": "f" * 65}}]}, "tools[0].function.name"),
    ({"tools": [WEATHER, WEATHER]}, "tools[1].function.name"),
    ({"tools": [{"type": "function", "function": {"name": "f", "description": 3}}]}, "tools[0].function.description"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": []}}]}, "tools[0].function.parameters"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}]},
     "tools[0].function.parameters"),
    ({"tools": [{"type": "function", "function": {"name": "f", "strict": "yes"}}]}, "tools[0].function.strict"),
    ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [WEATHER], "parallel_tool_calls": "no"}, "parallel_tool_calls"),
    ({"messages": [{"role": "tool", "content": "42"}]}, "messages[0].tool_call_id"),
    ({"messages": [{"role": "user", "content": "x", "tool_calls": [call(1, "Paris")]}]}, "messages[0].tool_calls"),
    ({"messages": [{"role": "assistant", "content": None, "tool_calls": {"id": "x"}}]}, "messages[0].tool_calls"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"type": "function"}]}]}, "messages[0].tool_calls[0].id"),
    ({"messages": [{"role": "assistant", "tool_calls": [dict(call(1, "P"), function={"name": "f"})]}]},
     "messages[0].tool_calls[0].function.arguments"),
    ({"messages": [{"role": "assistant", "tool_calls": [dict(call(1, "P"), type="code")]}]},
     "messages[0].tool_calls[0].type"),
    ({"messages": [{"role": "function", "name": "f", "content": "1"}]}, "messages[0].role"),
]


@pytest.mark.parametrize("extra,param", BAD_TOOLS, ids=[p + f"-{i}" for i, (_, p) in enumerate(BAD_TOOLS)])
def test_bad_tools_are_400_naming_the_field(server, extra, param):
    expect_400(server, base(**extra), param)


def test_required_and_named_refused_until_constrained(server):
    """Unconstrained, a small model would not reliably call; the server says so instead of guessing."""
    for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        err = expect_400(server, base(tools=[WEATHER], tool_choice=choice), "tool_choice")
        assert "not supported" in err["message"]
    assert requests.post(server.url + CHAT, json=base(tools=[WEATHER]), timeout=60 * SLOW).status_code == 200
