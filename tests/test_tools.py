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

import jsonschema
import openai
import pytest
import requests

from conftest import ROOT, SAN, run
from modelbuild import serving_binary, smollm2_gguf
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
    return serving_binary(request)


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
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"type": "string", "description": "nul \u0000 here"}}}}}]},
     "tools[0].function.parameters"),
    ({"messages": [{"role": "assistant", "tool_calls": [dict(call(1, "P"), function={"name": "f", "arguments": "{\"a\": \"\\u0000\"}"})]}]},
     "messages[0].tool_calls[0].function.arguments"),
]


@pytest.mark.parametrize("extra,param", BAD_TOOLS, ids=[p + f"-{i}" for i, (_, p) in enumerate(BAD_TOOLS)])
def test_bad_tools_are_400_naming_the_field(server, extra, param):
    expect_400(server, base(**extra), param)


TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The current time in a timezone",
    "parameters": {"type": "object", "additionalProperties": False, "required": ["tz", "hours24"],
                   "properties": {"tz": {"type": "string", "enum": ["UTC", "CET", "PST"]},
                                  "hours24": {"type": "boolean"},
                                  "offset": {"type": "integer", "minimum": 0}}}}}
USER = [{"role": "user", "content": "What is the weather in Paris?"}]


def check_calls(calls, tools):
    """Every call names one of the tools and its arguments are valid under that tool's schema."""
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    for name, args in calls:
        assert name in schemas, name
        jsonschema.validate(json.loads(args), schemas[name])


@pytest.mark.parametrize("stream", [False, True])
def test_required_calls_a_tool(client, stream):
    """tool_choice "required": decoding follows the call grammar, so even the 135M model calls a tool
    with arguments its schema accepts, sampling or not; the loop then goes on with the result."""
    for temperature, seed in [(0, None)] + ([] if stream else [(1.0, 1)]):
        kw = dict(messages=USER, tools=[WEATHER, TIME], tool_choice="required", temperature=temperature, seed=seed,
                  max_tokens=120)
        if stream:
            content, calls, finish = streamed(client, **kw)
            calls = [(c["name"], c["arguments"]) for c in calls]
        else:
            r = client.chat.completions.create(model=MODEL, **kw)
            content, finish = r.choices[0].message.content, r.choices[0].finish_reason
            calls = [(t.function.name, t.function.arguments) for t in r.choices[0].message.tool_calls or []]
        assert calls and not content and finish in ("tool_calls", "length"), (content, calls, finish)
        check_calls(calls, [WEATHER, TIME])
    if not stream:  # each choice has its own matcher and parser
        two = client.chat.completions.create(model=MODEL, messages=USER, tools=[WEATHER, TIME], n=2, seed=5,
                                             tool_choice="required", temperature=1.0, max_tokens=120)
        for ch in two.choices:
            assert ch.message.tool_calls and not ch.message.content
            check_calls([(t.function.name, t.function.arguments) for t in ch.message.tool_calls], [WEATHER, TIME])
    one = client.chat.completions.create(model=MODEL, messages=USER, tools=[WEATHER, TIME], tool_choice="required",
                                         parallel_tool_calls=False, temperature=0, max_tokens=120)
    assert len(one.choices[0].message.tool_calls) == 1 and one.choices[0].finish_reason == "tool_calls"
    tc = one.choices[0].message.tool_calls[0]
    history = USER + [one.choices[0].message.model_dump(exclude_none=True),
                      {"role": "tool", "tool_call_id": tc.id, "content": "18 degrees, cloudy"}]
    final = client.chat.completions.create(model=MODEL, messages=history, tools=[WEATHER, TIME], temperature=0,
                                           max_tokens=30, tool_choice="none")
    assert final.choices[0].message.content and final.choices[0].message.tool_calls is None


def test_named_function_is_called_once(client):
    """A named function: exactly one call of it, whatever the question, its schema obeyed (an enum,
    booleans, required members, no others) at temperature 1 over two seeds."""
    for seed in range(2):
        r = client.chat.completions.create(model=MODEL, messages=USER, tools=[WEATHER, TIME], temperature=1.0,
                                           seed=seed, max_tokens=80,
                                           tool_choice={"type": "function", "function": {"name": "get_time"}})
        (tc,) = r.choices[0].message.tool_calls
        assert tc.function.name == "get_time" and r.choices[0].finish_reason == "tool_calls"
        assert r.choices[0].message.content is None
        check_calls([(tc.function.name, tc.function.arguments)], [TIME])
    # cut short inside the call: no call, and no markup as content
    for stream in (False, True):
        kw = dict(messages=USER, tools=[WEATHER, TIME], temperature=0, max_tokens=6,
                  tool_choice={"type": "function", "function": {"name": "get_time"}})
        if stream:
            assert streamed(client, **kw) == ("", [], "length")
        else:
            r = client.chat.completions.create(model=MODEL, **kw)
            assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 6
            assert r.choices[0].message.content in (None, "") and not r.choices[0].message.tool_calls


def test_constrained_tool_choice_errors(server):
    bad_schema = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"n": {"type": "integer", "oneOf": [{"minimum": 3}]}}}}}
    err = expect_400(server, base(tools=[WEATHER, bad_schema], tool_choice="required"), "tools[1].function.parameters")
    assert "oneOf" in err["message"]
    # the same tool is fine where it need not be constrained, and when another one is named
    assert requests.post(server.url + CHAT, json=base(tools=[WEATHER, bad_schema]), timeout=60 * SLOW).status_code == 200
    named = {"type": "function", "function": {"name": "get_weather"}}
    assert requests.post(server.url + CHAT, json=base(tools=[WEATHER, bad_schema], tool_choice=named),
                         timeout=60 * SLOW).status_code == 200
    expect_400(server, base(tools=[WEATHER], tool_choice="required", response_format={"type": "json_object"}),
               "tool_choice")


# ---- templates that render tools themselves ---------------------------------------------------------

FIX = ROOT / "tests" / "fixtures" / "chat_templates"
# (fixture, the format its model writes): the model's own template on SmolLM2's weights
NATIVE = [("qwen25", "hermes"), pytest.param("llama31", "llama3_json", marks=pytest.mark.full),
          pytest.param("mistral_nemo", "mistral", marks=pytest.mark.full),
          pytest.param("hermes2pro_tools", "hermes", marks=pytest.mark.full)]


def with_template(gguf, template, dst):
    """A copy of the GGUF whose tokenizer.chat_template is the fixture's text."""
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "gguf.scripts.gguf_new_metadata", str(gguf), str(dst),
                        "--chat-template", template, "--force"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return dst


def server_form(messages):
    """The messages as the server hands them to a template: a null content is "", arguments an object."""
    out = []
    for m in messages:
        m = json.loads(json.dumps(m))
        if m.get("content") is None:
            m["content"] = ""
        for c in m.get("tool_calls", []):
            c["function"]["arguments"] = json.loads(c["function"]["arguments"])
        out.append(m)
    return out


@pytest.mark.parametrize("fixture,fmt", NATIVE)
def test_native_template_prompt_is_jinja2s(binary, tmp_path, fixture, fmt):
    """A template that renders tools gets them in Hugging Face's context: the prompt the server builds
    for a conversation with tools, calls and results is exactly jinja2's rendering (checked through
    /v1/completions on that text: the same prompt length and the same greedy tokens and logprobs)."""
    from test_jinja import reference_env
    template = (FIX / f"{fixture}.jinja").read_text("utf-8")
    gguf = with_template(smollm2_gguf(), template, tmp_path / f"{fixture}.gguf")
    ids = ["a1b2c3d4e", "f5g6h7i8j"]  # Mistral's templates take 9 alphanumerics only
    calls = [dict(call(1, "London"), id=ids[0]), dict(call(2, "Oslo"), id=ids[1])]
    if fixture == "llama31":
        calls = calls[:1]  # its template raises on more than one call per turn
    messages = [{"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Weather in London and Oslo?"},
                {"role": "assistant", "content": None, "tool_calls": calls}]
    messages += [{"role": "tool", "tool_call_id": c["id"], "content": '{"temp_c": %d}' % (12 - 9 * i)}
                 for i, c in enumerate(calls)]
    messages += [{"role": "assistant", "content": "London 12, Oslo 3."}, {"role": "user", "content": "And Paris?"}]
    search = {"type": "function", "function": {"name": "search", "description": "Search the <web> & 'news'",
                                               "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}
    tools = [WEATHER, search]
    ctx = {"messages": server_form(messages), "tools": tools, "documents": None, "add_generation_prompt": True,
           "bos_token": "<|im_start|>", "eos_token": "<|im_end|>"}
    text = reference_env(True).from_string(template).render(**ctx)
    # control-token spellings in the rendering become control tokens on both paths
    with ServerProc(binary, "--weights", gguf, "--kv-blocks", "128", "--parse-special-in-content") as srv:
        model = requests.get(srv.url + "/v1/models", timeout=10).json()["data"][0]
        assert model["tool_call_format"] == fmt and model["tool_prompt"] == "template"
        c = openai.OpenAI(base_url=srv.base_url, api_key="unused", max_retries=0, timeout=120 * SLOW)
        chat = c.chat.completions.create(model=MODEL, messages=messages, tools=tools, temperature=0, max_tokens=8,
                                         logprobs=True)
        comp = c.completions.create(model=MODEL, prompt=text, temperature=0, max_tokens=8, logprobs=1)
        assert srv.stop() == 0
    assert_same_prompt(chat, comp)


def assert_same_prompt(chat, comp):
    """A chat request and a completions request of its rendered text saw the same prompt: the same
    length, and the same greedy tokens with the same logprobs."""
    assert chat.usage.prompt_tokens == comp.usage.prompt_tokens
    got = [(t.token, round(t.logprob, 4)) for t in chat.choices[0].logprobs.content]
    want = list(zip(comp.choices[0].logprobs.tokens, [round(x, 4) for x in comp.choices[0].logprobs.token_logprobs]))
    assert got == want


def hermes_prompt_form(messages, tools):
    """What tool_prompt.h documents, written again here: the tools in the system message, calls as
    <tool_call> markup in the assistant's content, each run of tool results as one user turn."""
    head = ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
            "You are provided with function signatures within <tools></tools> XML tags:\n<tools>")
    tail = ("\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
            "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
            "<args-json-object>}\n</tool_call>")
    compact = dict(separators=(",", ":"), ensure_ascii=False)
    out, rest = [], list(messages)
    system = ""
    if rest and rest[0]["role"] == "system":
        system = rest.pop(0)["content"] + "\n\n"
    out.append({"role": "system", "content": system + head + "".join("\n" + json.dumps(t, **compact)
                                                                    for t in tools) + tail})
    while rest:
        m = rest.pop(0)
        if m["role"] == "tool":
            results = [m] + [rest.pop(0) for _ in range(len(rest)) if rest and rest[0]["role"] == "tool"]
            out.append({"role": "user", "content": "\n".join(f"<tool_response>\n{r['content']}\n</tool_response>"
                                                             for r in results)})
        elif m.get("tool_calls"):
            parts = [m["content"]] if m.get("content") else []
            for c in m["tool_calls"]:
                call_json = json.dumps({"name": c["function"]["name"],
                                        "arguments": json.loads(c["function"]["arguments"])}, **compact)
                parts.append(f"<tool_call>\n{call_json}\n</tool_call>")
            out.append({"role": "assistant", "content": "\n".join(parts)})
        else:
            out.append(m)
    return out


def test_server_tool_prompt_is_as_documented(binary):
    """SmolLM2's template has no tools: the prompt is SmolLM2's own template (jinja2) over the messages
    rewritten as tool_prompt.h says, to the token (checked through /v1/completions, as above)."""
    from test_jinja import reference_env
    template = (FIX / "smollm2.jinja").read_text("utf-8")
    messages = ASK + [{"role": "assistant", "content": "Checking.", "tool_calls": [call(2, "Paris"), call(3, "Nice")]},
                      {"role": "tool", "tool_call_id": "call_2", "content": "sunny"},
                      {"role": "tool", "tool_call_id": "call_3", "content": "windy"},
                      {"role": "user", "content": "Thanks!"}]
    ctx = {"messages": hermes_prompt_form(messages, [WEATHER]), "tools": None, "documents": None,
           "add_generation_prompt": True, "bos_token": "<|im_start|>", "eos_token": "<|im_end|>"}
    text = reference_env(True).from_string(template).render(**ctx)
    with ServerProc(binary, "--kv-blocks", "128", "--parse-special-in-content") as srv:
        c = openai.OpenAI(base_url=srv.base_url, api_key="unused", max_retries=0, timeout=120 * SLOW)
        chat = c.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER], temperature=0,
                                         max_tokens=8, logprobs=True)
        comp = c.completions.create(model=MODEL, prompt=text, temperature=0, max_tokens=8, logprobs=1)
        assert srv.stop() == 0
    assert_same_prompt(chat, comp)


@pytest.mark.full
@pytest.mark.parametrize("fixture", ["llama31", "mistral_nemo"])
def test_required_in_other_formats(binary, tmp_path, fixture):
    """tool_choice "required" with a Llama 3.1 or Mistral template on SmolLM2's weights: the grammar
    writes that format's markup, the parser reads it back (Mistral ids: 9 alphanumerics)."""
    gguf = with_template(smollm2_gguf(), (FIX / f"{fixture}.jinja").read_text("utf-8"), tmp_path / "t.gguf")
    with ServerProc(binary, "--weights", gguf, "--kv-blocks", "128") as srv:
        c = openai.OpenAI(base_url=srv.base_url, api_key="unused", max_retries=0, timeout=120 * SLOW)
        for stream in (False, True):
            kw = dict(messages=USER, tools=[WEATHER, TIME], tool_choice="required", temperature=0, max_tokens=100)
            if stream:
                content, calls, finish = streamed(c, **kw)
                ids = [x["id"] for x in calls]
                calls = [(x["name"], x["arguments"]) for x in calls]
            else:
                r = c.chat.completions.create(model=MODEL, **kw)
                content, finish = r.choices[0].message.content, r.choices[0].finish_reason
                ids = [t.id for t in r.choices[0].message.tool_calls or []]
                calls = [(t.function.name, t.function.arguments) for t in r.choices[0].message.tool_calls or []]
            assert calls and not content and finish in ("tool_calls", "length"), (content, calls, finish)
            check_calls(calls, [WEATHER, TIME])
            if fixture == "mistral_nemo":
                assert all(len(i) == 9 and i.isalnum() for i in ids), ids
        assert srv.stop() == 0


def test_control_spellings_in_tools_stay_text(binary, tmp_path):
    """With a template that renders tools, a tool description or a past call's argument that spells a
    control token stays text, as contents do: the prompt is longer than where those spellings are parsed
    as control tokens (--parse-special-in-content), and without such spellings both are the same."""
    gguf = with_template(smollm2_gguf(), (FIX / "qwen25.jinja").read_text("utf-8"), tmp_path / "q.gguf")
    spelled = {"type": "function", "function": {"name": "search", "description": "Search <|im_end|> the web",
                                                "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}
    history = [{"role": "user", "content": "hi"},
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "c1", "type": "function",
                    "function": {"name": "search", "arguments": json.dumps({"q": "x <|im_start|>system"})}}]},
               {"role": "tool", "tool_call_id": "c1", "content": "ok"}]
    plain_tool = json.loads(json.dumps(spelled).replace("<|im_end|>", "im end"))
    plain_history = json.loads(json.dumps(history).replace("<|im_start|>", "im start"))
    counts = {}
    for flag in ((), ("--parse-special-in-content",)):
        with ServerProc(binary, "--weights", gguf, "--kv-blocks", "64", *flag) as srv:
            c = openai.OpenAI(base_url=srv.base_url, api_key="unused", max_retries=0, timeout=120 * SLOW)
            counts[flag] = [c.chat.completions.create(model=MODEL, messages=m, tools=[t], max_tokens=1)
                            .usage.prompt_tokens for m, t in [(history, plain_tool), (plain_history, spelled),
                                                              (plain_history, plain_tool)]]
            assert srv.stop() == 0
    default, special = counts[()], counts[("--parse-special-in-content",)]
    assert default[0] > special[0] and default[1] > special[1], (default, special)
    assert default[2] == special[2]
