"""Weights cast at build time (runtime/load/model_cast.h): `./ingot build` writes NAME.weights,
every weight as the kernels read it; a start reads it instead of converting the checkpoint, and
only when it was cast by this build from the checkpoint being loaded. Whichever way the weights
arrive, the logits are the same bits; a stale, foreign or damaged cast file is passed over with a
line saying why, never used."""
import os
import shutil
import subprocess

import numpy as np

from modelbuild import TINY, build, logits, reference

ORIGIN_CAST = "all read from {}.weights, cast at build time"
ORIGIN_CAST_MAPPED = "all read in place from {}.weights, cast at build time"


def weights_line(binary, *opts):
    r = subprocess.run([str(binary), *opts, "--info"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return next(line for line in r.stdout.splitlines() if line.startswith("weights:")), r.stderr


def test_every_way_to_the_weights_gives_the_same_logits(built, tmp_path):
    """q8_0 from an f32 checkpoint: converted at load and interleaved (kc_x16.h) without the cast.
    From the cast (huge pages or mapped in place) the logits are bit-identical to the conversion."""
    model = TINY / "mha_untied_hd32"
    binary = build(model, "cast-mha", "--dtype", "q8_0")
    assert (binary.parent / "cast-mha.weights").is_file()
    tokens, _ = reference(model)
    ways = {(): ORIGIN_CAST.format("cast-mha"), ("--mmap",): ORIGIN_CAST_MAPPED.format("cast-mha"),
            ("--no-cast",): "converted to another dtype at load",
            ("--no-cast", "--mmap"): "converted to another dtype at load"}
    first = None
    for opts, origin in ways.items():
        line, err = weights_line(binary, *opts)
        assert origin in line, (opts, line)
        assert err == ""
        got = logits(binary, tokens, *opts, tmp_path=tmp_path)
        if first is None:
            first = got
        assert np.array_equal(got, first), opts


def test_a_cast_that_does_not_apply_is_passed_over(built, tmp_path):
    """On a private copy of a sharded checkpoint (a folder of files): a damaged, foreign or stale
    cast file is not used, the start says why and converts, and the logits do not change.
    Loading another checkpoint with --weights converts it without a word."""
    model = tmp_path / "sharded"
    shutil.copytree(TINY / "gqa_tied_hd16-sharded", model)
    name = f"cast-private-{os.getpid()}"
    binary = build(model, name, "--dtype", "q8_0")
    cast = binary.parent / f"{name}.weights"
    good = cast.read_bytes()
    tokens, _ = reference(TINY / "gqa_tied_hd16-sharded")
    expect = logits(binary, tokens, "--no-cast", tmp_path=tmp_path)
    assert np.array_equal(logits(binary, tokens, tmp_path=tmp_path), expect)

    def passed_over(why):
        line, err = weights_line(binary)
        assert "converted to another dtype at load" in line, line
        assert err == f"{cast}: {why}: converting the checkpoint at load instead\n", err
        assert np.array_equal(logits(binary, tokens, tmp_path=tmp_path), expect)

    try:
        cast.write_bytes(good[:len(good) - 100])
        passed_over("truncated or damaged")
        cast.write_bytes(b"GGUF" + good[4:])
        passed_over("not a cast file of this version")
        other = build(TINY / "gqa_tied_hd16", "cast-other-build", "--dtype", "f16")  # another weight table
        shutil.copyfile(other.parent / "cast-other-build.weights", cast)
        passed_over("cast by another build (its weight table or kernel layouts differ)")
        cast.write_bytes(good)
        assert ORIGIN_CAST.format(name) in weights_line(binary)[0]
        shard = sorted(model.glob("*.safetensors"))[-1]
        st = shard.stat()
        os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # a shard rewritten since
        passed_over("cast from another checkpoint (or this one changed since)")
        line, err = weights_line(binary, "--weights", TINY / "gqa_tied_hd16")  # the same tensors, one file
        assert "converted to another dtype at load" in line and err == "", (line, err)
    finally:
        shutil.rmtree(binary.parent, ignore_errors=True)
