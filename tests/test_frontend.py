"""The ./ingot front end: run, serve, list, help and the build cache.

On a copy of the real SmolLM2 GGUF (models/smollm2/, scripts/fetch_smollm2.sh):
`ingot run` builds once and then execs the cached binary, and rebuilds when an
input changes (the checkpoint's mtime, a build option); `ingot serve` answers
over a real socket; `ingot list` shows the build; every command has --help
and a mistake on the command line is one line and exit status 2.

Whether a call built or used the cache is read from INGOT_PROGRESS=1's step
lines ("ingot: compiling ...", "ingot: cached: ...") and from the binary's
and manifest's bytes and mtimes, never from timings. Builds are named fe-*.

The sources are part of the inputs key, so an edit of runtime/ or generator/
between two runs (another process working in the same tree) rebuilds, as it
should: a run expected to be cached that rebuilt anyway is accepted only if
its manifest shows the sources changed, and the pair of runs is repeated.
"""
import json
import os
import re
import shutil
import subprocess
import urllib.request

import pytest

from conftest import ROOT, SAN
from modelbuild import smollm2_gguf
from serverproc import ServerProc

INGOT = ROOT / "ingot"
# one build per pytest-xdist worker: tests on different workers never share a
# binary, its manifest or the model copy whose mtime they change
NAME = "fe-smollm2" + (f"-{os.environ['PYTEST_XDIST_WORKER']}" if os.environ.get("PYTEST_XDIST_WORKER") else "")
PROMPT = "The capital of France is"
COMMANDS = ["build", "run", "serve", "list", "check", "help"]
BUILD_OPTIONS = ["--name", "--dtype", "--backend", "--cudasim", "--no-fuse", "--act-quant", "--max-tokens", "--san",
                 "--allow-unused"]


def ingot(*args, progress=None, timeout=600):
    env = dict(os.environ)
    env.pop("INGOT_PROGRESS", None)
    if progress is not None:
        env["INGOT_PROGRESS"] = progress
    return subprocess.run([str(INGOT), *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env)


def own_lines(stderr):
    """The front end's own lines on stderr (the binary's are its name's or prefill/decode)."""
    return [line for line in stderr.splitlines() if line.startswith("ingot:")]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A private copy of the SmolLM2 GGUF: its mtime may be changed freely."""
    copy = tmp_path_factory.mktemp("frontend") / "smollm2.gguf"
    shutil.copyfile(smollm2_gguf(), copy)
    return copy


@pytest.fixture(scope="module")
def build_opts():
    return ["--name", NAME] + (["--san"] if SAN else [])


def binary():
    return ROOT / "build" / NAME / (NAME + ("-san" if SAN else ""))


def manifest():
    return binary().with_name(binary().name + ".manifest.json")


@pytest.fixture(scope="module")
def fresh(model):
    """No build of NAME yet: the first ingot run must build."""
    shutil.rmtree(ROOT / "build" / NAME, ignore_errors=True)
    return model


def generate(model, build_opts, *extra, progress="1"):
    r = ingot("run", model, *build_opts, *extra, "-p", PROMPT, "-n", 4, progress=progress)
    assert r.returncode == 0, r.stderr
    return r


def built(r):
    return any(line.startswith("ingot: compiling") for line in own_lines(r.stderr))


def cached(r):
    return any(line.startswith("ingot: cached:") for line in own_lines(r.stderr))


def snapshot():
    return binary().stat().st_mtime_ns, manifest().read_bytes()


def recorded():
    return json.loads(manifest().read_text())


def building_line(r):
    """The front end's "ingot: building ... (why)" line."""
    return next((line for line in own_lines(r.stderr) if line.startswith("ingot: building build/")), "")


def expect_cached(model, build_opts, *extra):
    """Two more runs with the same inputs: the second one execs the cached
    binary and rewrites nothing. Returns that run."""
    for _ in range(5):
        generate(model, build_opts, *extra)
        before, keys = snapshot(), recorded()
        r = generate(model, build_opts, *extra)
        if cached(r):
            assert not built(r), r.stderr
            assert snapshot() == before, "a cached run rewrote the binary or its manifest"
            return r
        assert built(r), r.stderr
        now = recorded()
        assert now["sources_key"] != keys["sources_key"], f"rebuilt with unchanged inputs:\n{r.stderr}"
        assert (now["options_key"], now["checkpoint_key"]) == (keys["options_key"], keys["checkpoint_key"]), r.stderr
    pytest.fail("the sources changed between every pair of runs")


def test_run_builds_once_then_uses_the_cache(fresh, build_opts):
    shutil.rmtree(ROOT / "build" / NAME, ignore_errors=True)  # whatever ran before on this worker
    first = generate(fresh, build_opts)
    assert built(first) and not cached(first), first.stderr
    assert "no binary yet" in building_line(first), first.stderr
    assert "Paris" in first.stdout, first.stdout
    assert binary().exists() and manifest().exists()
    info = recorded()
    assert info["model"] == str(fresh) and info["arch"] == "llama" and info["backend"] == "cpu"
    assert info["fused"] is True and info["max_tokens"] == 512

    again = expect_cached(fresh, build_opts)
    assert again.stdout == first.stdout

    # a prompt that spells a build option is the binary's text, not an option
    r = ingot("run", fresh, *build_opts, "-p", "--no-fuse", "-n", 1, progress="1")
    assert r.returncode == 0, r.stderr
    assert recorded()["options_key"] == info["options_key"] and recorded()["fused"] is True
    assert not (ROOT / "build" / (NAME + "-nofuse")).exists()


def test_run_is_quiet_when_not_on_a_terminal(fresh, build_opts):
    r = generate(fresh, build_opts, progress=None)
    assert own_lines(r.stderr) == [], r.stderr
    assert "Paris" in r.stdout


def test_a_changed_checkpoint_rebuilds(fresh, build_opts):
    generate(fresh, build_opts)
    keys = recorded()
    st = fresh.stat()
    os.utime(fresh, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    r = generate(fresh, build_opts)
    assert built(r) and not cached(r), r.stderr
    assert "checkpoint" in building_line(r) and "build options" not in building_line(r), r.stderr
    assert any(line.startswith("ingot: generating") for line in own_lines(r.stderr))
    assert "Paris" in r.stdout
    assert recorded()["checkpoint_key"] != keys["checkpoint_key"]
    assert recorded()["options_key"] == keys["options_key"]
    expect_cached(fresh, build_opts)


def test_a_changed_build_option_rebuilds(fresh, build_opts):
    generate(fresh, build_opts)
    r = generate(fresh, build_opts, "--max-tokens", 64)
    assert built(r) and "build options" in building_line(r), r.stderr
    assert recorded()["max_tokens"] == 64
    r = generate(fresh, build_opts)
    assert built(r) and "build options" in building_line(r), r.stderr
    assert recorded()["max_tokens"] == 512
    expect_cached(fresh, build_opts)


def test_serve_answers_models(fresh, build_opts):
    with ServerProc(INGOT, command=["serve", fresh, *build_opts], env={"INGOT_PROGRESS": "0"}) as srv:
        with urllib.request.urlopen(srv.url + "/v1/models", timeout=30) as resp:
            body = json.loads(resp.read())
        assert [m["id"] for m in body["data"]] == [NAME]
    assert srv.proc.returncode == 0, srv.log
    assert binary().exists()


def test_list_shows_the_build(fresh, build_opts):
    generate(fresh, build_opts)
    r = ingot("list")
    assert r.returncode == 0, r.stderr
    header, *rows = r.stdout.splitlines()
    assert header.split() == ["NAME", "ARCH", "BACKEND", "FUSED", "WEIGHTS", "SIZE", "MODEL"]
    row = next((line for line in rows if line.split()[0] == binary().name), None)
    assert row, r.stdout
    size_mb = binary().stat().st_size / 1e6
    assert re.search(r"\bllama\s+cpu\s+yes\s+f32 \(\d+\), q4_1 \(\d+\), q8_0 \(\d+\)\s+" + f"{size_mb:.1f} MB", row), row
    assert row.endswith(str(fresh)), row


@pytest.mark.parametrize("cmd", COMMANDS)
def test_every_command_has_help(cmd):
    for args in ([cmd, "--help"], [cmd, "-h"], ["help", cmd]):
        r = ingot(*args)
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith(f"usage: ingot {cmd}"), r.stdout
    text = ingot(cmd, "--help").stdout
    if cmd in ("build", "run", "serve"):
        for opt in BUILD_OPTIONS:
            assert opt in text, f"ingot {cmd} --help does not mention {opt}"
    if cmd == "run":
        assert "-p TEXT" in text
    if cmd == "serve":
        assert "--port" in text


def test_top_level_help():
    for args in (["--help"], ["-h"], ["help"]):
        r = ingot(*args)
        assert r.returncode == 0 and r.stdout.startswith("usage: ingot COMMAND"), r.stdout
        for cmd in COMMANDS:
            assert re.search(rf"^\s+{cmd}\b", r.stdout, re.M), f"{cmd} missing from ingot {' '.join(args)}"


@pytest.mark.parametrize("args, words", [
    ([], ["command"]),
    (["frobnicate"], ["unknown command 'frobnicate'"]),
    (["--frobnicate"], ["unknown option '--frobnicate'"]),
    (["help", "frobnicate"], ["unknown command 'frobnicate'"]),
    (["list", "--all"], ["ingot list", "unknown option '--all'"]),
    (["build"], ["ingot build", "MODEL"]),
    (["run", "--name", "x"], ["ingot run", "MODEL"]),
    (["build", "MODEL_PATH", "--frobnicate"], ["ingot build", "unknown option '--frobnicate'"]),
    (["build", "MODEL_PATH", "--dtype"], ["--dtype needs a value"]),
    (["run", "MODEL_PATH", "--dtype", "q3"], ["unknown --dtype 'q3'"]),
    (["serve", "MODEL_PATH", "--backend", "tpu"], ["unknown --backend 'tpu'"]),
    (["run", "MODEL_PATH", "--max-tokens", "0"], ["--max-tokens"]),
    (["run", "MODEL_PATH", "--cudasim"], ["--cudasim needs --backend cuda"]),
    (["build", "MODEL_PATH", "--backend", "cuda", "--cuda-arch", "75"], ["--cuda-arch", "not '75'"]),
    (["build", "MODEL_PATH", "--backend", "cuda", "--cuda-arch", "90,"], ["--cuda-arch", "not '90,'"]),
    (["build", "MODEL_PATH", "--cuda-arch", "90"], ["--cuda-arch is a CUDA option"]),
])
def test_command_line_mistakes_are_one_line_and_exit_2(args, words, tmp_path):
    fake = tmp_path / "model.gguf"
    fake.write_bytes(b"")
    r = ingot(*[str(fake) if a == "MODEL_PATH" else a for a in args])
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ingot"), r.stderr
    for w in words:
        assert w in lines[0], lines[0]


def test_a_missing_model_is_an_error(tmp_path):
    r = ingot("run", tmp_path / "absent.gguf", "-p", "x")
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [f"ingot: {tmp_path / 'absent.gguf'}: no such file or folder"]


def test_two_front_ends_building_one_name_take_turns(model):
    """Two `ingot run` of one new name at once: one builds, the other waits on build/NAME/.lock and
    then runs the binary the first one built (it never builds over it or runs half of it)."""
    name = NAME + "-lock"
    opts = ["--name", name] + (["--san"] if SAN else [])
    env = dict(os.environ, INGOT_PROGRESS="1")
    for _ in range(3):
        shutil.rmtree(ROOT / "build" / name, ignore_errors=True)
        runs = [subprocess.Popen([str(INGOT), "run", str(model), *opts, "-p", PROMPT, "-n", "4"], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        outs = [p.communicate(timeout=600) for p in runs]
        for p, (out, err) in zip(runs, outs):
            assert p.returncode == 0, err
            assert "Paris" in out, out
        builders = [err for _, err in outs if any(line.startswith("ingot: compiling") for line in own_lines(err))]
        waiters = [err for _, err in outs if any(line.startswith("ingot: cached:") for line in own_lines(err))]
        if len(builders) == 1 and len(waiters) == 1:
            return
        # both built: the sources changed between them (another process at work in the tree)
        assert len(builders) == 2, outs
    pytest.fail("the sources changed during every pair of builds")


def test_a_relative_model_path_is_the_same_build(fresh, build_opts):
    """MODEL given relative to the working directory ("./x.gguf", "d/../x.gguf") is the same
    checkpoint as its absolute path: the same manifest, and no rebuild for the spelling."""
    generate(fresh, build_opts)
    (fresh.parent / "d").mkdir(exist_ok=True)
    env = dict(os.environ, INGOT_PROGRESS="1")
    for spelling in ("./" + fresh.name, "d/../" + fresh.name):
        r = subprocess.run([str(INGOT), "run", spelling, *build_opts, "-p", PROMPT, "-n", "2"], cwd=fresh.parent,
                           env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        assert recorded()["model"] == str(fresh), recorded()["model"]
        if not cached(r):  # another process changed the sources meanwhile: the build says so
            assert "sources" in building_line(r) and "build options" not in building_line(r), r.stderr
