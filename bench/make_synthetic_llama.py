#!/usr/bin/env python3
"""Writes GGUFs of a Llama the size of a real one, with random weights, for
speed benchmarks at sizes no file on PyPI has (not a test; its weights
predict nothing).

    python3 bench/make_synthetic_llama.py                    # TinyLlama-1.1B's shape, Q4_0 and Q4_K_M
    python3 bench/make_synthetic_llama.py --types Q4_0 --shape tinyllama-1.1b
    python3 bench/bench_smollm2.py --model models/synthetic/tinyllama-1.1b-random.Q4_0.gguf \\
        --engines fused --long 1024,4000

Why: SmolLM2-135M (the one real GGUF we can fetch) has a KV cache as large
as its weights at 4000 positions, so decode at long contexts there measures
the cache more than the engine. A 1.1B model of TinyLlama's shape (hidden
2048, 22 layers, 32 query heads sharing 4 KV heads of 64, FFN 5632, vocab
32000) has the same 22.5 KiB of f16 KV per position against ~600 MB of Q4
weights: the proportions of the models users run. Every row length is a
multiple of 256, so llama.cpp's Q4_K_M is Q4_K and Q6_K here, not the Q5_0
fallback it is on SmolLM2.

Steps: the random Llama (tests/fixtures/make_kquant_models.py's writer:
llama architecture keys, byte-level BPE vocabulary, N(0, 1/fan-in) weights,
seeded) as an F32 GGUF in a temporary folder, then llama.cpp's
llama_model_quantize into each --types preset under --out. Files already
there are kept. 4.1 GiB of disk while it runs; under a minute for the
F32 file and each preset on 2 cores.
"""
import argparse
import pathlib
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))

SHAPES = {
    # TinyLlama-1.1B-Chat-v1.0's config.json; context 8192 so that 4096-position decode fits
    "tinyllama-1.1b": {"dim": 2048, "ffn": 5632, "layers": 22, "heads": 32, "kv_heads": 4, "head_dim": 64,
                       "vocab": 32000, "ctx": 8192, "rope_theta": 10000.0, "eps": 1e-5, "seed": 11,
                       "init": "fan_in"},
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="tinyllama-1.1b", choices=sorted(SHAPES))
    ap.add_argument("--types", default="Q4_0,Q4_K_M", help="llama.cpp presets, comma-separated (default Q4_0,Q4_K_M)")
    ap.add_argument("--out", type=pathlib.Path, default=ROOT / "models" / "synthetic")
    a = ap.parse_args()

    from make_kquant_models import PRESETS, quantize, tensor_types, write_f32_gguf
    c = SHAPES[a.shape]
    types = [t.strip().upper() for t in a.types.split(",") if t.strip()]
    for t in types:
        if t not in PRESETS:
            raise SystemExit(f"unknown preset {t}; one of {', '.join(sorted(PRESETS))}")
    a.out.mkdir(parents=True, exist_ok=True)
    stem = f"{a.shape}-random"
    missing = [t for t in types if not (a.out / f"{stem}.{t}.gguf").is_file()]
    for t in sorted(set(types) - set(missing)):
        print(f"kept      {a.out / f'{stem}.{t}.gguf'}")
    if not missing:
        return
    with tempfile.TemporaryDirectory(dir=a.out) as tmp:
        f32 = pathlib.Path(tmp) / f"{stem}.F32.gguf"
        t0 = time.perf_counter()
        write_f32_gguf(f32, c, name=stem)
        print(f"wrote     {f32.name} ({f32.stat().st_size / 2**30:.1f} GiB, {time.perf_counter() - t0:.0f} s)", flush=True)
        for t in missing:
            dst = a.out / f"{stem}.{t}.gguf"
            t0 = time.perf_counter()
            part = dst.with_suffix(".part")
            why = quantize(f32, part, PRESETS[t])
            if why:
                raise SystemExit(f"{t}: {why}")
            part.rename(dst)
            print(f"quantized {dst} ({dst.stat().st_size / 2**20:.0f} MiB, {time.perf_counter() - t0:.0f} s): "
                  f"{tensor_types(dst)}", flush=True)


if __name__ == "__main__":
    main()
