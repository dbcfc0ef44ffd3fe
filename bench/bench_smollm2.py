"""Speed benchmark: ingot vs llama.cpp on one GGUF (default SmolLM2-135M-Instruct Q4_1).

Not a test: it never asserts on time, and nothing under tests/ uses it.

In one run it measures prefill of a fixed P-token prompt (default 128) and
greedy decode of G tokens (default 128) after it, in tokens/s, at each thread
count (default 1 and 2), for these engines on the same GGUF:

  fused      ingot default build                  build/bench-smollm2/bench-smollm2
  nofuse     ingot --no-fuse                      build/bench-smollm2-nofuse/...
  f32        ingot --act-quant none (fused)       build/bench-smollm2-f32/...
             (f32 activations everywhere, row-major weights: the exact mode)
  a8         ingot --act-quant q8 (fused)         build/bench-smollm2-a8/...
  q16        ingot --act-quant q16 (fused)        build/bench-smollm2-q16/...
             (15-bit activations for the K-quant matmuls too: the default before k8)
  llama.cpp  llama.cpp's own llama-bench, built from source by
             bench/build_llama_cpp.sh with every default kept (native code,
             repacked weights, AMX where the CPU has it), -t N

ingot's figures are the binaries' own timings (`generate -p PROMPT -n G
--ignore-eos --threads N` prints `prefill: ...` and `decode: ...` on stderr;
model load is not included). ingot's decode rate is (G-1) forward steps over
the time from the end of prefill to the last token (sampling and printing
included), i.e. per forward step. llama.cpp's are llama-bench's: `-p P -n 0`
(one batch of P tokens) and `-p 0 -n G -d P` (G single-token steps after P
positions filled untimed), each run with `-r 1` so that the reps, alternated
with ingot's, are this script's; llama-bench does its own warm-up in each run.
Only the thread count is set; were llama.cpp's defaults to crash on this CPU,
the run falls back to `--repack 0` and says so in its header and in --json.

ingot's prompt is built by repeating a text, tokenizing it with llama.cpp's
tokenizer (no BOS: the GGUF's add_bos_token is false), cutting to P tokens and
detokenizing; the script checks that both llama.cpp and ingot (`tokenize -p`)
turn that text back into exactly P tokens (and reports whether the ids agree).
llama-bench runs random token ids of the same count: a dense model's speed does
not depend on which tokens it reads.

Every (engine, threads) pair is warmed up once, then measured --reps times
(default 3), reps interleaved across engines so that drifting load from other
jobs hits all of them alike; the table shows the median. The machine (CPU,
nproc, ISA flags) and the load average at start and end are printed: numbers
are only comparable within one run.

The roofline: bench/membw.c (compiled here) measures the machine's DRAM read
bandwidth at each thread count (best of 15 passes over 1 GiB, plain and
prefetching loops); a decoded token must read every weight once (`--info`'s
weight bytes) plus the KV cache of every earlier position (`--info`'s KV bytes
per token, f16 by default: the same element llama.cpp uses), so bandwidth /
bytes per token is the decode rate no engine can beat from DRAM, and each
decode figure is printed as a % of it. Weights that fit in the last-level
cache (SmolLM2's 92 MB, on a CPU with a few hundred MB of L3) stream from
there between tokens and can pass 100%.

Long contexts (--long 1024,4000, the default; "" to skip): decode of 32
tokens after a prompt of each length, ingot's default build and llama.cpp at
the highest thread count, with the ratio to the same engine's decode after
the P-token prompt (attention must not take over at long contexts).

Run:  python3 bench/bench_smollm2.py [--threads 1,2] [--reps 3] [--quick]
                                     [--long 1024,4000] [--no-build] [--model GGUF]
                                     [--engines fused,nofuse,f32,a8] [--json OUT]
Other models: --model takes any GGUF llama.cpp runs, e.g. the 1.1B random
Llama of bench/make_synthetic_llama.py (--engines fused keeps it short).
--quick: 1 rep, 32-token prompt, 32 decode tokens (a smoke run; the numbers
are not the benchmark's).
"""
import argparse
import json
import os
import pathlib
import platform
import re
import statistics
import subprocess
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]

INGOT_ENGINES = [
    # (label, build name, extra ./ingot build flags)
    ("ingot fused", "bench-smollm2", []),
    ("ingot nofuse", "bench-smollm2-nofuse", ["--no-fuse"]),
    ("ingot f32", "bench-smollm2-f32", ["--act-quant", "none"]),
    ("ingot a8", "bench-smollm2-a8", ["--act-quant", "q8"]),
    ("ingot q16", "bench-smollm2-q16", ["--act-quant", "q16"]),
]
LLAMA = "llama.cpp"

# Plain English prose, repeated and cut by tokens to the prompt length.
BASE_TEXT = (
    "The history of the lighthouse begins long before electric light. Early "
    "keepers burned wood and coal in open fires on hilltops, and later in iron "
    "baskets raised on towers, so that ships could find the harbour at night. "
    "In the eighteenth century oil lamps with polished reflectors replaced the "
    "fires, and in the nineteenth the Fresnel lens gathered the light of a "
    "single flame into a beam that could be seen twenty miles out to sea. "
)


# --------------------------------------------------------------------------
# llama.cpp: its own llama-bench, built from source at its defaults
# --------------------------------------------------------------------------

LLAMA_BIN = ROOT / "build" / "llama-cpp" / "bin"


def llama_bench_path():
    """build/llama-cpp/bin/llama-bench, built by bench/build_llama_cpp.sh when missing."""
    exe = LLAMA_BIN / "llama-bench"
    if not exe.is_file():
        print("building llama.cpp's tools (bench/build_llama_cpp.sh; minutes on 2 cores)", flush=True)
        subprocess.run(["bash", str(ROOT / "bench" / "build_llama_cpp.sh")], check=True,
                       stdout=subprocess.DEVNULL)
    return exe


def llama_bench(gguf, threads, test, extra):
    """tokens/s of one llama-bench test (-r 1: the reps are ours, alternated with ingot), or
    raises with its exit status (a negative one is the signal that killed it)."""
    cmd = [str(LLAMA_BIN / "llama-bench"), "-m", str(gguf), "-t", str(threads), "-r", "1",
           "-o", "jsonl", *test, *extra]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise LlamaBenchFailed(r.returncode, " ".join(cmd), r.stderr.strip()[-400:])
    rows = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    if len(rows) != 1:
        raise RuntimeError(f"{' '.join(cmd)}: expected one result line, got: {r.stdout[-400:]}")
    return float(rows[0]["avg_ts"]), rows[0]


class LlamaBenchFailed(RuntimeError):
    def __init__(self, status, cmd, tail):
        super().__init__(f"{cmd} failed ({status}): {tail}")
        self.status = status


def run_llama(gguf, P, G, threads, extra):
    """(prefill tokens/s of a P-token batch, decode tokens/s of G tokens after P positions), as
    llama-bench measures them: `-p P -n 0` and `-p 0 -n G -d P` (the depth is filled untimed)."""
    pf, _ = llama_bench(gguf, threads, ["-p", str(P), "-n", "0"], extra)
    dc, _ = llama_bench(gguf, threads, ["-p", "0", "-n", str(G), "-d", str(P)], extra)
    return pf, dc


def llama_settings(gguf, threads):
    """llama.cpp's settings for this run: its defaults ([]), unless they crash on this CPU
    (llama-cpp-python 0.3.36's AMX kernels did on batches of more than one token on an Intel
    Xeon), then with its repacked/AMX weights off (--repack 0), said in the report."""
    try:
        llama_bench(gguf, threads, ["-p", "32", "-n", "0"], [])
        return [], "its defaults"
    except LlamaBenchFailed as e:
        if e.status >= 0:
            raise
        llama_bench(gguf, threads, ["-p", "32", "-n", "0"], ["--repack", "0"])
        return ["--repack", "0"], (f"--repack 0: at its defaults llama-bench died of signal {-e.status} "
                                   "on this CPU")


def llama_tokenizer(gguf):
    """llama.cpp's tokenizer for the prompt (llama-cpp-python, vocabulary only: no kernels run)."""
    import llama_cpp
    return llama_cpp.Llama(model_path=str(gguf), vocab_only=True, verbose=False)


# --------------------------------------------------------------------------
# ingot
# --------------------------------------------------------------------------

def ingot_bin(name):
    return ROOT / "build" / name / name


def build_ingot(gguf, name, flags):
    """Builds build/NAME/NAME; returns None or the tail of the error output."""
    cmd = [str(ROOT / "ingot"), "build", str(gguf), "--name", name, *flags]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0 or not ingot_bin(name).is_file():
        tail = (r.stdout + r.stderr).strip().splitlines()[-6:]
        return "\n".join(tail) or f"exit {r.returncode}"
    return None


RE_PREFILL = re.compile(r"^prefill:\s+(\d+) tokens in ([\d.]+) s \(([\d.]+) tokens/s\)", re.M)
RE_DECODE = re.compile(r"^decode:\s+(\d+) tokens in ([\d.]+) s \(([\d.]+) tokens/s\)", re.M)


def run_ingot(name, prompt, n_gen, threads):
    """(prefill tokens/s, decode tokens/s, prompt token count) for one run,
    as the binary prints them."""
    cmd = [str(ingot_bin(name)), "--threads", str(threads), "generate", "-p", prompt,
           "-n", str(n_gen), "--ignore-eos"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} ... failed ({r.returncode}): {r.stderr.strip()[-400:]}")
    p = RE_PREFILL.search(r.stderr)
    d = RE_DECODE.search(r.stderr)
    if not p or not d:
        raise RuntimeError(f"{name}: no prefill/decode timings in: {r.stderr.strip()[-400:]}")
    if int(d.group(1)) != n_gen:
        raise RuntimeError(f"{name}: generated {d.group(1)} tokens, expected {n_gen}")
    return float(p.group(3)), float(d.group(3)), int(p.group(1))


RE_WEIGHTS = re.compile(r"^weights:\s+([\d.]+) MiB", re.M)
RE_KV = re.compile(r"^KV cache:\s+(\d+) bytes/token", re.M)


def ingot_bytes(name):
    """(weight bytes, KV bytes per position) from the binary's --info."""
    out = subprocess.run([str(ingot_bin(name)), "--info"], capture_output=True, text=True, check=True).stdout
    return float(RE_WEIGHTS.search(out).group(1)) * 2**20, int(RE_KV.search(out).group(1))


def dram_bandwidth(threads):
    """GB/s of DRAM reads with this many threads (bench/membw.c)."""
    exe = ROOT / "build" / "_obj" / "bench" / "membw"
    exe.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cc", "-O2", "-march=native", "-pthread", str(ROOT / "bench" / "membw.c"), "-o", str(exe)],
                   check=True)
    out = subprocess.run([str(exe), str(threads)], capture_output=True, text=True, check=True).stdout
    return float(out.split()[-1])


def ingot_tokenize(name, text):
    r = subprocess.run([str(ingot_bin(name)), "tokenize", "-p", text],
                       capture_output=True, text=True, check=True)
    return [int(t) for t in r.stdout.split()]


# --------------------------------------------------------------------------
# prompt, machine
# --------------------------------------------------------------------------

def make_prompt(llm, n_tokens):
    """A text that llama.cpp's tokenizer turns into exactly n_tokens tokens."""
    text = BASE_TEXT * (n_tokens // 20 + 2)
    ids = llm.tokenize(text.encode(), add_bos=False, special=True)
    assert len(ids) > n_tokens + 8
    # Detokenize-then-retokenize can merge differently at the cut (e.g. a
    # trailing space); try cuts near n_tokens until the round trip holds.
    for k in [n_tokens] + [n_tokens + d for d in (1, -1, 2, -2, 3, -3, 4, -4)]:
        cand = llm.detokenize(ids[:k]).decode("utf-8", "strict")
        back = llm.tokenize(cand.encode(), add_bos=False, special=True)
        if len(back) == n_tokens:
            return cand, back
    raise SystemExit(f"could not build a prompt of exactly {n_tokens} tokens")


def machine_info():
    cpu, flags = "?", set()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name") and cpu == "?":
                cpu = line.split(":", 1)[1].strip()
            elif line.startswith(("flags", "Features")) and not flags:  # x86-64, AArch64
                flags = set(line.split(":", 1)[1].split())
            elif line.startswith("CPU part") and cpu == "?":  # AArch64 names no model: its part number
                cpu = f"ARM part {line.split(':', 1)[1].strip()}"
    except OSError:
        pass
    isa = [f for f in ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_int8",
                       "asimd", "asimddp", "i8mm", "sve", "sve2", "bf16") if f in flags]
    return {"cpu": cpu, "nproc": os.cpu_count(), "isa": isa,
            "affinity": len(os.sched_getaffinity(0)), "kernel": platform.release()}


def loadavg():
    return "%.2f %.2f %.2f" % os.getloadavg()


def git_rev():
    try:
        r = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                           capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=ROOT, capture_output=True, text=True).stdout.strip()
        return r.stdout.strip() + ("+dirty" if dirty else "")
    except OSError:
        return "?"


def default_gguf():
    out = subprocess.run(["bash", str(ROOT / "scripts" / "fetch_smollm2.sh")],
                         check=True, capture_output=True, text=True).stdout
    return pathlib.Path(out.strip().splitlines()[-1])


# --------------------------------------------------------------------------

def fmt(x, w=9):
    return f"{x:{w}.1f}" if x is not None else f"{'-':>{w}}"


def ratio(a, b):
    return f"{a / b:6.2f}x" if a and b else f"{'-':>7}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    ap.add_argument("--reps", type=int, default=3, help="measured runs per point (median; default 3)")
    ap.add_argument("--quick", action="store_true", help="1 rep, 32-token prompt, 32 decode tokens")
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument("--model", type=pathlib.Path, help="the Q4_1 GGUF (default: scripts/fetch_smollm2.sh)")
    ap.add_argument("--no-build", action="store_true", help="use the existing build/bench-smollm2* binaries")
    ap.add_argument("--json", type=pathlib.Path, help="also write all raw figures here")
    ap.add_argument("--engines", default="fused,nofuse,f32,a8",
                    help="ingot builds to run beside llama.cpp (default fused,nofuse,f32,a8; fused first "
                         "if named: --long and the roofline use the first)")
    ap.add_argument("--long", default="1024,4000",
                    help="prompt lengths for decode at long contexts (default 1024,4000; '' to skip)")
    a = ap.parse_args()
    if a.quick:
        a.reps, a.prompt_tokens, a.gen_tokens, a.long = 1, 32, 32, ""
    long_ctx = [int(x) for x in a.long.split(",") if x.strip()]
    threads = [int(t) for t in a.threads.split(",") if t.strip()]
    P, G = a.prompt_tokens, a.gen_tokens

    import llama_cpp
    mi = machine_info()
    la_start = loadavg()
    print(f"machine:  {mi['cpu']}, nproc {mi['nproc']} (affinity {mi['affinity']}), "
          f"{' '.join(mi['isa']) or 'no AVX2'}; kernel {mi['kernel']}")
    print(f"load average at start: {la_start}   (other jobs share these cores: "
          f"compare numbers only within one run)")
    gguf = a.model or default_gguf()
    llama_bench_path()
    llama_extra, llama_how = llama_settings(gguf, threads[0])
    print(f"model:    {gguf.name}   ingot {git_rev()}   llama.cpp's llama-bench from llama-cpp-python "
          f"{llama_cpp.__version__}'s tree, {llama_how}")
    print(f"work:     prefill {P} tokens, decode {G} tokens (greedy), threads {threads}, "
          f"warm-up 1 + {a.reps} reps, median", flush=True)
    bw = {t: dram_bandwidth(t) for t in threads}
    print("DRAM read bandwidth (bench/membw.c, best of 15 x 1 GiB): " +
          ", ".join(f"{bw[t]:.1f} GB/s at {t} thread{'s' if t > 1 else ''}" for t in threads), flush=True)

    # ---- builds
    engines = []          # labels of ingot engines that built
    failed = {}
    chosen = [e.strip() for e in a.engines.split(",") if e.strip()]
    known = {label.replace("ingot ", ""): (label, name, flags) for label, name, flags in INGOT_ENGINES}
    for e in chosen:
        if e not in known:
            raise SystemExit(f"--engines: unknown engine '{e}' (one of {', '.join(known)})")
    for label, name, flags in (known[e] for e in chosen):
        if a.no_build:
            err = None if ingot_bin(name).is_file() else f"{ingot_bin(name)} missing (--no-build)"
        else:
            t = time.perf_counter()
            err = build_ingot(gguf, name, flags)
            if not err:
                print(f"built     build/{name}/{name} ({time.perf_counter() - t:.1f} s)", flush=True)
        if err:
            failed[label] = err
            print(f"SKIPPED   {label}: build failed:\n    " + err.replace("\n", "\n    "), flush=True)
        else:
            engines.append((label, name))

    # ---- bytes a decoded token must read (the default build's weights and KV cache)
    w_bytes, kv_bpt = ingot_bytes(engines[0][1]) if engines else (None, None)

    def roofline(t, pos):
        return bw[t] * 1e9 / (w_bytes + kv_bpt * pos) if w_bytes else None

    # ---- llama.cpp contexts (one per thread count) and the prompt
    vocab = llama_tokenizer(gguf)
    prompt, prompt_ids = make_prompt(vocab, P)
    print(f"prompt:   {len(prompt)} chars -> {len(prompt_ids)} tokens (llama.cpp)", end="")
    for label, name in engines[:1]:
        ids = ingot_tokenize(name, prompt)
        if len(ids) != P:
            raise SystemExit(f"\ningot tokenizes the prompt to {len(ids)} tokens, not {P}")
        print(f", {len(ids)} tokens (ingot), ids {'identical' if ids == prompt_ids else 'DIFFER'}",
              end="")
    print(flush=True)

    # ---- measure
    all_labels = [lab for lab, _ in engines] + [LLAMA]
    raw = {(lab, t): {"prefill": [], "decode": []} for lab in all_labels for t in threads}

    def one(label, name, t):
        if label == LLAMA:
            pf, dc = run_llama(gguf, P, G, t, llama_extra)
        else:
            pf, dc, n = run_ingot(name, prompt, G, t)
            if n != P:
                raise RuntimeError(f"{label}: prefill saw {n} tokens, not {P}")
        return pf, dc

    points = [(lab, name, t) for t in threads for lab, name in engines + [(LLAMA, None)]]
    t_start = time.perf_counter()
    for lab, name, t in points:                       # warm-up
        one(lab, name, t)
    for rep in range(a.reps):
        # each rep starts one point later, so that no engine always runs right after the same one
        # (a run's first milliseconds can pay for what the previous process left behind)
        for lab, name, t in points[rep % len(points):] + points[:rep % len(points)]:
            pf, dc = one(lab, name, t)
            raw[(lab, t)]["prefill"].append(pf)
            raw[(lab, t)]["decode"].append(dc)
        print(f"rep {rep + 1}/{a.reps} done ({time.perf_counter() - t_start:.0f} s, "
              f"load {loadavg()})", flush=True)
    la_end = loadavg()

    med = {k: {m: statistics.median(v[m]) for m in v} for k, v in raw.items()}

    # ---- report
    print()
    print(f"tokens/s, median of {a.reps} (min-max in brackets); prefill = {P}-token prompt, "
          f"decode = {G} tokens")
    print(f"{'engine':<14}{'thr':>4}  {'prefill':>9} {'':<15}  {'decode':>9} {'':<15} {'% roofline':>10}")
    for t in threads:
        for lab in [known[e][0] for e in chosen] + [LLAMA]:
            if lab in failed:
                print(f"{lab:<14}{t:>4}  {'(build failed)':>9}")
                continue
            v = raw[(lab, t)]
            m = med[(lab, t)]
            rng = lambda xs: f"[{min(xs):.1f}-{max(xs):.1f}]"  # noqa: E731
            roof = roofline(t, P + G / 2)
            pct = f"{100 * m['decode'] / roof:9.0f}%" if roof else ""
            print(f"{lab:<14}{t:>4}  {fmt(m['prefill'])} {rng(v['prefill']):<15}  "
                  f"{fmt(m['decode'])} {rng(v['decode']):<15} {pct}")
        if w_bytes:
            print(f"{'roofline':<14}{t:>4}  {'':>9} {'':<15}  {fmt(roofline(t, P + G / 2))}   "
                  f"({w_bytes / 2**20:.1f} MiB of weights + {kv_bpt} B of KV per position, {bw[t]:.1f} GB/s)")

    def get(lab, t, m):
        return med.get((lab, t), {}).get(m)

    print()
    print("ratios of medians (>1: the first is faster)")
    print(f"{'':<28}{'thr':>4}  {'prefill':>8}  {'decode':>8}")
    pairs = [("ingot fused", LLAMA), ("ingot nofuse", LLAMA), ("ingot f32", LLAMA), ("ingot a8", LLAMA),
             ("ingot q16", LLAMA), ("ingot fused", "ingot nofuse"), ("ingot fused", "ingot f32"),
             ("ingot a8", "ingot fused"), ("ingot fused", "ingot q16")]
    for t in threads:
        for x, y in pairs:
            if x not in all_labels or y not in all_labels:
                continue
            name = f"{x.replace('ingot ', '')} / {y.replace('ingot ', '')}"
            print(f"{name:<28}{t:>4}  {ratio(get(x, t, 'prefill'), get(y, t, 'prefill')):>8}  "
                  f"{ratio(get(x, t, 'decode'), get(y, t, 'decode')):>8}")
    if len(threads) > 1:
        t0, t1 = threads[0], threads[-1]
        print()
        print(f"scaling {t1} threads / {t0} thread(s), by engine (prefill, decode):")
        for lab in all_labels:
            print(f"  {lab:<14}{ratio(get(lab, t1, 'prefill'), get(lab, t0, 'prefill')):>8}"
                  f"{ratio(get(lab, t1, 'decode'), get(lab, t0, 'decode')):>8}")
    long_raw = {}
    if long_ctx and engines:
        t = threads[-1]
        GL = 32
        print()
        print(f"decode at long contexts: {GL} tokens after a prompt of L tokens, {t} thread(s), "
              f"median of {a.reps}; ratio: to the same engine's decode after {P} tokens")
        print(f"{'L':>6}  {'ingot':>9} {'ratio':>7} {'% roof':>7}  {'llama.cpp':>9} {'ratio':>7} {'% roof':>7}  "
              f"{'ingot / llama.cpp':>17}")
        fused = engines[0]
        for L in long_ctx:
            text, _ = make_prompt(vocab, L)
            ri, rl = [], []
            one_i = lambda: run_ingot(fused[1], text, GL, t)[1]  # noqa: E731
            one_l = lambda: llama_bench(gguf, t, ["-p", "0", "-n", str(GL), "-d", str(L)],  # noqa: E731
                                        llama_extra)[0]
            for _ in range(a.reps):
                ri.append(one_i())
                rl.append(one_l())
            mi_, ml_ = statistics.median(ri), statistics.median(rl)
            long_raw[L] = {"ingot": ri, "llama.cpp": rl}
            roof = roofline(t, L + GL / 2)
            print(f"{L:>6}  {mi_:9.1f} {mi_ / med[(fused[0], t)]['decode']:6.2f}x {100 * mi_ / roof:6.0f}%  "
                  f"{ml_:9.1f} {ml_ / med[(LLAMA, t)]['decode']:6.2f}x {100 * ml_ / roof:6.0f}%  "
                  f"{mi_ / ml_:16.2f}x", flush=True)
        la_end = loadavg()

    print()
    print(f"load average at start: {la_start}, at end: {la_end}; "
          f"measuring took {time.perf_counter() - t_start:.0f} s")

    if a.json:
        a.json.write_text(json.dumps({
            "machine": mi, "load_start": la_start, "load_end": la_end, "model": gguf.name,
            "ingot_rev": git_rev(), "llama_cpp_python": llama_cpp.__version__,
            "llama_bench_extra": llama_extra,
            "prompt_tokens": P, "gen_tokens": G, "reps": a.reps, "threads": threads,
            "dram_gbs": bw, "weight_bytes": w_bytes, "kv_bytes_per_position": kv_bpt, "long": long_raw,
            "build_failed": failed,
            "results": [{"engine": lab, "threads": t, **raw[(lab, t)],
                         "median_prefill": med[(lab, t)]["prefill"],
                         "median_decode": med[(lab, t)]["decode"]}
                        for lab in all_labels for t in threads],
        }, indent=1) + "\n")


if __name__ == "__main__":
    main()
