"""One binary for any x86-64: ./ingot build --isa all compiles the model once per level
(build/flags.mk: avx512 = x86-64-v4 + AVX-512 VNNI, avx2 = x86-64-v3, portable = baseline x86-64,
whose kernels are kernels/cpu's plain C) and a launcher (templates/cpu/isa_launcher.c) execs the
best level the CPU runs; INGOT_ISA forces one, so every path runs on this machine.

Each level against transformers (the Qwen2 GGUF of tests/fixtures/gguf_families: f32 weights and
KV cache, bound 1e-4 as test_gguf_families), in prefill and decode; the portable binary holds no
AVX instruction at all (objdump: no ymm/zmm register) and the avx2 one no AVX-512 (no zmm), so
they run where those are missing. A level this CPU lacks or does not know is refused in one line,
never a SIGILL."""
import json
import subprocess

import numpy as np
import pytest

import modelbuild
from conftest import BREADTH, ROOT, SAN, run

pytestmark = pytest.mark.skipif(SAN, reason="three optimized builds of the runtime: the optimized pass runs them")

FIX = ROOT / "tests" / "fixtures" / "gguf_families" / "qwen2"
LEVELS = ("avx512", "avx2", "portable")


def cpu_runs(level):
    """Whether this CPU has a level's instructions, from /proc/cpuinfo's flags (the launcher asks
    CPUID through __builtin_cpu_supports: the same bits)."""
    flags = next((set(line.split(":", 1)[1].split()) for line in open("/proc/cpuinfo") if line.startswith("flags")),
                 set())
    need = {"avx512": {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd", "avx512_vnni", "avx2", "fma"},
            "avx2": {"avx2", "fma", "f16c", "bmi2", "movbe"}}.get(level, set())
    return need <= flags


@pytest.fixture(scope="module")
def multi(built):
    return modelbuild.build(FIX / "model.f32.gguf", "isa-qwen2", "--isa", "all")


def reference():
    ref = json.loads((FIX / "reference.json").read_text())
    return ref["tokens"], np.fromfile(FIX / ref["logits"]["transformers"], dtype="<f4").reshape(ref["shape"])


@pytest.mark.parametrize("level", LEVELS)
def test_every_level_matches_transformers(multi, level, tmp_path, monkeypatch):
    monkeypatch.setenv("INGOT_ISA", level)
    if not cpu_runs(level):
        r = run([multi, "--info"])
        assert r.returncode == 1 and f"INGOT_ISA={level}: this CPU does not run that level" in r.stderr, r.stderr
        return
    info = run([multi, "--info"])
    assert info.returncode == 0 and f"isa:             {level}, forced by INGOT_ISA" in info.stdout, info.stdout
    tokens, expected = reference()
    for mode in ((), ("--decode",)):
        got = modelbuild.logits(multi, tokens, *mode, tmp_path=tmp_path)
        err = float(np.abs(got - expected).max())
        assert err <= 1e-4, f"{level} {mode}: max |ingot - transformers| = {err:.3g}"


def test_launcher_picks_the_best_level(multi, monkeypatch):
    monkeypatch.delenv("INGOT_ISA", raising=False)
    best = next(level for level in LEVELS if cpu_runs(level))
    r = run([multi, "--info"])
    assert f"isa:             {best}, the best level this CPU runs" in r.stdout, r.stdout
    # a native build says so too
    native = run([modelbuild.build(FIX / "model.f32.gguf", "gg-qwen2"), "--info"]).stdout
    assert "isa:             native (-march=native: this machine's)" in native, native


def test_unknown_level_is_refused(multi, monkeypatch):
    monkeypatch.setenv("INGOT_ISA", "sse9")
    r = run([multi, "generate", "-p", "x", "-n", "1"])
    assert r.returncode == 1
    assert r.stderr.strip() == "isa-qwen2: INGOT_ISA=sse9: not a level of this build (avx512,avx2,portable)", r.stderr


@pytest.mark.parametrize("level,forbidden", [("portable", ("ymm", "zmm")), ("avx2", ("zmm",))])
def test_lower_levels_hold_no_wider_instructions(multi, level, forbidden):
    dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", f"{multi}.{level}"], capture_output=True, text=True,
                         timeout=300)
    assert dis.returncode == 0, dis.stderr
    for reg in forbidden:
        n = dis.stdout.count(f"%{reg}")
        assert n == 0, f"{level}: {n} instructions use {reg} registers"
    wider = "avx512" if level == "avx2" else "avx2"
    dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", f"{multi}.{wider}"], capture_output=True, text=True,
                         timeout=300)
    assert dis.stdout.count("%" + ("zmm" if wider == "avx512" else "ymm")) > 0, "the wider level uses its registers"


@BREADTH
def test_int8_activations_on_every_level(built, tmp_path, monkeypatch):
    """--act-quant q8: the VNNI, AVX2 and plain-C integer dot products give the same logits (the
    integer sums are exact; only the order of the f32 block sums differs)."""
    binary = modelbuild.build(FIX / "model.q8_0.gguf", "isa-qwen2-a8", "--isa", "all", "--act-quant", "q8")
    tokens, _ = reference()
    got = {}
    for level in LEVELS:
        if cpu_runs(level):
            monkeypatch.setenv("INGOT_ISA", level)
            got[level] = modelbuild.logits(binary, tokens, tmp_path=tmp_path)
    assert "portable" in got
    for level, logits in got.items():
        assert float(np.abs(logits - got["portable"]).max()) <= 1e-4, level
