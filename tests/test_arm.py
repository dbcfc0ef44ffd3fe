"""64-bit ARM: ./ingot build --target aarch64-linux cross-compiles with Debian's gcc-aarch64-linux-gnu
(build/flags.mk), and the binaries run here under qemu-user (scripts/setup.sh --cross registers it
with the kernel). QEMU_CPU picks the emulated CPU and so the level the launcher chooses
(templates/cpu/isa_launcher.c): cortex-a53 has Armv8-A NEON alone (armv8: kc_neon.h's widening dot
products), neoverse-n1 has sdot (dotprod), max has sdot and smmla (i8mm: the dotprod kernels
compiled for Armv8.6-A, kernels/cpu/README says why).

- SmolLM2 (the real model, Q4_1: kc_x16.h's NEON kernels): the three levels' logits are the same
  bits (the same integers, the same float steps), within 1e-3 of the largest logit of the x86-64
  build's (the two take the same integers but differ in the float order of their reductions:
  norms, softmax and attention in 4 lanes here, 16 there; through 30 layers that moves logits of
  up to 31 by 0.009, as much as x86-64's own AVX-512 and portable builds differ, 0.011), and
  greedy decoding gives the x86-64 build's tokens; `serve` answers a chat request with them under
  emulation.
- A Q4_K_M llama whose rows are whole super-blocks (kc_x16s.h and kc_x16k.h's 4-lane body) within
  the same bound of the x86-64 build's logits, the levels identical.
- Each family's f32 GGUF (tests/fixtures/gguf_families) against transformers within 1e-4 in
  prefill and decode, as test_gguf_families on x86-64 (the default tier: a family of each layer
  kind; every family at full breadth).
No sanitizer build is made for another architecture (the optimized pass runs these)."""
import collections
import json
import os
import shutil
import subprocess
import urllib.request

import numpy as np
import pytest

import modelbuild
from conftest import BREADTH, ROOT, SAN, run
from serverproc import ServerProc

pytestmark = pytest.mark.skipif(SAN, reason="cross builds have no sanitizer build: the optimized pass runs them")

LEVELS = {"armv8": "cortex-a53", "dotprod": "neoverse-n1", "i8mm": "max"}
FAMILIES = ROOT / "tests" / "fixtures" / "gguf_families"
PRESETS = ROOT / "tests" / "fixtures" / "gguf_presets"
PROMPT = [1, 504, 3458, 282, 4649, 314, 253, 1345, 30, 378]


@pytest.fixture(scope="module")
def cross(built):
    """scripts/setup.sh --cross has run (scripts/test.sh runs it): the compiler and an emulator the
    kernel hands ARM binaries to. Missing, the tests fail: they do not skip."""
    assert shutil.which("aarch64-linux-gnu-gcc"), "no aarch64-linux-gnu-gcc: run scripts/setup.sh --cross"
    status = "/proc/sys/fs/binfmt_misc/qemu-aarch64"
    assert os.path.exists(status) and open(status).readline().strip() == "enabled", \
        "qemu-aarch64 is not registered with the kernel: run scripts/setup.sh --cross"


def arm_build(model, name, *options):
    return modelbuild.build(model, name, "--target", "aarch64-linux", *options)


def on_cpu(monkeypatch, cpu):
    monkeypatch.setenv("QEMU_CPU", cpu)
    monkeypatch.delenv("INGOT_ISA", raising=False)


def test_binary_is_aarch64_with_every_level(cross):
    binary = arm_build(modelbuild.smollm2_gguf(), "arm-smollm2")
    for b in [binary] + [binary.with_name(f"{binary.name}.{level}") for level in LEVELS]:
        head = b.read_bytes()[:20]
        assert head[:4] == b"\x7fELF" and head[18:20] == b"\xb7\x00", f"{b}: not an AArch64 ELF"


@pytest.mark.parametrize("level", list(LEVELS))
def test_launcher_picks_the_level_of_the_cpu(cross, level, monkeypatch):
    binary = arm_build(modelbuild.smollm2_gguf(), "arm-smollm2")
    on_cpu(monkeypatch, LEVELS[level])
    r = run([binary, "--info"])
    assert r.returncode == 0, r.stderr
    assert f"isa:             {level}, the best level this CPU runs" in r.stdout, r.stdout


@pytest.mark.parametrize("level,forbidden,required", [("armv8", ("sdot", "smmla"), ()), ("dotprod", ("smmla",), ("sdot",)),
                                                      ("i8mm", (), ("sdot",))])
def test_levels_hold_only_their_instructions(cross, level, forbidden, required):
    """armv8 runs on a Cortex-A53 (no dot products at all), dotprod on a Neoverse N1 (no smmla);
    each level does use what it is built for."""
    binary = arm_build(modelbuild.smollm2_gguf(), "arm-smollm2")
    dis = subprocess.run(["aarch64-linux-gnu-objdump", "-d", "--no-show-raw-insn", f"{binary}.{level}"],
                         capture_output=True, text=True, timeout=300)
    assert dis.returncode == 0, dis.stderr
    ops = collections.Counter(line.split("\t")[1].split()[0] for line in dis.stdout.splitlines() if line.count("\t") >= 2)
    for op in forbidden:
        assert ops[op] == 0, f"{level}: {ops[op]} {op} instructions"
    for op in required:
        assert ops[op] > 0, f"{level}: no {op} instruction"


def test_a_level_the_cpu_lacks_is_refused(cross, monkeypatch):
    binary = arm_build(modelbuild.smollm2_gguf(), "arm-smollm2")
    on_cpu(monkeypatch, "cortex-a53")
    monkeypatch.setenv("INGOT_ISA", "i8mm")
    r = run([binary, "--info"])
    assert r.returncode == 1 and "INGOT_ISA=i8mm: this CPU does not run that level" in r.stderr, r.stderr


def levels_logits(binary, tokens, tmp_path, monkeypatch, *mode):
    out = {}
    for level, cpu in LEVELS.items():
        on_cpu(monkeypatch, cpu)
        out[level] = modelbuild.logits(binary, tokens, *mode, tmp_path=tmp_path)
    monkeypatch.delenv("QEMU_CPU")
    return out


def assert_levels_identical(got, what):
    first = next(iter(got.values()))
    for level, lg in got.items():
        assert np.array_equal(lg, first), f"{what}: {level} differs from armv8 by {np.abs(lg - first).max():.3g}"


def assert_levels_match_x86(arm, x86, tokens, what, tmp_path, monkeypatch):
    """Every level's logits the same bits, within 1e-3 of the largest of the x86-64 build's, and
    its greedy choices x86-64's but at near-ties, in prefill and in decode."""
    for mode in ((), ("--decode",)):
        got = levels_logits(arm, tokens, tmp_path, monkeypatch, *mode)
        assert_levels_identical(got, f"{what} {mode}")
        ref = modelbuild.logits(x86, tokens, *mode, tmp_path=tmp_path)
        err, scale = float(np.abs(got["armv8"] - ref).max()), float(np.abs(ref).max())
        assert err <= 1e-3 * scale, f"{what} {mode}: max |aarch64 - x86-64| = {err:.3g} (logits up to {scale:.3g})"
        modelbuild.assert_greedy_near_ties(got["armv8"], ref, err, f"{what}: ")


def test_smollm2_levels_identical_and_near_x86(cross, tmp_path, monkeypatch):
    gguf = modelbuild.smollm2_gguf()
    assert_levels_match_x86(arm_build(gguf, "arm-smollm2"), modelbuild.build(gguf, "smollm2"), PROMPT, "SmolLM2",
                            tmp_path, monkeypatch)


def greedy(binary, tmp_path, n=12):
    """The text and token ids of a greedy generation."""
    ids = tmp_path / f"ids-{binary.name}.jsonl"
    r = run([binary, "generate", "-p", "The three primary colors are", "-n", str(n), "--temp", "0", "--ignore-eos",
             "--ids-out", ids])
    assert r.returncode == 0, r.stderr
    return r.stdout, [json.loads(line)["id"] for line in ids.read_text().splitlines()]


# the levels' logits are the same bits (above): one level's greedy tokens in the default tier
@pytest.mark.parametrize("level", [lv if lv == "armv8" else pytest.param(lv, marks=BREADTH) for lv in LEVELS])
def test_smollm2_greedy_tokens_equal_x86(cross, level, monkeypatch, tmp_path):
    gguf = modelbuild.smollm2_gguf()
    want = greedy(modelbuild.build(gguf, "smollm2"), tmp_path)
    on_cpu(monkeypatch, LEVELS[level])
    got = greedy(arm_build(gguf, "arm-smollm2"), tmp_path)
    assert got == want and len(got[1]) == 12


def test_serve_under_emulation(cross):
    """The server, its HTTP and the scheduler on ARM: a chat request answered with the x86-64
    build's greedy text."""
    gguf = modelbuild.smollm2_gguf()
    texts = []
    for binary, cpu in ((modelbuild.build(gguf, "smollm2"), None), (arm_build(gguf, "arm-smollm2"), "max")):
        env = {"QEMU_CPU": cpu} if cpu else None
        body = {"model": binary.name, "messages": [{"role": "user", "content": "Name a color."}], "max_tokens": 8,
                "temperature": 0}
        with ServerProc(binary, env=env, start_timeout=180) as srv:
            req = urllib.request.Request(srv.url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=180) as resp:
                assert resp.status == 200
                texts.append(json.loads(resp.read())["choices"][0]["message"]["content"])
    assert texts[1] == texts[0] and texts[0]


@pytest.mark.parametrize("aq", ["k8", pytest.param("q16", marks=BREADTH)])
def test_kquant_levels_identical_and_near_x86(cross, aq, tmp_path, monkeypatch):
    """tests/fixtures/kquant's Q4_K_M llama (256 wide: every matrix in whole super-blocks, so every
    matmul takes kc_x16s.h, and its Q6_K ones too), --act-quant k8 (the default: kc_x16s.h) and q16
    (kc_x16k.h's 15-bit digits)."""
    gguf = ROOT / "tests" / "fixtures" / "kquant" / "tiny-llama-256.Q4_K_M.gguf"
    tokens = json.loads((gguf.parent / "reference.json").read_text())["tokens"]
    assert_levels_match_x86(arm_build(gguf, f"arm-kq-q4km-{aq}", "--act-quant", aq),
                            modelbuild.build(gguf, f"arm-kq-q4km-{aq}-x86", "--act-quant", aq), tokens,
                            f"Q4_K_M {aq}", tmp_path, monkeypatch)


# a family of each kind of layer the NEON kernels serve differently in the default tier: attention
# with GQA (qwen3), MLA (deepseek2: per-head linears), sinks and MoE (gptoss), Mamba-2
# (granitehybrid), gated delta (qwen3next); the rest at full breadth
DEFAULT_FAMILIES = {"qwen3", "deepseek2", "gptoss", "granitehybrid", "qwen3next"}


@pytest.mark.parametrize("name", [n if n in DEFAULT_FAMILIES else pytest.param(n, marks=BREADTH)
                                  for n in sorted(p.name for p in FAMILIES.iterdir() if p.is_dir())])
def test_family_f32_gguf_matches_transformers(cross, name, tmp_path, monkeypatch):
    ref = json.loads((FAMILIES / name / "reference.json").read_text())
    expected = np.fromfile(FAMILIES / name / ref["logits"]["transformers"], dtype="<f4").reshape(ref["shape"])
    binary = arm_build(FAMILIES / name / "model.f32.gguf", f"arm-f-{name}", "--isa", "dotprod")
    on_cpu(monkeypatch, "max")
    for mode in ((), ("--decode",)):
        got = modelbuild.logits(binary, ref["tokens"], *mode, tmp_path=tmp_path)
        err = float(np.abs(got - expected).max())
        assert err <= 1e-4, f"{name} {mode}: max |ingot aarch64 - transformers| = {err:.3g}"
