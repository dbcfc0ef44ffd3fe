"""Chat template interpreter: ingot-jinja against Python jinja2 set up as Hugging Face renders chat templates.

Every template in tests/fixtures/chat_templates/ is rendered with every conversation of
conversations.json by both; outputs must be byte-identical, and where jinja2 raises through
raise_exception() the C side must fail with the same message. Also: one-line errors with line
numbers for malformed templates, and bounded work/recursion/output for hostile ones.
"""
import datetime
import json
import random
import re

import jinja2
import jinja2.ext
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from conftest import ROOT, run

FIX = ROOT / "tests" / "fixtures" / "chat_templates"
TEMPLATES = sorted(FIX.glob("*.jinja"))
CONVERSATIONS = json.loads((FIX / "conversations.json").read_text("utf-8"))
SPECIAL = {"bos_token": "<s>", "eos_token": "</s>"}


class Raised(jinja2.exceptions.TemplateError):
    """What the template's own raise_exception() throws (HF raises TemplateError(message))."""


def reference_env(hf=True):
    """jinja2 configured like transformers' chat template rendering (hf=False: jinja2's defaults)."""
    env = ImmutableSandboxedEnvironment(trim_blocks=hf, lstrip_blocks=hf, extensions=[jinja2.ext.loopcontrols])

    def raise_exception(message):
        raise Raised(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        # transformers' override: no HTML escaping, key order kept, non-ASCII kept
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime.now().strftime(fmt)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


ENVS = {True: reference_env(True), False: reference_env(False)}


def reference(text, ctx, hf=True):
    """('ok', output) | ('raise', message) | ('undefined', message) | ('error', message)."""
    try:
        return "ok", ENVS[hf].from_string(text).render(**ctx)
    except Raised as e:
        return "raise", e.message
    except jinja2.exceptions.UndefinedError as e:
        return "undefined", str(e)
    except Exception as e:  # noqa: BLE001 - any other jinja2/Python error: the C side must fail too
        return "error", f"{type(e).__name__}: {e}"


def tool(built):
    return built / "tools" / "ingot-jinja"


def no_sanitizer_report(err):
    assert "runtime error:" not in err and "Sanitizer" not in err and "LeakSanitizer" not in err, err


def render_c(built, tmp_path, template_path, ctx, hf=True, extra=()):
    cpath = tmp_path / "ctx.json"
    cpath.write_text(json.dumps(ctx, ensure_ascii=False), "utf-8")
    flags = ["--trim-blocks", "--lstrip-blocks"] if hf else []
    r = run([tool(built), *flags, *extra, template_path, cpath], text=False)
    err = r.stderr.decode("utf-8", "replace")
    no_sanitizer_report(err)
    if r.returncode == 0:
        assert not err, err
        return "ok", r.stdout.decode("utf-8")
    assert r.returncode == 1, f"exit {r.returncode}: {err}"
    lines = err.rstrip("\n").split("\n")
    assert len(lines) == 1, f"error is not one line: {err!r}"
    if lines[0].startswith("raise_exception: "):
        return "raise", lines[0][len("raise_exception: "):]
    return "error", lines[0]


def context(conv):
    ctx = dict(SPECIAL)
    ctx.update({k: v for k, v in conv.items() if k != "name"})
    return ctx


def compare(ref, got):
    """None when the C result matches jinja2's, else a description of the difference."""
    if ref[0] == "undefined":
        # jinja2 raises on attributes of undefined values; ingot is deliberately lenient there
        return None if got[0] in ("ok", "error") else f"jinja2 undefined error, C {got}"
    if ref[0] == "error":
        return None if got[0] == "error" else f"jinja2 failed ({ref[1]}), C gave {got[0]}: {got[1][:200]!r}"
    if ref != got:
        if ref[0] == got[0] == "ok":
            a, b = ref[1], got[1]
            i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
            lo = max(0, i - 60)
            return f"differ at {i}:\n  jinja2 {a[lo:i + 60]!r}\n       C {b[lo:i + 60]!r}"
        return f"jinja2 {ref[0]}: {ref[1][:300]!r}\n     C {got[0]}: {got[1][:300]!r}"
    return None


STATS = {}


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.stem)
def test_template_matches_jinja2(built, tmp_path, template):
    text = template.read_text("utf-8")
    failures, identical, raised = [], 0, 0
    for conv in CONVERSATIONS:
        ctx = context(conv)
        ref = reference(text, ctx)
        got = render_c(built, tmp_path, template, ctx)
        diff = compare(ref, got)
        if diff:
            failures.append(f"{conv['name']}: {diff}")
            if len(failures) >= 3:
                break
        elif ref[0] == "ok":
            identical += 1
        elif ref[0] == "raise":
            raised += 1
    STATS[template.stem] = (identical, raised)
    print(f"{template.stem}: {identical} identical renderings, {raised} identical raise_exception errors")
    assert not failures, "\n".join(failures)
    assert identical > 0


def test_enough_templates_and_conversations():
    assert len(TEMPLATES) >= 13
    assert len(CONVERSATIONS) >= 24
    assert (FIX / "smollm2.jinja").exists()


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.stem)
def test_jinja2_default_whitespace(built, tmp_path, template):
    """With trim_blocks/lstrip_blocks off (jinja2's defaults) the output still matches."""
    text = template.read_text("utf-8")
    for conv in CONVERSATIONS[:6] + [c for c in CONVERSATIONS if c["name"].startswith("tools")]:
        ctx = context(conv)
        diff = compare(reference(text, ctx, hf=False), render_c(built, tmp_path, template, ctx, hf=False))
        assert diff is None, f"{conv['name']}: {diff}"


INLINE = [
    # whitespace control corner cases
    "a  {%- if true %} b {% endif -%}  c\n  {% if true %}\n  x\n  {% endif %}\n{{- ' y ' -}}\n z",
    "  {# comment #}\n  {%+ if true %}k{% endif %}\n\t{% for i in [1] %}\n{{ i }}\n{% endfor %}",
    "{% raw %}{{ keep }}{% endraw %}\r\nline2\rline3\n",
    # expressions
    "{{ 1 + 2 * 3 - 4 / 2 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 'a' ~ 1 ~ none ~ true }} {{ 7 // -2 }}",
    "{{ 1 if false }}|{{ 'y' if 1 > 2 else 'n' }}|{{ not 1 == 2 }}|{{ 1 < 2 < 3 }}|{{ [1] + [2] }}|{{ 'ab' * 3 }}",
    "{{ 'a' 'b' }} {{ \"\\u00e9\\x41\\101\\n\" }} {{ '\\d' }} {{ 1_000 }} {{ 0.5e1 }} {{ {'a': 1}['a'] }} {{ [1, 2][-1] }}",
    "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = (1,) %}{{ t }}{{ () }}{% set x %}cap {{ a }}{% endset %}[{{ x }}]",
    "{% set x | upper %}shout{% endset %}{{ x }} {% filter upper %}loud {{ 'x' }}{% endfilter %}",
    "{% for x in [] %}no{% else %}empty{% endfor %} {% for x in none | default([]) %}{% endfor %}ok",
    "{% set ns = namespace(n=0, items=[]) %}{% for i in range(5) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}",
    "{{ range(3) | list }} {{ range(1, 10, 4) | list }} {{ range(5, 0, -2) | list }} {{ namespace(a=1).a }} {{ dict(a=1) }}",
    "{{ 'abc' | first }}{{ 'abc' | last }} {{ [] | first }} {{ 'AbC' | lower }} {{ 'x' | center if false else 'c' }}",
    "{{ [{'a': 2}, {'a': 1}] | sort(attribute='a') | map(attribute='a') | list }} {{ ['b', 'a'] | sort | join }}",
    "{{ {'b': 1, 'a': 2} | dictsort }} {{ {'b': 1, 'a': 2} | dictsort(by='value', reverse=true) }}",
    "{{ 'Ünïcode ÉTÉ straße' | upper }} {{ 'ÀÉÎ' | lower }} {{ 'élan vital' | capitalize }} {{ 'ǆemal' | title }}",
    "{{ 1.5 | round }} {{ 0.5 | round }} {{ -1.5 | round }} {{ 1234.5678 | round(-2) }} {{ 1 / 7 }} {{ 2.0 ** 0.5 }} {{ 1e-5 }} {{ 123456789.0 * 1000000000 }}",
    "{{ 5 | float }} {{ 'nan' | float }} {{ '1e3' | float }} {{ ' 12 ' | int }} {{ '0x1f' | int(base=16) }} {{ true | int }}",
    "{{ {'a': [1, {'b': none}], 'c': 'é\"\\\\'} | tojson(indent=1) }} {{ 1.0 | tojson }} {{ [1, 'a'] | tojson(separators=(',', ':')) }}",
    "{{ 'x' is defined }} {{ y is defined }} {{ y.z is defined }} {{ y | length }} {{ y | list }} [{{ y }}] {{ y ~ 'k' }}",
    "{% macro m() %}{{ x }}{% endmacro %}{% set x = 'late' %}{{ m() }}",
    "{% for i in range(2) %}{{ loop.index }}{% for j in range(2) %}{{ loop.index }}{% endfor %}{{ loop.index }}{% endfor %}",
    "{% set x = 1 %}{% for i in range(2) %}{{ x }}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}",
    "{{ 'a\\nb\\r\\nc\\x0bd' .splitlines() }} {{ 'Hello'.startswith('He') }} {{ 'abc'.count('') }} {{ 'aaa'.replace('a', 'b', 2) }}",
    "{{ [1, 2, 3] | join(', ') }} {{ [1, 2] | reverse | list }} {{ [1, 1, 'A', 'a'] | unique | list }} {{ {'a': 1}.items() | list }}",
    "{{ strftime_now('%Y') | length }} {{ 'ok' if strftime_now('%d') | int > 0 }}",
    # markupsafe: safe/escape make Markup, and Markup + str escapes the str (functionary's template relies on it)
    "{{ 'a<'|safe + '<b>' }} {{ '<x>' + '&'|safe }} {{ ('<'|e) is escaped }} {{ '<'|e|e }} {{ '<'|forceescape|forceescape }}"
    " {{ 'x' is escaped }} {{ '<'|safe ~ '<' }} {{ ('<'|safe + '>' + '&') }} {{ 5|safe + '<' }}",
    # an unknown filter or test inside {% if %} fails only when evaluated (jinja2's soft frames); elsewhere at once
    "{% if false %}{{ x | from_json }}{% elif false %}{{ y is nosuchtest }}{% else %}ok{% endif %}",
    "{% if true %}{{ '{}' | from_json }}{% endif %}",
    "{% if x is nosuchtest %}a{% endif %}",
    "{% if false %}{% for i in [1] %}{{ i | nosuch }}{% endfor %}{% endif %}",
    "{% if false %}{% set y %}{{ 1 | nosuch }}{% endset %}{% endif %}ok",
]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("idx", range(len(INLINE)))
@pytest.mark.parametrize("hf", [True, False], ids=["hf", "plain"])
def test_inline_expressions(built, tmp_path, idx, hf):
    tpath = tmp_path / "t.jinja"
    tpath.write_bytes(INLINE[idx].encode("utf-8"))
    ctx = dict(SPECIAL, messages=[])
    diff = compare(reference(INLINE[idx], ctx, hf), render_c(built, tmp_path, tpath, ctx, hf))
    assert diff is None, diff


BAD = [
    ("line1\n{% if x %}\nunclosed", r"^template:\d+: unexpected end of template: 'if' block opened on line 2"),
    ("{% for m in messages %}\n{% endif %}", r"^template:2: unexpected 'endif'"),
    ("a\nb\n{{ 1 + }}", r"^template:3: unexpected '}}', expected an expression"),
    ("x\n{{ messages | foo }}", r"^template:2: unknown filter 'foo'$"),
    ("{{ x is frobbed }}", r"^template:1: unknown test 'frobbed'"),
    ("\n\n{{ 'unterminated }}", r"^template:3: unterminated string literal"),
    ("{{ x", r"^template:1: unexpected end of template"),
    ("{% frobnicate %}", r"^template:1: unknown tag 'frobnicate'"),
    ("{% include 'x' %}", r"^template:1: unsupported tag 'include'"),
    ("{% break %}", r"^template:1: 'break' outside of a loop"),
    ("{# never closed", r"^template:1: unexpected end of template: comment never closed"),
    ("{% endfor %}", r"^template:1: unexpected 'endfor' with no open block"),
    ("{{ a b }}", r"^template:1: unexpected 'b', expected '}}'"),
    ("{{ [1, 2 }}", r"^template:1: "),
    ("{{ 'a' | }}", r"^template:1: "),
    ("{% set %}", r"^template:1: "),
    ("{% macro %}{% endmacro %}", r"^template:1: "),
    ("{{ 99999999999999999999999 }}", r"^template:1: integer literal too large"),
    ("{{ '\\xZZ' }}", r"^template:1: invalid \\x escape"),
    ("{{ @ }}", r"^template:1: unexpected char '@'"),
    ("\n{% if true %}{% else %}{% else %}{% endif %}", r"^template:2: unexpected 'else'"),
    # runtime errors carry the line too
    ("\n\n{{ 1 / 0 }}", r"^template:3: division by zero"),
    ("{{ 'a' + 1 }}", r"^template:1: unsupported operand"),
    ("{{ [].append(1) }}", r"^template:1: access to attribute 'append' of 'list' object is unsafe"),
    ("{% set x = 1 %}{% set x.y = 2 %}", r"^template:1: cannot assign attribute on non-namespace object"),
    ("{{ 1 < 'a' }}", r"^template:1: '<' not supported between instances of 'int' and 'str'"),
    ("{{ none | length }}", r"^template:1: object of type 'NoneType' has no len\(\)"),
    ("{{ undefined_fn() }}", r"^template:1: 'Undefined' object is not callable"),
    ("{{ {} | tojson if false else x | tojson }}", r"Object of type Undefined is not JSON serializable"),
]


@pytest.mark.parametrize("src,pattern", BAD, ids=[str(i) for i in range(len(BAD))])
def test_error_messages(built, tmp_path, src, pattern):
    tpath = tmp_path / "bad.jinja"
    tpath.write_text(src, "utf-8")
    kind, msg = render_c(built, tmp_path, tpath, dict(SPECIAL, messages=[]))
    assert kind == "error", (kind, msg)
    assert re.search(pattern, msg), msg


def test_raise_exception_message(built, tmp_path):
    tpath = tmp_path / "r.jinja"
    tpath.write_text("ok {{ raise_exception('Roles must alternate: ' ~ messages | length) }}", "utf-8")
    assert render_c(built, tmp_path, tpath, {"messages": [1, 2]}) == ("raise", "Roles must alternate: 2")


HOSTILE = [
    ("{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}", "nesting too deep"),
    ("{{ " + "[" * 5000 + "]" * 5000 + " }}", "nesting too deep"),
    ("{{ " + "not " * 5000 + "1 }}", "nesting too deep"),
    ("{{ x" + "|upper" * 50000 + " }}", None),
    ("{% if true %}" * 3000 + "x" + "{% endif %}" * 3000, "nesting too deep"),
    ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "recursion too deep"),
    ("{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}", "steps"),
    ("{{ range(1000000000) | length }}", "Range too big"),
    ("{{ 'x' * 1000000000000 }}", "too large"),
    ("{% set ns = namespace(s='xxxxxxxx') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}", "(exceeds|memory)"),
    ("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}", "nested too deeply"),
    ("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns | tojson }}", "not JSON serializable"),
    ("{{ 2 ** 64 }}", "integer overflow"),
    ("{{ 9223372036854775807 + 1 }}", "integer overflow"),
    ("{{ -9223372036854775807 - 1 }}{{ (-9223372036854775807 - 1) // -1 }}", "integer overflow"),
]


@pytest.mark.parametrize("src,pattern", HOSTILE, ids=[str(i) for i in range(len(HOSTILE))])
def test_hostile_templates_are_bounded(built, tmp_path, src, pattern):
    tpath = tmp_path / "h.jinja"
    tpath.write_text(src, "utf-8")
    cpath = tmp_path / "c.json"
    cpath.write_text('{"messages": []}', "utf-8")
    r = run([tool(built), tpath, cpath], text=False, timeout=120)
    err = r.stderr.decode("utf-8", "replace")
    no_sanitizer_report(err)
    assert r.returncode in (0, 1), err
    if pattern:
        assert r.returncode == 1 and re.search(pattern, err), err
        assert err.count("\n") == 1, err


def test_fuzzed_templates_never_crash(built, tmp_path):
    """Random edits of the fixtures: every run ends in output or a one-line error (never a signal)."""
    rng = random.Random(1234)
    pieces = ["{%", "%}", "{{", "}}", "{#", "#}", "-", "(", ")", "[", "]", "'", '"', "|", ".", ",", "endfor", "if", " ", "\n",
              "loop", "::", "**", "~", "\\"]
    cpath = tmp_path / "c.json"
    cpath.write_text(json.dumps(context(CONVERSATIONS[3])), "utf-8")
    tpath = tmp_path / "f.jinja"
    for template in TEMPLATES:
        src = template.read_text("utf-8")
        for _ in range(8):
            s = src
            for _ in range(rng.randint(1, 4)):
                i = rng.randrange(len(s) + 1)
                op = rng.random()
                if op < 0.4:
                    s = s[:i] + s[i + rng.randint(1, 8):]
                elif op < 0.8:
                    s = s[:i] + rng.choice(pieces) + s[i:]
                else:
                    j = rng.randrange(len(s) + 1)
                    s = s[:i] + s[j:j + 20] + s[i:]
            tpath.write_text(s, "utf-8")
            r = run([tool(built), "--trim-blocks", "--lstrip-blocks", tpath, cpath], text=False)
            err = r.stderr.decode("utf-8", "replace")
            no_sanitizer_report(err)
            assert r.returncode in (0, 1), f"{template.stem}: exit {r.returncode}: {err}\n--- template:\n{s}"
            if r.returncode == 1:
                assert err.count("\n") == 1, err


def test_binary_garbage_never_crashes(built, tmp_path):
    rng = random.Random(99)
    cpath = tmp_path / "c.json"
    cpath.write_text('{"messages": [{"role": "user", "content": "x"}]}', "utf-8")
    tpath = tmp_path / "g.jinja"
    for _ in range(40):
        data = bytes(rng.choice(b"{}%#-+'\"|()[].,:~ \n\t\\abcxyz019\x00\xff\xc3\xa9") for _ in range(rng.randint(1, 300)))
        tpath.write_bytes(data)
        r = run([tool(built), tpath, cpath], text=False)
        no_sanitizer_report(r.stderr.decode("utf-8", "replace"))
        assert r.returncode in (0, 1), r.stderr
