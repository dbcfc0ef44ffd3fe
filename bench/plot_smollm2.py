#!/usr/bin/env python3
"""Plots a bench_smollm2.py run (its --json output) as a PNG: decode and prefill tokens/s against
threads for each engine beside the DRAM roofline, and decode against context length for ingot
and llama.cpp. Not a test.

    python3 bench/bench_smollm2.py --json run.json
    python3 bench/plot_smollm2.py run.json bench/smollm2.png      # needs matplotlib (pip)
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    run = json.loads(open(sys.argv[1]).read())
    threads = run["threads"]
    engines = sorted({r["engine"] for r in run["results"]}, key=lambda e: (e == "llama.cpp", e))
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    for ax, metric, title in ((axes[0], "median_decode", "decode"), (axes[1], "median_prefill", "prefill")):
        for e in engines:
            pts = [(r["threads"], r[metric]) for r in run["results"] if r["engine"] == e and r.get(metric)]
            if pts:
                ax.plot(*zip(*pts), marker="o", label=e, linestyle="--" if e == "llama.cpp" else "-")
        if metric == "median_decode" and run.get("weight_bytes"):
            ctx = run["prompt_tokens"] + run["gen_tokens"] / 2
            per_token = run["weight_bytes"] + ctx * run["kv_bytes_per_position"]
            roof = [(t, run["dram_gbs"][str(t)] * 1e9 / per_token) for t in threads if str(t) in run["dram_gbs"]]
            if roof:
                ax.plot(*zip(*roof), color="gray", linestyle=":", label="DRAM roofline")
        ax.set_title(f"{title}, tokens/s ({run['prompt_tokens']}-token prompt)")
        ax.set_xlabel("threads")
        ax.set_xticks(threads)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    ax = axes[2]
    longs = run.get("long") or {}
    if longs:
        top = threads[-1]
        base = {r["engine"]: r["median_decode"] for r in run["results"] if r["threads"] == top}
        lengths = sorted(int(k) for k in longs)
        for e, key, style in (("ingot fused", "ingot", "-"), ("llama.cpp", "llama.cpp", "--")):
            xs = [run["prompt_tokens"]] + lengths
            ys = [base.get(e)] + [sorted(longs[str(L)][key])[len(longs[str(L)][key]) // 2] for L in lengths]
            ax.plot(xs, ys, marker="o", linestyle=style, label=e.replace(" fused", ""))
        ax.set_title(f"decode after a prompt of L tokens, {top} threads")
        ax.set_xlabel("L (positions)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    else:
        ax.axis("off")
    cpu = run["machine"].get("cpu", "") if isinstance(run.get("machine"), dict) else ""
    fig.suptitle(f"SmolLM2-135M-Instruct {run['model']}: ingot {run['ingot_rev']} vs llama-cpp-python "
                 f"{run['llama_cpp_python']}; {cpu}; load {run['load_start']} at start", fontsize=9)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)
    print(sys.argv[2])


if __name__ == "__main__":
    main()
