#!/usr/bin/env python3
"""WebAssembly: ingot's --target wasm32 module against llama.cpp's library built for WebAssembly,
both with SIMD128 under node (V8, as in Chromium), one thread, on the same GGUF and the same prompts,
alternated rep by rep. Greedy; prefill = the prompt in one step, decode = N tokens one step each
(bench/ingot_wasm_bench.js, bench/llama_wasm_bench.c: llama-bench's pp and tg, which llama.cpp's
CMake does not build for Emscripten). llama.cpp is built by bench/build_llama_cpp.sh --target
wasm32 at its defaults but two that fail here (that script says which and why).

    python3 bench/bench_wasm.py [--model GGUF] [--reps 3] [--gen 64]

Needs scripts/setup.sh --wasm. Prints the conditions (CPU, load, node and emcc versions), each
engine's median tokens/s and the ratios; `--json OUT` keeps the raw figures."""
import argparse
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROMPTS = {
    "short (13 tokens)": "Once upon a time, in a land far away, there lived",
    "long": " ".join(["The history of the city begins with a small settlement on the river, where traders from the "
                      "north and the south met to exchange grain, salt, cloth and tools."] * 6),
}


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"{' '.join(map(str, cmd))} failed:\n{r.stderr[-2000:]}")
    return r.stdout


def cpu_line():
    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
                 platform.processor())
    flags = next((line.split(":", 1)[1].split() for line in open("/proc/cpuinfo") if line.startswith("flags")), [])
    isa = [f for f in ("avx2", "avx512f", "avx512_vnni", "amx_int8") if f in flags]
    return f"{model}, {os.cpu_count()} cores, {' '.join(isa)}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(ROOT / "models" / "smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--json")
    a = ap.parse_args()
    glue = pathlib.Path(run([str(ROOT / "ingot"), "build", a.model, "--target", "wasm32"]).strip().splitlines()[-1])
    llama_dir = pathlib.Path(run(["bash", str(ROOT / "bench" / "build_llama_cpp.sh"), "--target", "wasm32"]).strip())
    engines = {
        "ingot": lambda p: ["node", str(ROOT / "bench" / "ingot_wasm_bench.js"), str(glue), a.model, p, str(a.gen)],
        # node's fetch cannot read a file, which Emscripten 3.1.6's loader tries first
        "llama.cpp": lambda p: ["node", "--no-experimental-fetch", str(llama_dir / "llama_wasm_bench.js"), a.model, p,
                                str(a.gen)],
    }
    print(f"CPU: {cpu_line()}; load {os.getloadavg()[0]:.2f}")
    print(f"node {run(['node', '--version']).strip()}; {run(['emcc', '--version']).splitlines()[0]}")
    print(f"model: {a.model}; {a.reps} reps alternated, {a.gen} generated tokens, one thread, greedy\n")
    raw = {}
    for label, prompt in PROMPTS.items():
        for rep in range(a.reps):
            for name, cmd in engines.items():
                d = json.loads(run(cmd(prompt), timeout=600).strip().splitlines()[-1])
                if d["generated"] != a.gen:
                    sys.exit(f"{name} generated {d['generated']} tokens, not {a.gen}: choose another prompt")
                raw.setdefault(label, {}).setdefault(name, []).append(
                    {"prompt_tokens": d["prompt_tokens"], "prefill": d["prompt_tokens"] / d["prefill_s"],
                     "decode": d["generated"] / d["decode_s"]})
    print("| prompt | tokens | ingot prefill | llama.cpp prefill | ratio | ingot decode | llama.cpp decode | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for label, by in raw.items():
        med = {n: {k: statistics.median(r[k] for r in rs) for k in ("prefill", "decode")} for n, rs in by.items()}
        n_tok = by["ingot"][0]["prompt_tokens"], by["llama.cpp"][0]["prompt_tokens"]
        i, l = med["ingot"], med["llama.cpp"]
        print(f"| {label} | {n_tok[0]} / {n_tok[1]} | {i['prefill']:.1f} | {l['prefill']:.1f} | "
              f"{i['prefill'] / l['prefill']:.2f}x | {i['decode']:.1f} | {l['decode']:.1f} | {i['decode'] / l['decode']:.2f}x |")
    print(f"\nload at the end {os.getloadavg()[0]:.2f}")
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(raw, indent=1))


if __name__ == "__main__":
    main()
