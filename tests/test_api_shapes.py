"""Anthropic's Messages API (/v1/messages) and OpenAI's Responses API (/v1/responses), spoken by
their official Python clients (anthropic, openai) to a real server on SmolLM2-135M-Instruct.

Both are translated into the chat request they mean (runtime/serve/messages_request.c,
responses_request.c), so the reference of each greedy answer is /v1/chat/completions on the same
conversation: same prompt tokens, same text. The clients' stream helpers rebuild the reply from
the events (indices, sequence numbers, deltas) and must arrive at the non-streamed reply. The
tool loop is test_tools.py's on the other APIs' shapes.
"""
import json

import anthropic
import jsonschema
import openai
import pytest
import requests

from modelbuild import serving_binary
from serverproc import ServerProc
from conftest import SAN

MODEL = "smollm2"
SLOW = 8 if SAN else 1
QUESTION = "What is the capital of France?"
SYSTEM = "You are a geography teacher. Answer in one sentence."

# the current Messages API has no temperature (older versions had it; the server still reads it)
GREEDY = {"temperature": 0}
WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER_CHAT = {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather for a city",
                                                 "parameters": WEATHER_SCHEMA}}


@pytest.fixture(scope="module")
def server(request):
    srv = ServerProc(serving_binary(request), "--kv-blocks", "128", "--grace", "10",
                     "--responses-store", "4").start()
    yield srv
    rc = srv.stop()
    assert rc == 0 and not srv.sanitizer_report(), srv.log


@pytest.fixture(scope="module")
def claude(server):
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=120 * SLOW)


@pytest.fixture(scope="module")
def oai(server):
    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=120 * SLOW)


def chat(oai, messages, **kw):
    """The reference: /v1/chat/completions, greedy."""
    return oai.chat.completions.create(model=MODEL, messages=messages, temperature=0, **kw)


# ---- Messages ----------------------------------------------------------------------------------


@pytest.mark.parametrize("max_tokens", [40, 4])
def test_messages_answer_is_the_chat_answer(claude, oai, max_tokens):
    """system + a user turn: the same prompt and greedy text as chat; stop_reason from how it ended;
    streamed through the client's helper, the same message."""
    ref = chat(oai, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}],
               max_tokens=max_tokens)
    m = claude.messages.create(model=MODEL, max_tokens=max_tokens, extra_body=GREEDY, system=SYSTEM,
                               messages=[{"role": "user", "content": QUESTION}])
    assert m.type == "message" and m.role == "assistant" and m.id.startswith("msg_")
    assert [b.type for b in m.content] == ["text"]
    assert m.content[0].text == ref.choices[0].message.content
    assert m.stop_reason == {"stop": "end_turn", "length": "max_tokens"}[ref.choices[0].finish_reason]
    assert m.usage.input_tokens == ref.usage.prompt_tokens
    assert m.usage.output_tokens == ref.usage.completion_tokens

    with claude.messages.stream(model=MODEL, max_tokens=max_tokens, extra_body=GREEDY, system=SYSTEM,
                                messages=[{"role": "user", "content": QUESTION}]) as s:
        types = [ev.type for ev in s]
        final = s.get_final_message()
    assert types[0] == "message_start" and types[-1] == "message_stop"
    assert final.content[0].text == m.content[0].text and final.stop_reason == m.stop_reason
    assert final.usage.input_tokens == m.usage.input_tokens and final.usage.output_tokens == m.usage.output_tokens


def test_messages_content_blocks_and_stop_sequences(claude, oai):
    """Text blocks join as a chat content's parts do; a stop sequence ends the text and is named."""
    blocks = [{"type": "text", "text": "What is the capital"}, {"type": "text", "text": " of France?"}]
    m = claude.messages.create(model=MODEL, max_tokens=30, extra_body=GREEDY, messages=[{"role": "user", "content": blocks}])
    ref = chat(oai, [{"role": "user", "content": QUESTION}], max_tokens=30)
    assert m.content[0].text == ref.choices[0].message.content
    cut = claude.messages.create(model=MODEL, max_tokens=30, extra_body=GREEDY, stop_sequences=["France", "Paris"],
                                 messages=[{"role": "user", "content": QUESTION}])
    assert cut.stop_reason == "stop_sequence" and cut.stop_sequence == "France"
    assert cut.content[0].text == ref.choices[0].message.content.split("France")[0]


# a question answered once with a call: the 135M model calls again for the next one (test_tools.py)
TOOLS_MSG = [{"name": "get_weather", "description": "Get the current weather for a city", "input_schema": WEATHER_SCHEMA}]
ASK_MSG = [{"role": "user", "content": "Weather in London?"},
           {"role": "assistant", "content": [{"type": "tool_use", "id": "call_1", "name": "get_weather",
                                              "input": {"city": "London"}}]},
           {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "12 C, rain"},
                                        {"type": "text", "text": "Weather in Paris?"}]}]
ASK_CHAT = [{"role": "system", "content": "Always answer with a tool call."},
            {"role": "user", "content": "Weather in London?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": '{"city": "London"}'}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "12 C, rain"},
            {"role": "user", "content": "Weather in Paris?"}]


@pytest.mark.parametrize("tool_choice", [None, {"type": "any"}, {"type": "tool", "name": "get_weather"}])
def test_messages_tool_use(claude, oai, tool_choice):
    """tool_use and tool_result blocks: the prompt chat gets from the same history, a tool_use block
    with the arguments as an object, stop_reason tool_use; streamed, the same block."""
    kw = dict(model=MODEL, max_tokens=60, extra_body=GREEDY, system="Always answer with a tool call.", tools=TOOLS_MSG,
              messages=ASK_MSG)
    if tool_choice:
        kw["tool_choice"] = tool_choice
    m = claude.messages.create(**kw)
    chat_choice = {None: "auto", "any": "required"}.get(tool_choice and tool_choice["type"],
                                                          {"type": "function", "function": {"name": "get_weather"}})
    ref = chat(oai, ASK_CHAT, tools=[WEATHER_CHAT], tool_choice=chat_choice, max_tokens=60)
    assert m.usage.input_tokens == ref.usage.prompt_tokens
    want_calls = [(c.function.name, json.loads(c.function.arguments)) for c in ref.choices[0].message.tool_calls or []]
    want_text = ref.choices[0].message.content or ""
    if tool_choice:  # constrained: a call whatever the model would have said
        assert [name for name, _ in want_calls] == ["get_weather"]
    assert [(b.name, b.input) for b in m.content if b.type == "tool_use"] == want_calls
    assert "".join(b.text for b in m.content if b.type == "text") == want_text
    assert m.stop_reason == ("tool_use" if want_calls else "end_turn")
    with claude.messages.stream(**kw) as s:
        final = s.get_final_message()
    assert [(b.name, b.input) for b in final.content if b.type == "tool_use"] == want_calls
    assert final.stop_reason == m.stop_reason


def test_messages_auto_tool_use(claude, oai):
    """Unconstrained: after a history of one call the model calls again (test_tools.py's ASK), and
    the server parses the call out of its text into a tool_use block, streamed the same."""
    history = [ASK_MSG[0], ASK_MSG[1], {"role": "user", "content": "Weather in Paris?"}]
    kw = dict(model=MODEL, max_tokens=60, extra_body=GREEDY, tools=TOOLS_MSG, messages=history,
              system="Always answer with a tool call.")
    m = claude.messages.create(**kw)
    ref = chat(oai, ASK_CHAT[:3] + ASK_CHAT[4:], tools=[WEATHER_CHAT], max_tokens=60)
    assert m.usage.input_tokens == ref.usage.prompt_tokens
    assert [(b.name, b.input) for b in m.content if b.type == "tool_use"] == [("get_weather", {"city": "Paris"})]
    assert m.stop_reason == "tool_use"
    with claude.messages.stream(**kw) as s:
        final = s.get_final_message()
    assert [(b.type, getattr(b, "input", None)) for b in final.content] == [(b.type, getattr(b, "input", None))
                                                                           for b in m.content]


def test_messages_output_format(claude):
    """output_config.format json_schema: decoding follows the schema, so the text parses and validates."""
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
              "required": ["city", "country"], "additionalProperties": False}
    m = claude.messages.create(model=MODEL, max_tokens=120, messages=[{"role": "user", "content": "A capital as JSON."}],
                               output_config={"format": {"type": "json_schema", "schema": schema}, "effort": "low"},
                               extra_body=GREEDY)
    assert m.stop_reason == "end_turn"
    jsonschema.validate(json.loads(m.content[0].text), schema)


def test_messages_count_tokens(claude, oai):
    """/v1/messages/count_tokens: the prompt the same request would have (chat's prompt_tokens), with
    tools and system too; no max_tokens needed."""
    n = claude.messages.count_tokens(model=MODEL, system="Always answer with a tool call.", tools=TOOLS_MSG,
                                     messages=ASK_MSG)
    ref = chat(oai, ASK_CHAT, tools=[WEATHER_CHAT], max_tokens=1)
    assert n.input_tokens == ref.usage.prompt_tokens
    with pytest.raises(anthropic.BadRequestError):
        claude.messages.count_tokens(model=MODEL, messages=[])


BAD_MESSAGES = [
    ({"max_tokens": None}, "max_tokens"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "system", "content": "x"}]}, "messages.0.role"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}, "messages.0.content.0"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {}}]}]},
     "messages.0.content.0"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result"}]}]}, "messages.0.content.0.tool_use_id"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "a\u0000b"}]}]}, "messages.0.content"),
    ({"temperature": 1.5}, "temperature"),
    ({"tools": [{"name": "f"}]}, "tools.0.input_schema"),
    ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools.0.type"),
    ({"tool_choice": {"type": "sometimes"}}, "tool_choice"),
    ({"tools": TOOLS_MSG, "tool_choice": {"type": "tool", "name": "nope"}}, "tool_choice"),
    ({"stop_sequences": ["x"] * 17}, "stop_sequences"),
    ({"thinking": {"type": "enabled", "budget_tokens": 1024}}, "thinking"),
    ({"frequency_penalty": 1}, "frequency_penalty"),
    ({"output_config": {"format": {"type": "json_schema", "schema": {"type": "object", "patternProperties": {}}}}},
     "output_config.format"),
    ({"output_config": {"format": {"type": "text"}}}, "output_config.format"),
    ({"container": "c1"}, "container"),
]


@pytest.mark.parametrize("extra,param", BAD_MESSAGES, ids=[f"{p}-{i}" for i, (_, p) in enumerate(BAD_MESSAGES)])
def test_messages_bad_requests_are_400_in_anthropics_shape(server, claude, extra, param):
    """Each refused with a 400 in Anthropic's error shape, the message naming the client's field;
    the anthropic client raises BadRequestError."""
    body = {"model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": "Hi"}]}
    body.update(extra)
    body = {k: v for k, v in body.items() if v is not None}
    r = requests.post(server.url + "/v1/messages", json=body, timeout=30 * SLOW)
    assert r.status_code == 400, r.text
    err = r.json()
    assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error", err
    assert f"'{param}" in err["error"]["message"], err
    with pytest.raises(anthropic.BadRequestError):
        claude.post("/v1/messages", body=body, cast_to=anthropic.types.Message)


def test_messages_api_key_and_other_errors(request):
    """x-api-key is the Messages API's key header: a wrong key is a 401 authentication_error; a
    wrong model a 404 not_found_error; Bearer keys still work."""
    with ServerProc(serving_binary(request), "--kv-blocks", "16", "--api-key", "sesame") as srv:
        body = {"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]}
        with pytest.raises(anthropic.AuthenticationError) as bad:
            anthropic.Anthropic(base_url=srv.url, api_key="nope", max_retries=0).messages.create(**body)
        assert bad.value.body["error"]["type"] == "authentication_error"
        good = anthropic.Anthropic(base_url=srv.url, api_key="sesame", max_retries=0)
        assert good.messages.create(**body).usage.output_tokens == 2
        with pytest.raises(anthropic.NotFoundError):
            good.messages.create(**dict(body, model="other"))
        r = requests.post(srv.url + "/v1/messages", json=body, headers={"Authorization": "Bearer sesame"}, timeout=60)
        assert r.status_code == 200 and r.json()["type"] == "message"


# ---- Responses ---------------------------------------------------------------------------------


@pytest.mark.parametrize("max_output_tokens", [40, 4])
def test_responses_answer_is_the_chat_answer(oai, max_output_tokens):
    """instructions + input: the chat answer with the instructions as its system message; cut by
    max_output_tokens it is incomplete; the stream helper arrives at the same response, its events
    numbered from 0 without a gap."""
    ref = chat(oai, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}],
               max_tokens=max_output_tokens)
    kw = dict(model=MODEL, instructions=SYSTEM, input=QUESTION, max_output_tokens=max_output_tokens, temperature=0)
    r = oai.responses.create(**kw)
    assert r.id.startswith("resp_") and r.object == "response"
    assert r.output_text == ref.choices[0].message.content
    assert r.usage.input_tokens == ref.usage.prompt_tokens and r.usage.output_tokens == ref.usage.completion_tokens
    cut = ref.choices[0].finish_reason == "length"
    assert r.status == ("incomplete" if cut else "completed")
    if cut:
        assert r.incomplete_details.reason == "max_output_tokens"
    if cut:  # the client's stream helper waits for response.completed only; the API ends this one otherwise
        events = list(oai.responses.create(stream=True, **kw))
        final = events[-1].response
    else:
        with oai.responses.stream(**kw) as s:
            events = list(s)
            final = s.get_final_response()
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].type == "response.created"
    assert events[-1].type == ("response.incomplete" if cut else "response.completed")
    assert final.output_text == r.output_text and final.usage.output_tokens == r.usage.output_tokens


def test_responses_message_items(oai):
    """input as items with content parts, developer and assistant turns: chat's answer on the same turns."""
    items = [{"role": "developer", "content": SYSTEM},
             {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Capital of Italy?"}]},
             {"role": "assistant", "content": [{"type": "output_text", "text": "Rome."}]},
             {"role": "user", "content": QUESTION}]
    r = oai.responses.create(model=MODEL, input=items, temperature=0, max_output_tokens=30)
    ref = chat(oai, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Capital of Italy?"},
                     {"role": "assistant", "content": "Rome."}, {"role": "user", "content": QUESTION}], max_tokens=30)
    assert r.output_text == ref.choices[0].message.content
    assert r.usage.input_tokens == ref.usage.prompt_tokens


WEATHER_RSP = {"type": "function", "name": "get_weather", "description": "Get the current weather for a city",
               "parameters": WEATHER_SCHEMA}
ASK_RSP = [{"role": "user", "content": "Weather in London?"},
           {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "London"}'},
           {"type": "function_call_output", "call_id": "call_1", "output": "12 C, rain"},
           {"role": "user", "content": "Weather in Paris?"}]


@pytest.mark.parametrize("stream", [False, True])
def test_responses_function_calls(oai, stream):
    """function_call items: after a history of one call the model calls again (test_tools.py's ASK),
    a function_call output item with the arguments; streamed, the same item. With the call's
    function_call_output too, the prompt is chat's for the same history."""
    kw = dict(model=MODEL, instructions="Always answer with a tool call.", tools=[WEATHER_RSP], temperature=0,
              max_output_tokens=60)
    ask = ASK_RSP[:2] + ASK_RSP[3:]
    if stream:
        with oai.responses.stream(input=ask, **kw) as s:
            r = s.get_final_response()
    else:
        r = oai.responses.create(input=ask, **kw)
    ref = chat(oai, ASK_CHAT[:3] + ASK_CHAT[4:], tools=[WEATHER_CHAT], max_tokens=60)
    assert r.usage.input_tokens == ref.usage.prompt_tokens
    calls = [o for o in r.output if o.type == "function_call"]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("get_weather", {"city": "Paris"})]
    assert calls[0].call_id.startswith("call_") and calls[0].id.startswith("fc_")
    with_result = oai.responses.create(input=ASK_RSP, **kw)
    ref = chat(oai, ASK_CHAT, tools=[WEATHER_CHAT], max_tokens=60)
    assert with_result.usage.input_tokens == ref.usage.prompt_tokens
    assert with_result.output_text == (ref.choices[0].message.content or "")


def test_responses_previous_response_id_continues_the_conversation(server, oai):
    """A continuation is the chat of the whole history (without the first request's instructions);
    the stored object comes back from GET and goes with DELETE; the store keeps only the newest
    --responses-store responses; store=false keeps nothing."""
    first = oai.responses.create(model=MODEL, instructions=SYSTEM, input="Capital of Italy?", temperature=0,
                                 max_output_tokens=20)
    second = oai.responses.create(model=MODEL, previous_response_id=first.id, input=QUESTION, temperature=0,
                                  max_output_tokens=20)
    ref = chat(oai, [{"role": "user", "content": "Capital of Italy?"},
                     {"role": "assistant", "content": first.output_text},
                     {"role": "user", "content": QUESTION}], max_tokens=20)
    assert second.output_text == ref.choices[0].message.content
    assert second.usage.input_tokens == ref.usage.prompt_tokens
    assert second.previous_response_id == first.id

    got = oai.responses.retrieve(second.id)
    assert got.id == second.id and got.output_text == second.output_text
    assert oai.responses.delete(second.id) is None
    with pytest.raises(openai.NotFoundError):
        oai.responses.retrieve(second.id)
    with pytest.raises(openai.BadRequestError) as gone:
        oai.responses.create(model=MODEL, previous_response_id=second.id, input="x", max_output_tokens=1)
    assert gone.value.body["param"] == "previous_response_id"

    unstored = oai.responses.create(model=MODEL, input="Hi", store=False, max_output_tokens=2)
    with pytest.raises(openai.NotFoundError):
        oai.responses.retrieve(unstored.id)
    # four newer responses push the first out of a store of four
    for _ in range(4):
        oai.responses.create(model=MODEL, input="Hi", max_output_tokens=1)
    with pytest.raises(openai.NotFoundError):
        oai.responses.retrieve(first.id)


def test_responses_json_schema_output(oai):
    """text.format json_schema: decoding follows the schema, so the output parses and validates."""
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
              "required": ["city", "country"], "additionalProperties": False}
    r = oai.responses.create(model=MODEL, input="Name a capital city as JSON.", max_output_tokens=120, temperature=0,
                             text={"format": {"type": "json_schema", "name": "place", "schema": schema, "strict": True}})
    assert r.status == "completed"
    jsonschema.validate(json.loads(r.output_text), schema)
    assert r.text.format.type == "json_schema"


BAD_RESPONSES = [
    ({"input": None}, "input"),
    ({"input": []}, "input"),
    ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
    ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0].type"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input[0].content.0"),
    ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input[0].call_id"),
    ({"input": [{"role": "user", "content": "a\u0000b"}]}, "input[0]"),
    ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"tools": [{"type": "function"}]}, "tools[0].name"),
    ({"tool_choice": {"type": "file_search"}}, "tool_choice"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
    ({"text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object", "patternProperties": {}}}}},
     "text.format"),
    ({"reasoning": {"effort": "high"}}, "reasoning"),
    ({"truncation": "auto"}, "truncation"),
    ({"previous_response_id": "resp_unknown"}, "previous_response_id"),
    ({"n": 2}, "n"),
]


@pytest.mark.parametrize("extra,param", BAD_RESPONSES, ids=[f"{p}-{i}" for i, (_, p) in enumerate(BAD_RESPONSES)])
def test_responses_bad_requests_are_400_naming_the_field(server, extra, param):
    body = {"model": MODEL, "input": "Hi", "max_output_tokens": 5}
    body.update(extra)
    body = {k: v for k, v in body.items() if v is not None}
    r = requests.post(server.url + "/v1/responses", json=body, timeout=30 * SLOW)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == param, err
