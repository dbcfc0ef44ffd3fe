"""The real model: SmolLM2-135M-Instruct Q4_1 (GGUF) against transformers and llama.cpp.

References (tests/fixtures/smollm2/, made by the scripts beside them):
- gpl3_reference.json: transformers on the dequantized GGUF, f32, perplexity
  over /usr/share/common-licenses/GPL-3 in non-overlapping 512-token windows,
  and its argmax at every predicted position;
- transformers_greedy.json, llamacpp_greedy.json: greedy 32-token
  continuations of 5 prompts, with the top-2 logits at every step.

The default build multiplies the Q4_1/Q8_0 weights, dequantized in registers,
with f32 activations: the same arithmetic as the transformers reference, up
to summation order. It must reach the reference perplexity within 0.5% and
agree on the top-1 token at >= 99% of positions, and its greedy runs must
equal transformers' (differing only where both see a near-tie, top-2 logits
within 0.1) and llama.cpp's (see test_greedy_matches_llamacpp for the rule).
The --act-quant q8 build (int8 activations, llama.cpp's numerics) must stay
within 1% of the reference perplexity. The perplexity and greedy checks run
on the exact build (--kv-dtype f32) and on the default f16 KV cache, under
the same bounds.

Under INGOT_SAN=1 the perplexity check runs on the first two windows only
(the sanitizer build is ~10x slower), against those windows' reference NLL.
"""
import json
import re
import subprocess

import numpy as np
import pytest

from conftest import FULL, SAN
from modelbuild import FIXTURES, build, logits, smollm2_gguf

REF = FIXTURES / "smollm2"
NEAR_TIE = 0.1
# The f16 KV cache rounds K and V (relative 2^-11); at the steps where the
# greedy runs meet a near-tie SmolLM2's top logits are about 24, and the
# rounding moves each by up to ~0.01 (measured: the "french" prompt's top-2
# gap at its divergence from llama.cpp is 0.092 exact, 0.101 with f16 KV).
NEAR_TIE_KV = {"f32": NEAR_TIE, "f16": NEAR_TIE + 0.02}


@pytest.fixture(scope="module")
def gguf():
    return smollm2_gguf()


@pytest.fixture(scope="module")
def smollm2(gguf, built):
    return build(gguf, "smollm2")


@pytest.fixture(scope="module", params=["f32", "f16"])
def smollm2_kv(gguf, built, request):
    """The build with the exact f32 KV cache, and the default one (f16)."""
    binary = build(gguf, "smollm2" if request.param == "f32" else "smollm2-kvf16", "--kv-dtype", request.param)
    return binary, NEAR_TIE_KV[request.param]


@pytest.fixture(scope="module")
def smollm2_a8(gguf, built):
    return build(gguf, "smollm2-a8", "--act-quant", "q8")


def test_perplexity_matches_transformers(smollm2_kv, tmp_path):
    smollm2 = smollm2_kv[0]
    ref = json.loads((REF / "gpl3_reference.json").read_text())
    window = ref["window"]
    # the default tier: the first 4 of the 14 windows (2,048 tokens, top-1 over 2,048 positions);
    # make test-full all of them; the sanitizer pass 2
    n_windows = 2 if SAN else ref["n_windows"] if FULL else 4
    ids = ref["tokens"][: n_windows * window]
    ids_file = tmp_path / "ids.json"
    ids_file.write_text(json.dumps(ids))
    argmax_file = tmp_path / "argmax.i32"
    r = subprocess.run([str(smollm2), "perplexity", "--ids", str(ids_file), "--ctx", str(window),
                        "--argmax-out", str(argmax_file)], capture_output=True, text=True, timeout=1500)
    assert r.returncode == 0, r.stderr
    m = re.search(r"mean_nll ([0-9.]+) perplexity ([0-9.]+)", r.stdout)
    ours = float(m.group(2))
    ref_ppl = float(np.exp(np.mean(ref["window_mean_nll"][:n_windows])))
    assert abs(ours / ref_ppl - 1) <= 0.005, f"perplexity {ours:.4f} vs transformers {ref_ppl:.4f}"
    got = np.fromfile(argmax_file, dtype="<i4")
    want = np.array([a for w in ref["argmax"][:n_windows] for a in w])
    agree = (got == want).mean()
    assert agree >= 0.99, f"top-1 agreement {agree:.4f}"


@pytest.mark.skipif(SAN, reason="a perplexity over 2,048 tokens: the optimized pass")
def test_q4_kv_cache_perplexity(gguf, built, tmp_path):
    """--kv-dtype q4 (0.28x the bytes of f16) on the GPL-3 text's first 4 windows: 25.44 against
    transformers' 23.76 (+7.1%; all 14 windows +6.4%, the f16 cache +0.0%: bench/RESULTS.md).
    Rounding differences upstream move a few values across a level, which moves this by about
    a point (the scalar attention path gives +5.8% on 14 windows): bound +10%. Keys not rotated
    cost +14% alone, so the bound holds the rotation to its work. The 1% the format aims at is
    not reached on this 135M model, whose keys carry most of the loss (docs/building.md)."""
    binary = build(gguf, "smollm2-kvq4", "--kv-dtype", "q4")
    ref = json.loads((REF / "gpl3_reference.json").read_text())
    window, n_windows = ref["window"], 4
    ids_file = tmp_path / "ids.json"
    ids_file.write_text(json.dumps(ref["tokens"][: n_windows * window]))
    r = subprocess.run([str(binary), "perplexity", "--ids", str(ids_file), "--ctx", str(window)],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    ours = float(re.search(r"perplexity ([0-9.]+)", r.stdout).group(1))
    ref_ppl = float(np.exp(np.mean(ref["window_mean_nll"][:n_windows])))
    print(f"q4 KV perplexity {ours:.4f} vs transformers {ref_ppl:.4f} ({ours / ref_ppl - 1:+.2%})")
    assert ours / ref_ppl - 1 <= 0.10, f"perplexity {ours:.4f} vs transformers {ref_ppl:.4f}"
    info = subprocess.run([str(binary), "--info"], capture_output=True, text=True, timeout=60).stdout
    assert "6480 bytes/token (q4)" in info, info  # 30 layers x 2 x 3 heads x 64 values / 32 x 18 bytes


def greedy(binary, prompt, n, tmp_path):
    out = tmp_path / "ids.jsonl"
    r = subprocess.run([str(binary), "generate", "-p", prompt, "-n", str(n), "--ignore-eos", "--ids-out", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in out.read_text().splitlines()]


def compare_greedy(binary, near_tie, fixture, tmp_path):
    ref = json.loads((REF / fixture).read_text())
    report = []
    for case in ref["results"]:
        want = case["generated_ids"]
        ours = greedy(binary, case["prompt"], len(want), tmp_path)
        ids = [s["id"] for s in ours]
        div = next((i for i, (a, b) in enumerate(zip(ids, want)) if a != b), None)
        if div is None:
            report.append(f"{case['name']}: identical")
            continue
        gap_ours = ours[div]["top2_logits"][0] - ours[div]["top2_logits"][1]
        theirs = case["steps"][div]["top2_logits"]
        gap_ref = theirs[0] - theirs[1]
        assert gap_ours <= near_tie and gap_ref <= near_tie, (
            f"{case['name']}: diverges at step {div} without a near-tie "
            f"(top-2 gap ours {gap_ours:.3f}, {fixture} {gap_ref:.3f})")
        report.append(f"{case['name']}: near-tie divergence at step {div}")
    return report


def test_greedy_matches_transformers(smollm2_kv, tmp_path):
    compare_greedy(*smollm2_kv, "transformers_greedy.json", tmp_path)


def test_greedy_matches_llamacpp(smollm2_kv, tmp_path):
    """Greedy continuations equal llama.cpp's up to the first divergence; at a
    divergence our engine must see a near-tie (top-2 within 0.1) and the
    exact reference (transformers on the dequantized weights) must pick the
    same token we pick. Why not "both engines see a near-tie": llama.cpp
    keeps K/V in f16 and multiplies Q4_1 weights with int8 activations, which
    moves its own top-2 gaps by up to ~0.15 at exactly these points;
    transformers itself fails that stricter rule against llama.cpp on 3 of
    the 5 prompts (llama.cpp gaps 0.13, 0.11, 0.22 where transformers'
    are 0.06, 0.03, 0.09)."""
    ref = json.loads((REF / "llamacpp_greedy.json").read_text())
    exact = {c["name"]: c for c in json.loads((REF / "transformers_greedy.json").read_text())["results"]}
    for case in ref["results"]:
        want = case["generated_ids"]
        ours = greedy(smollm2_kv[0], case["prompt"], len(want), tmp_path)
        ids = [s["id"] for s in ours]
        div = next((i for i, (a, b) in enumerate(zip(ids, want)) if a != b), None)
        if div is None:
            continue
        gap_ours = ours[div]["top2_logits"][0] - ours[div]["top2_logits"][1]
        assert gap_ours <= smollm2_kv[1], (
            f"{case['name']}: diverges from llama.cpp at step {div}, our top-2 gap {gap_ours:.3f}")
        assert exact[case["name"]]["generated_ids"][:div + 1] == ids[:div + 1], (
            f"{case['name']}: at step {div} transformers does not side with us")


def test_int8_activation_build_perplexity(smollm2_a8, tmp_path):
    """--act-quant q8 (llama.cpp's numerics) trades exactness for speed:
    its perplexity stays within 1% of the exact reference (llama.cpp's own
    is 0.35% above it on this text)."""
    ref = json.loads((REF / "gpl3_reference.json").read_text())
    n_windows = 1 if SAN else 4
    ids_file = tmp_path / "ids.json"
    ids_file.write_text(json.dumps(ref["tokens"][: n_windows * ref["window"]]))
    r = subprocess.run([str(smollm2_a8), "perplexity", "--ids", str(ids_file), "--ctx", str(ref["window"])],
                       capture_output=True, text=True, timeout=1500)
    assert r.returncode == 0, r.stderr
    ours = float(re.search(r"perplexity ([0-9.]+)", r.stdout).group(1))
    ref_ppl = float(np.exp(np.mean(ref["window_mean_nll"][:n_windows])))
    assert abs(ours / ref_ppl - 1) <= 0.01, f"perplexity {ours:.4f} vs {ref_ppl:.4f}"


def test_fused_and_unfused_agree(gguf, smollm2, tmp_path):
    unfused = build(gguf, "smollm2-nofuse", "--no-fuse")
    ref = json.loads((REF / "gpl3_reference.json").read_text())
    ids = ref["tokens"][:40]
    a = logits(smollm2, ids, tmp_path=tmp_path)
    b = logits(unfused, ids, "--decode", tmp_path=tmp_path)
    assert np.abs(a - b).max() <= 1e-3


def test_attention_split_across_threads_is_bit_identical(smollm2, tmp_path):
    """A decode step of few tokens splits each token's attention into chunks
    of 128 positions run on different threads and merged in chunk order; one
    thread, or a prefill's many tokens, run the same chunks one after another
    (kernels/cpu/kc_attend.h). The logits of 300 tokens (three chunks) are
    bit-identical every way. (Under the sanitizers: one thread against two on 160 tokens, two
    chunks, the split path; the optimized pass compares the other ways.)"""
    n = 160 if SAN else 300
    ids = json.loads((REF / "gpl3_reference.json").read_text())["tokens"][:n]
    assert len(ids) == n

    def run(threads, *mode):
        out = tmp_path / f"split-{threads}-{'-'.join(mode)}.f32"
        r = subprocess.run([str(smollm2), "--threads", str(threads), "logits", "--tokens", ",".join(map(str, ids)),
                            "--out", str(out), *mode], capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        return np.fromfile(out, dtype="<f4").reshape(len(ids), -1)

    whole = run(1, "--decode")
    assert np.array_equal(run(2, "--decode"), whole)
    if SAN:
        return
    assert np.array_equal(run(3, "--decode"), whole)
    assert np.array_equal(run(2, "--chunk", "300"), whole)


def test_every_way_to_the_weights_agrees(smollm2, tmp_path):
    """The default reads the weights ./ingot build cast (smollm2.weights) into huge pages; --mmap
    reads that file in place; --no-cast copies and interleaves the checkpoint's tensors at load,
    and --no-cast --mmap reads the norms in place from the GGUF. Same bytes, same kernels: the
    logits are bit-identical."""
    ids = json.loads((REF / "gpl3_reference.json").read_text())["tokens"][:24]
    origins = {(): r"all read from smollm2\.weights, cast at build time",
               ("--mmap",): r"all read in place from smollm2\.weights, cast at build time",
               ("--no-cast",): r"272 copied; 211 of them interleaved in groups of 16 rows",
               # the x16 weights (their own layout) are copies even with --mmap
               ("--no-cast", "--mmap"): r"61 read in place from the file, 211 copied; 211 of them interleaved"}
    first = logits(smollm2, ids, tmp_path=tmp_path)
    for opts, origin in origins.items():
        assert np.array_equal(logits(smollm2, ids, *opts, tmp_path=tmp_path), first), opts
        info = subprocess.run([str(smollm2), *opts, "--info"], capture_output=True, text=True, timeout=120)
        assert info.returncode == 0, info.stderr
        assert re.search(r"weights: +\d+\.\d MiB in memory \(" + origin, info.stdout), (opts, info.stdout)


def test_generate_streams_text_and_reports_speed(smollm2):
    r = subprocess.run([str(smollm2), "generate", "-p", "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
                        "<|im_start|>assistant\n", "-n", "12"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "Paris" in r.stdout
    assert re.search(r"prefill: \d+ tokens in [0-9.]+ s \([0-9.]+ tokens/s\)", r.stderr)
    assert re.search(r"decode: +\d+ tokens in [0-9.]+ s \([0-9.]+ tokens/s\)", r.stderr)


def test_seeded_sampling_is_reproducible(smollm2):
    def run(seed):
        r = subprocess.run([str(smollm2), "generate", "-p", "Once upon a time", "-n", "24", "--temp", "0.9",
                            "--top-p", "0.95", "--top-k", "50", "--seed", str(seed), "--ignore-eos"],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        return r.stdout
    first = run(7)
    assert run(7) == first
    assert run(8) != first or run(9) != first


def test_info_describes_the_model(smollm2):
    r = subprocess.run([str(smollm2), "--info"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "architecture:    llama" in out
    assert "dim 576, layers 30, heads 9, kv heads 3, head dim 64, ffn 1536" in out
    assert "q4_1 (210)" in out and "q8_0" in out
    assert re.search(r"KV cache: +46080 bytes/token", out)
    # fused: embed + 5 per layer + head
    assert "kernels:         152 launches per step" in out
    # every Q4_1 matrix and the Q8_0 embedding tied to the LM head: 210 + 1
    assert re.search(r"weights: +\d+\.\d MiB in memory \(all read from smollm2\.weights, cast at build time\)",
                     out), out
    assert ("activations:     k8 (no Q4_K/Q5_K/Q6_K weight here: as q16): 15-bit integers per block of 32 against the "
            "211 weight(s) interleaved") in out, out
