"""The chat page `serve` answers at / (runtime/serve/web/chat.html), in headless Chromium (Debian's
chromium and chromium-driver, driven over WebDriver by tests/webdriver.py) against a real server on
SmolLM2-135M-Instruct: a prompt typed and sent streams an answer equal to the API's greedy answer
to the same messages; Stop ends a generation (the server counts it cancelled); the console shows no
error; --no-web-page turns the page off.
"""
import json

import openai
import pytest
import requests

from conftest import SAN
from modelbuild import serving_binary
from serverproc import ServerProc
from webdriver import Browser

MODEL = "smollm2"
SLOW = 8 if SAN else 1


@pytest.fixture(scope="module")
def server(request):
    srv = ServerProc(serving_binary(request), "--kv-blocks", "128").start()
    yield srv
    assert srv.stop() == 0 and not srv.sanitizer_report(), srv.log


@pytest.fixture(scope="module")
def browser(server):
    with Browser(timeout=120 * SLOW) as b:
        b.get(server.url + "/")
        assert b.wait_for("return document.querySelector('#model').value") == MODEL
        yield b


def set_field(b, css, value):
    el = b.find(css)
    el.clear()
    el.send_keys(str(value))


def last_reply(b):
    """The last conversation's messages as the page stored them."""
    return b.run("return JSON.parse(localStorage.getItem('ingot.conversations'))[0].messages")


def cancelled(server):
    """Generation requests whose client went away before the end (the Stop button aborts the fetch)."""
    text = requests.get(server.url + "/metrics", timeout=10).text
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith("ingot_client_disconnects_total"))


def test_page_is_served_with_its_headers(server):
    r = requests.get(server.url + "/", timeout=10)
    assert r.status_code == 200 and r.headers["Content-Type"] == "text/html; charset=utf-8"
    assert "connect-src 'self'" in r.headers["Content-Security-Policy"] and "<title>ingot</title>" in r.text


def test_typed_prompt_streams_the_apis_greedy_answer(server, browser):
    b = browser
    set_field(b, "#temperature", 0)
    set_field(b, "#max_tokens", 40)
    question = "What is the capital of France?"
    b.find("#prompt").send_keys(question + "\n")  # Enter sends
    b.wait_for("return document.querySelector('#stop').disabled === false || "
               "document.querySelector('.msg.assistant[data-done]')")
    b.wait_for("return document.querySelector('.msg.assistant[data-done]')", timeout=120 * SLOW)
    shown = b.run("return document.querySelector('.msg.assistant[data-done] .body').innerText")
    api = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": question}], temperature=0, max_tokens=40)
    want = api.choices[0].message.content
    messages = last_reply(b)
    assert messages == [{"role": "user", "content": question}, {"role": "assistant", "content": want}]
    assert shown.strip() == want.strip()
    assert b.run("return document.querySelector('#send').disabled") is False


def test_stop_ends_the_generation(server, browser):
    b = browser
    b.find("#new").click()
    set_field(b, "#temperature", 0.8)
    set_field(b, "#max_tokens", 2000)
    before = cancelled(server)
    b.find("#prompt").send_keys("Write a very long story about a dragon who learns to sing.\n")
    # the answer streams in: some words arrive before it can be stopped
    b.wait_for("const n = document.querySelector('#streaming .body'); return n && n.innerText.split(' ').length > 5",
               timeout=120 * SLOW)
    b.find("#stop").click()
    b.wait_for("return document.querySelector('.msg.assistant[data-done]')", timeout=30 * SLOW)
    assert b.run("return document.querySelector('#stop').disabled") is True
    partial = last_reply(b)[-1]
    assert partial["role"] == "assistant" and len(partial["content"].split()) > 5
    # the server cancelled the sequence when the page dropped the stream
    seen = False
    for _ in range(200):
        if cancelled(server) > before:
            seen = True
            break
        b.run("return 1")
    assert seen, "the server did not count the stopped request as a disconnect"


def test_markdown_is_rendered_as_escaped_html(browser):
    """Code blocks, lists and inline code become elements; markup in the text stays text."""
    html = browser.run("return markdown(arguments[0])", "Try:\n\n- `a`\n- **b**\n\n```py\nprint('<b>')\n```\n<img src=x>")
    assert "<ul><li><code>a</code></li><li><strong>b</strong></li></ul>" in html
    assert "<pre><code>print(&#39;&lt;b&gt;&#39;)\n</code></pre>" in html
    assert "&lt;img src=x&gt;" in html and "<img" not in html


def test_no_console_errors(browser):
    errors = [e for e in browser.console() if e["level"] in ("SEVERE", "ERROR")]
    assert not errors, json.dumps(errors, indent=1)


def test_no_web_page_turns_it_off(request):
    with ServerProc(serving_binary(request), "--kv-blocks", "16", "--no-web-page") as srv:
        r = requests.get(srv.url + "/", timeout=10)
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
