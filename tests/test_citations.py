"""Generated code cites models.lua truly.

Every weight and op of a generated model carries a `models.lua:LINE`
citation (statement comments, kernel line ranges, the banner, the weight
table's `line` field). For one checkpoint of every models.lua entry, on the
CPU backend and the CUDA backend (fused and --no-fuse), each cited line must
lie in the entry that produced the file or in a top-level definition that
entry uses (a shared table such as LLAMA_WEIGHTS, a shared function such as
lm_head, another entry whose `layer` it borrows), and must say what the
citation says: a statement comment's text is the cited line's, a weight's
line declares that weight (`v = {...}`) with the stored tensor's name.

Only the generator runs (plus ingot-inspect for the checkpoint headers): no C
is compiled, so the whole file takes a few seconds.

The regions are found here from the text of models.lua, independently of the
generator's own source scan: a top-level definition starts at column 0
(`local NAME =`, `local function NAME`, `M.NAME =`) and runs to the next one.
"""
import json
import re
import subprocess

import pytest

from conftest import OBJDIR, ROOT, make
from modelbuild import FIXTURES

MODELS_LUA = ROOT / "models.lua"
GENERATOR = ROOT / "generator" / "main.lua"
SMOLLM2 = ROOT / "models" / "smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
VARIANTS = {"cpu": [], "cuda": ["--backend", "cuda"], "cuda-nofuse": ["--backend", "cuda", "--no-fuse"]}

DEF = re.compile(r"^(?:local\s+function\s+(\w+)|local\s+(\w+)\s*=[^=]|(\w+(?:\.\w+)+)\s*=[^=]|(return)\b)")
CITE = re.compile(r"models\.lua:(\d+)(?:-(\d+))?")
STATEMENT = re.compile(r"/\* models\.lua:(\d+)  (.*?) \*/")
BANNER = re.compile(r"models\.lua entry '(\w+)' \(models\.lua:(\d+)\)")
# {"tensor", tied, n_dims, {shape}, first_row, stored_rows, stacked, n_parts, part_heads, {parts}, DTYPE, same_as,
#  LINE}, /* slot: logical ... */
WEIGHT_ROW = re.compile(r'^\s*\{"([^"]*)", (?:NULL|"[^"]*"), .*, (\d+)\}, /\* \d+: (\w+)')


def description():
    """(lines of models.lua, {definition: (first, last)}, {entry: entry's definition name})."""
    lines = MODELS_LUA.read_text().split("\n")
    starts = []
    for i, text in enumerate(lines, 1):
        m = DEF.match(text)
        if m:
            starts.append((next(g for g in m.groups() if g), i))
    spans = {}
    for j, (name, first) in enumerate(starts):
        last = starts[j + 1][1] - 1 if j + 1 < len(starts) else len(lines)
        # a definition ends at its last line of code, not at the comments of the next one
        while last > first and (not lines[last - 1].strip() or lines[last - 1].lstrip().startswith("--")):
            last -= 1
        spans[name] = (first, last)
    entries = {name.split(".", 1)[1]: name for name in spans if name.startswith("M.")}
    return lines, spans, entries


def code_of(text):
    """Lua text without comments and string literals (for finding the names it uses)."""
    text = re.sub(r"--.*", "", text)
    return re.sub(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'', '""', text)


def regions(entry):
    """Line ranges an entry's citations may point into: its own definition and,
    transitively, every top-level definition its code names."""
    lines, spans, entries = description()
    todo, seen = [entries[entry]], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        first, last = spans[name]
        code = code_of("\n".join(lines[first - 1:last]))
        for other in spans:
            if other not in seen and other != "return" and re.search(r"(?<![\w.])" + re.escape(other) + r"\b", code):
                todo.append(other)
    return sorted(spans[n] for n in seen)


def entry_architectures():
    """{entry: the config.json architectures its `hf = {...}` names}."""
    lines, spans, entries = description()
    out = {}
    for entry, name in entries.items():
        first, last = spans[name]
        for text in lines[first - 1:last]:
            m = re.match(r'\s*hf\s*=\s*\{([^}]*)\}', text)
            if m:
                out[entry] = set(re.findall(r'"([^"]+)"', m.group(1)))
                break
    return out


def fixture_for(entry):
    """The first tiny checkpoint under tests/fixtures whose architecture the entry describes."""
    archs = entry_architectures()[entry]
    for folder in sorted(FIXTURES.glob("families/*")) + sorted(FIXTURES.glob("tiny/*")):
        cfg = folder / "config.json"
        if cfg.exists() and archs & set(json.loads(cfg.read_text()).get("architectures", [])):
            return folder
    return None


ENTRIES = sorted(description()[2])
CASES = [pytest.param(e, id=e) for e in ENTRIES]
CASES.append(pytest.param("llama", id="llama-smollm2-gguf",
                          marks=pytest.mark.skipif(not SMOLLM2.exists(), reason="scripts/fetch_smollm2.sh not run")))


@pytest.fixture(scope="module")
def inspect_tool():
    make("tools")
    return OBJDIR / "tools" / "ingot-inspect"


def generate(model, variant, out, inspect_tool):
    """Runs the generator as ./ingot build does; returns the generated files {name: text}."""
    info = out / "inspect.json"
    r = subprocess.run([str(inspect_tool), str(model)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    info.write_text(r.stdout)
    cmd = ["lua5.4", str(GENERATOR), "--inspect", str(info), "--source", str(model), "--name", "citations",
           "--out", str(out / "gen"), *VARIANTS[variant]]
    if model.is_dir():
        cmd += ["--hf-config", str(model / "config.json")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stderr}"
    return {p.name: p.read_text() for p in sorted((out / "gen").iterdir())}


def c_string(text):
    """The content of a line of an embedded source (kernel_sources.h: "...\\n")."""
    m = re.fullmatch(r'\s*"(.*)\\n"\s*', text)
    if not m:
        return text
    return re.sub(r"\\(.)", lambda e: {"n": "\n", "t": "\t"}.get(e.group(1), e.group(1)), m.group(1))


def declares(text, weight, tensor):
    """Whether a models.lua line declares `weight` with a stored name that gives `tensor`."""
    if not re.search(r"(?<![\w.])" + re.escape(weight) + r"\s*=\s*\{", text):
        return False
    for pattern in re.findall(r'"([^"]*)"', text):
        if re.fullmatch(re.escape(pattern).replace("%d", r"\d+"), tensor):
            return True
    return False


def test_every_entry_has_a_fixture():
    missing = [e for e in ENTRIES if fixture_for(e) is None]
    assert not missing, f"no checkpoint under tests/fixtures for models.lua entries {missing}"
    assert {"llama", "qwen2", "qwen3", "gemma2", "phi3", "mixtral"} <= set(ENTRIES)


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("entry", CASES)
def test_citations_point_into_the_entry(entry, variant, request, tmp_path, inspect_tool):
    model = SMOLLM2 if request.node.callspec.id.startswith("llama-smollm2") else fixture_for(entry)
    if model is None:
        pytest.fail(f"no fixture for entry {entry}")
    files = generate(model, variant, tmp_path, inspect_tool)
    lines = description()[0]
    allowed = regions(entry)
    entry_first = description()[1][description()[2][entry]][0]

    def inside(n):
        return any(a <= n <= b for a, b in allowed)

    def line(n):
        return lines[n - 1] if 1 <= n <= len(lines) else ""

    bad = []
    counts = {"cites": 0, "statements": 0, "weights": 0}
    for fname, text in files.items():
        for i, raw in enumerate(text.split("\n"), 1):
            where = f"{fname}:{i}"
            src = c_string(raw)
            m = BANNER.search(src)
            if m:
                if m.group(1) != entry or int(m.group(2)) != entry_first:
                    bad.append(f"{where}: banner cites entry {m.group(1)} at line {m.group(2)}, "
                               f"expected {entry} at {entry_first}")
            for m in CITE.finditer(src):
                counts["cites"] += 1
                for n in filter(None, m.groups()):
                    if not inside(int(n)):
                        bad.append(f"{where}: models.lua:{n} is outside entry '{entry}' and the tables it uses: "
                                   f"{line(int(n)).strip()!r}")
            for m in STATEMENT.finditer(src):
                counts["statements"] += 1
                want = line(int(m.group(1))).strip().replace("*/", "* /")
                if m.group(2) != want:
                    bad.append(f"{where}: models.lua:{m.group(1)} quoted as {m.group(2)!r}, the line is {want!r}")
            m = WEIGHT_ROW.match(raw)
            if m:
                counts["weights"] += 1
                tensor, n, weight = m.group(1), int(m.group(2)), m.group(3)
                if not inside(n):
                    bad.append(f"{where}: weight '{weight}' cites models.lua:{n}, outside entry '{entry}' "
                               f"and its tables: {line(n).strip()!r}")
                elif not declares(line(n), weight, tensor):
                    bad.append(f"{where}: weight '{weight}' ({tensor}) cites models.lua:{n}, "
                               f"which does not declare it: {line(n).strip()!r}")
    assert counts["cites"] > 0 and counts["statements"] > 0 and counts["weights"] > 0, counts
    assert not bad, f"{len(bad)} wrong citation(s) for {model.name} ({variant}):\n" + "\n".join(bad[:40])


def describe_lines(models_lua):
    """What the generator's describe module says each key's line is: {entry: {kind: {key: line}}}."""
    script = f"""
package.path = {json.dumps(str(ROOT / "generator") + "/?.lua;")} .. package.path
local describe = require("describe")
local cjson = require("cjson")
local d = describe.load({json.dumps(str(models_lua))})
local out = {{}}
for name, l in pairs(d.lines) do out[name] = {{weights = l.weights, config = l.config, entry = l.entry}} end
print(cjson.encode(out))
"""
    r = subprocess.run(["lua5.4", "-e", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("entry", ENTRIES)
def test_config_and_weight_keys_cite_their_declaration(entry):
    """The lines error messages use: every config key and weight of an entry
    is cited where its `key = {` is written, inside the entry or a table it uses."""
    lines, spans, entries = description()
    allowed = regions(entry)
    got = describe_lines(MODELS_LUA)[entry]
    assert got["entry"] == spans[entries[entry]][0]
    bad = []
    for kind in ("weights", "config"):
        for key, n in sorted(got[kind].items()):
            text = lines[n - 1]
            if not any(a <= n <= b for a, b in allowed):
                bad.append(f"{kind} '{key}': models.lua:{n} is outside entry '{entry}': {text.strip()!r}")
            elif not re.search(r"(?<![\w.])" + re.escape(key) + r"\s*=\s*\{", text):
                bad.append(f"{kind} '{key}': models.lua:{n} does not declare it: {text.strip()!r}")
    assert not bad, "\n".join(bad)


def test_error_cites_the_shared_table(tmp_path):
    """A broken key of a shared table is reported at that table's line, for
    every entry that merges it in (when a checkpoint of that entry is cast:
    the other entries still build)."""
    text = MODELS_LUA.read_text()
    broken = re.sub(r'(\n\s*v\s*=\s*\{hf = "model\.layers\.%d\.self_attn\.v_proj\.weight",)', r"\1 typo = 1,", text,
                    count=1)
    assert broken != text, "LLAMA_WEIGHTS' v line not found in models.lua"
    bad_line = broken[:broken.index("typo = 1")].count("\n") + 1
    path = tmp_path / "models.lua"
    path.write_text(broken)
    def select(arch):
        return subprocess.run(["lua5.4", "-e", f"""
package.path = {json.dumps(str(ROOT / "generator") + "/?.lua;")} .. package.path
local describe = require("describe")
describe.select(describe.load({json.dumps(str(path))}), {{"{arch}"}})"""], capture_output=True, text=True, timeout=60)
    for arch in ("LlamaForCausalLM", "Qwen2ForCausalLM", "StableLmForCausalLM"):  # each merges LLAMA_WEIGHTS
        r = select(arch)
        assert r.returncode != 0, arch
        assert f"models.lua:{bad_line}: error: weight 'v': unknown key 'typo'" in r.stderr, r.stderr
    r = select("GPTNeoXForCausalLM")  # its own weights: unaffected
    assert r.returncode == 0, r.stderr
