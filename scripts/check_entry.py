#!/usr/bin/env python3
"""ingot check ENTRY...: is a models.lua description right? Ask transformers.

For every Hugging Face architecture the entry lists (`hf = {...}`), this
builds tiny random models with transformers — random config values chosen to
exercise every branch the config offers: odd head counts and GQA ratios,
several head sizes, tied and untied embeddings, a sliding window shorter than
the sequence where the config has one, RoPE scaling (linear, llama3, yarn)
where it has rope parameters, biases and expert counts where it has them —
every other option the entry reads from config.json varied (a switch either
way, a scale halved, kept or doubled: the keys come from the entry's config,
so a new entry's options are varied without a list here), partial rotary
widths (odd ones too), the residual form, the activation where the config
names one; fills every weight, norm and bias (and every *_bias parameter) with
random non-zero values (transformers' zeros and ones would hide a missing one),
saves it as f32, bf16 or f16, takes transformers' float32 logits
for a random token sequence, casts the checkpoint with ./ingot build (fused
and --no-fuse, KV cache in f32; --cudasim adds the CUDA backend on cudasim, fused
and --no-fuse), and prints
max |Δlogits| for the prompt in one step (prefill), in chunks of 7 (chunked)
and token by token (decode), with the verdict against the bound:

  1e-4 absolute, for f32 arithmetic on both sides (the engines differ only in
  summation order, observed about 1e-5), scaled by max(1, max|logit| / 8) for
  models whose logits are large, and at most 1e-3 max|logit| for models whose
  logits are small.

Each random model is saved in f32, bf16 or f16 (chosen with the config); the
reference runs in f32 on the stored values, so the bound is the same. The CUDA
builds run with INGOT_CUBLASLT=0: their prefill of f16/bf16 weights would
otherwise go through cuBLASLt with the activations rounded to the weights' type
(about 1e-3 of the logits, a choice of the GEMM that tests/test_cuda_models.py
bounds, not of the entry); the tiled GEMM keeps f32 activations.

Needs torch and transformers (scripts/setup.sh --check).
Exit status 0 when every case passes, 1 when one fails, 2 on a usage error.

  ingot check llama                     # every architecture of the llama entry, 3 seeds
  ingot check --all --seeds 1           # every entry, in one process (torch is imported once)
  ingot check qwen3 --seeds 8 --cudasim
  ingot check gemma2 --keep /tmp/g2     # keep the checkpoints to look at
  ingot check gptneox --models my.lua   # an entry of a copy being worked on
"""
import argparse
import json
import os
import pathlib
import random
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
N_TOKENS = 40
BOUND = 1e-4
REL_BOUND = 1e-3  # of max|logit|: what keeps the absolute bound meaningful for logits of a small scale
# checkpoints in each dtype transformers writes (a 2-D weight stored as bf16 and read as floats,
# or a bf16 norm read as f16, fails)
CHECKPOINT_DTYPES = {"f32": lambda torch: torch.float32, "bf16": lambda torch: torch.bfloat16,
                     "f16": lambda torch: torch.float16}
MODES = {"prefill": [], "chunked": ["--chunk", "7"], "decode": ["--decode"]}


def entries(models):
    """{entry name: ([HF architectures], {the top-level config.json keys its config reads})}, read
    from models.lua by Lua itself."""
    lua = ('local M = dofile(os.getenv("INGOT_MODELS")); for name, e in pairs(M) do '
           'local keys = {} for _, spec in pairs(type(e.config) == "table" and e.config or {}) do '
           'local hf = type(spec) == "table" and spec.hf or nil '
           'for _, k in ipairs(type(hf) == "table" and hf or {hf}) do keys[#keys + 1] = k end end '
           'io.write(name, "\\t", table.concat(e.hf or {}, ","), "\\t", table.concat(keys, ","), "\\n") end')
    r = subprocess.run(["lua5.4", "-e", lua], capture_output=True, text=True,
                       env=dict(os.environ, INGOT_MODELS=str(models)))
    if r.returncode != 0:
        sys.exit(f"ingot check: cannot read models.lua: {r.stderr.strip()}")
    out = {}
    for line in r.stdout.splitlines():
        name, archs, keys = line.split("\t")
        out[name] = ([a for a in archs.split(",") if a], {k for k in keys.split(",") if k and "." not in k})
    return out


def rope_variant(rng, theta):
    kind = rng.choice(["default", "default", "linear", "llama3", "yarn"])
    p = {"rope_type": kind, "rope_theta": theta}
    if kind == "linear":
        p["factor"] = rng.choice([2.0, 4.0])
    elif kind == "llama3":
        p.update(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=32)
    elif kind == "yarn":
        p.update(factor=4.0, original_max_position_embeddings=64)
    return p


def random_config(cfg_cls, rng, reads=frozenset()):
    """A small config of cfg_cls with random values for every key it has; reads: the config.json
    keys the entry reads."""
    base = cfg_cls().to_dict()
    heads = rng.choice([2, 3, 4, 6])
    kv = rng.choice([k for k in range(1, heads + 1) if heads % k == 0])
    head_dim = rng.choice([8, 12, 16, 24, 32])
    if heads * head_dim % 8:  # 3 x 12: the CUDA kernels read float rows in slices of 8 (as every real model's)
        heads = 6
    kw = dict(hidden_size=heads * head_dim, num_attention_heads=heads, num_key_value_heads=kv,
              intermediate_size=rng.randrange(48, 176, 16), num_hidden_layers=rng.choice([2, 3]),
              vocab_size=rng.randrange(300, 900), max_position_embeddings=256, initializer_range=0.1,
              rms_norm_eps=rng.choice([1e-5, 1e-6]), tie_word_embeddings=rng.random() < 0.5,
              bos_token_id=1, eos_token_id=2, pad_token_id=None)
    if "head_dim" in base:
        kw["head_dim"] = head_dim
    if "num_key_value_heads" not in base:  # every head has its own K and V
        kw["num_key_value_heads"] = heads
    theta = rng.choice([10000.0, 500000.0])
    if "rope_parameters" in base:
        kw["rope_parameters"] = rope_variant(rng, theta)
        if kw["rope_parameters"]["rope_type"] == "yarn":
            kw["max_position_embeddings"] = 256
        if "partial_rotary_factor" in (base["rope_parameters"] or {}):
            # partial rotary: a quarter, a half or all of each head; an odd width where the head
            # size makes one (transformers' default RoPE rotates it; its yarn needs an even one)
            factors = [0.25, 0.5, 1.0] if kw["rope_parameters"]["rope_type"] != "yarn" else [0.5, 1.0]
            kw["rope_parameters"]["partial_rotary_factor"] = rng.choice(factors)
            if kw["rope_parameters"]["rope_type"] == "yarn" and int(head_dim * 0.5) % 2:
                kw["rope_parameters"]["partial_rotary_factor"] = 1.0
    elif "rope_theta" in base:
        kw["rope_theta"] = theta
    if "sliding_window" in base:
        kw["sliding_window"] = rng.choice([None, rng.randrange(8, 24)]) if base["sliding_window"] is None \
            else rng.randrange(8, 24)
    if "use_sliding_window" in base:
        kw["use_sliding_window"] = False
    for key in ("attention_bias", "mlp_bias", "use_parallel_residual"):
        if key in base:
            kw[key] = rng.random() < 0.5
    if "layer_norm_eps" in base:
        kw["layer_norm_eps"] = rng.choice([1e-5, 1e-6])
    if base.get("hidden_act") in ("gelu", "gelu_new"):  # the exact GELU or its tanh form
        kw["hidden_act"] = rng.choice(["gelu", "gelu_new"])
    if "num_local_experts" in base:
        kw["num_local_experts"] = rng.choice([4, 8])
        kw["num_experts_per_tok"] = 2
        kw["router_jitter_noise"] = 0.0
    if "query_pre_attn_scalar" in base:
        kw["query_pre_attn_scalar"] = rng.choice([head_dim, 2 * head_dim])
    if "attn_logit_softcapping" in base:
        kw["attn_logit_softcapping"] = rng.choice([None, 20.0])
    if "final_logit_softcapping" in base:
        kw["final_logit_softcapping"] = rng.choice([None, 10.0])
    if "original_max_position_embeddings" in base:
        kw["original_max_position_embeddings"] = 256
    if "kv_lora_rank" in base:  # multi-head latent attention (DeepSeek-V2)
        nope = rng.choice([8, 12, 16])
        kw.update(q_lora_rank=rng.choice([None, rng.randrange(16, 64, 8)]), kv_lora_rank=rng.choice([16, 24, 32]),
                  qk_nope_head_dim=nope, qk_rope_head_dim=rng.choice([8, 16]), v_head_dim=rng.choice([nope, nope + 8]))
        kw.pop("head_dim", None)
        kw["num_key_value_heads"] = kw["num_attention_heads"]  # the latent expands to every head
        rp = kw.get("rope_parameters") or {}
        if rp.get("rope_type") == "yarn":
            rp.update(mscale=rng.choice([0.707, 1.0]), mscale_all_dim=rng.choice([0.707, 0.8]))
    if "n_routed_experts" in base:  # and its MoE: shared experts, group-limited routing, dense first layers
        groups = rng.choice([1, 2, 4])
        kw.update(n_routed_experts=8, num_experts_per_tok=rng.choice([2, 3]), moe_intermediate_size=rng.randrange(16, 48, 8),
                  n_shared_experts=rng.choice([1, 2]), first_k_dense_replace=rng.choice([0, 1]),
                  routed_scaling_factor=rng.choice([1.0, 2.0]), n_group=groups, topk_group=max(1, groups // 2),
                  topk_method="group_limited_greedy" if groups > 1 else "greedy")
    if "layer_types" in base:
        kw.pop("layer_types", None)  # derived from the window and the layer count
    if "mamba_n_heads" in base:  # Granite 4.0 hybrid: Mamba-2 layers among attention layers
        kw["num_hidden_layers"] = rng.choice([3, 4])
        kinds = ["mamba", "attention"] + [rng.choice(["mamba", "attention"]) for _ in range(kw["num_hidden_layers"] - 2)]
        rng.shuffle(kinds)
        ssm_heads = rng.choice([h for h in (2, 4, 8) if 2 * kw["hidden_size"] % h == 0 and 2 * kw["hidden_size"] // h % 8 == 0]
                               or [2])
        experts = rng.choice([0, 4])
        kw.update(layer_types=kinds, mamba_n_heads=ssm_heads, mamba_n_groups=rng.choice([g for g in (1, 2) if ssm_heads % g == 0]),
                  mamba_d_state=rng.choice([8, 16]), mamba_d_conv=rng.choice([2, 4]), mamba_expand=2, mamba_d_head="auto",
                  shared_intermediate_size=rng.randrange(32, 96, 16), num_local_experts=experts,
                  num_experts_per_tok=2 if experts else 0, intermediate_size=rng.randrange(16, 48, 16),
                  position_embedding_type=rng.choice(["rope", "nope"]),
                  time_step_limit=rng.choice([(0.0, float("inf")), (0.05, 0.5)]))  # the second clamps dt both ways
    if "linear_num_value_heads" in base:  # Qwen3-Next: Gated DeltaNet layers among gated attention layers
        kw["num_hidden_layers"] = rng.choice([3, 4])
        kinds = ["linear_attention", "full_attention"] + [rng.choice(["linear_attention", "full_attention"])
                                                          for _ in range(kw["num_hidden_layers"] - 2)]
        rng.shuffle(kinds)
        kh = rng.choice([1, 2])
        experts = rng.choice([0, 4])
        kw.update(layer_types=kinds, linear_num_key_heads=kh, linear_num_value_heads=kh * rng.choice([1, 2]),
                  linear_key_head_dim=rng.choice([8, 16]), linear_value_head_dim=rng.choice([8, 16]),
                  linear_conv_kernel_dim=rng.choice([2, 4]), num_experts=experts, num_experts_per_tok=2,
                  moe_intermediate_size=rng.randrange(16, 48, 16), shared_expert_intermediate_size=rng.randrange(16, 48, 16),
                  norm_topk_prob=rng.random() < 0.5, decoder_sparse_step=1,
                  mlp_only_layers=[kw["num_hidden_layers"] - 1] if rng.random() < 0.5 else [])
    if "conv_L_cache" in base:  # LFM2: short convolutions among the attention layers, 2 to 4 taps
        kw["num_hidden_layers"] = rng.choice([3, 4])
        kinds = ["conv", "full_attention"] + [rng.choice(["conv", "full_attention"]) for _ in range(kw["num_hidden_layers"] - 2)]
        rng.shuffle(kinds)
        kw.update(layer_types=kinds, conv_L_cache=rng.choice([2, 3, 4]), conv_bias=rng.random() < 0.5,
                  block_auto_adjust_ff_dim=rng.random() < 0.5, block_multiple_of=16, norm_eps=rng.choice([1e-5, 1e-6]))
    # every other option the entry reads, varied: a switch either way, a scale halved, kept or
    # doubled (what the entry reads, so a new entry's options are varied without a list here)
    for key in sorted(reads - set(kw)):
        v = base.get(key)
        if isinstance(v, bool):
            kw[key] = rng.random() < 0.5
        elif isinstance(v, float) and v != 0:
            kw[key] = v * rng.choice([0.5, 1.0, 2.0])
    return kw


def randomize(model, torch):
    """Every norm and bias random and non-zero; weights from initializer_range."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                neutral = 0.0 if float(p.mean()) == 0.0 else 1.0  # (1 + w) norms start at 0
                p.copy_(neutral + 0.25 * torch.randn_like(p))
            elif name.endswith("bias"):  # .bias and every *_bias parameter
                p.copy_(0.1 * torch.randn_like(p))


def head_dim_of(kw):
    return kw["hidden_size"] // kw["num_attention_heads"]


def ingot_logits(binary, tokens, mode, out):
    r = subprocess.run([str(binary), "logits", "--tokens", ",".join(map(str, tokens)), "--out", str(out),
                        *MODES[mode]], capture_output=True, text=True, timeout=900,
                       env=dict(os.environ, INGOT_CUBLASLT="0"))  # f32 activations on CUDA too (see above)
    if r.returncode != 0:
        return None, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"
    import numpy as np
    return np.fromfile(out, dtype="<f4").reshape(len(tokens), -1), None


def build(model_dir, name, opts):
    """./ingot build: (the binary, None), or (None, the whole error) with its build folder removed."""
    r = subprocess.run([str(ROOT / "ingot"), "build", str(model_dir), "--name", name, *opts],
                       capture_output=True, text=True, timeout=1800, env=dict(os.environ, INGOT_PROGRESS="0"))
    if r.returncode != 0:
        shutil.rmtree(ROOT / "build" / name, ignore_errors=True)
        return None, r.stderr.strip() or f"exit status {r.returncode}"
    return pathlib.Path(r.stdout.strip().splitlines()[-1]), None


def draw_reference(model_cls, arch, seed, reads, d, torch):
    """A random tiny model of arch saved in d, and transformers' float32 logits for a random
    sequence: (config kwargs, config, checkpoint dtype, tokens, logits). A config transformers
    itself cannot run (StableLM's odd partial rotary widths) is drawn again: the reference must
    exist."""
    for attempt in range(4):
        rng = random.Random(seed * 7919 + len(arch) + attempt * 104729)
        kw = random_config(model_cls.config_class, rng, reads)
        torch.manual_seed(seed)
        cfg = model_cls.config_class(attn_implementation="eager", **kw)
        model = model_cls(cfg).eval()
        randomize(model, torch)
        shutil.rmtree(d, ignore_errors=True)
        # the checkpoint's dtype: the reference runs in f32 on the very values stored, read back
        # from the file (a model cast to bf16 and back would keep bf16-rounded buffers, RoPE's
        # inv_freq among them)
        ckpt = rng.choice(list(CHECKPOINT_DTYPES))
        model.to(CHECKPOINT_DTYPES[ckpt](torch)).save_pretrained(d, safe_serialization=True)
        model = model_cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
        tokens = [rng.randrange(cfg.vocab_size) for _ in range(N_TOKENS)]
        try:
            with torch.no_grad():
                return kw, cfg, ckpt, tokens, model(torch.tensor([tokens])).logits[0].float().numpy()
        except RuntimeError as e:
            if attempt == 3:
                raise
            print(f"{arch:24s} {seed:4d}  transformers cannot run this config ({str(e)[:60]}): drawn again")


def summary_of(kw, cfg, ckpt):
    """The row's config column: heads, head size, partial rotary, residual form, layers, RoPE
    scaling, window, biases, tied embeddings, checkpoint dtype."""
    rp = kw.get("rope_parameters") or {}
    return (f"h{cfg.num_attention_heads}/kv{kw['num_key_value_heads']} d{kw.get('head_dim', head_dim_of(kw))} "
            f"{'rot' + str(rp['partial_rotary_factor']) + ' ' if rp.get('partial_rotary_factor', 1) != 1 else ''}"
            f"{'par ' if kw.get('use_parallel_residual') else ''}"
            f"L{cfg.num_hidden_layers} "
            f"{''.join('c' if k == 'conv' else 'a' for k in kw['layer_types']) + ' k' + str(kw['conv_L_cache']) + ' ' if 'conv_L_cache' in kw else ''}"
            f"{''.join('m' if k == 'mamba' else 'a' for k in kw['layer_types']) + ' ssm' + str(kw['mamba_n_heads']) + 'x' + str(kw['mamba_d_state']) + 'g' + str(kw['mamba_n_groups']) + (' e' + str(kw['num_local_experts']) if kw['num_local_experts'] else '') + ' ' + kw['position_embedding_type'] + ' ' if 'mamba_n_heads' in kw else ''}"
            f"{'cbias ' if kw.get('conv_bias') else ''}"
            f"{''.join('l' if k == 'linear_attention' else 'a' for k in kw['layer_types']) + ' dn' + str(kw['linear_num_key_heads']) + '/' + str(kw['linear_num_value_heads']) + ' e' + str(kw['num_experts']) + ' ' if 'linear_num_value_heads' in kw else ''}"
            f"{rp.get('rope_type', '')} "
            f"{'win' + str(kw['sliding_window']) if kw.get('sliding_window') else ''} "
            f"{'bias' if kw.get('attention_bias') or kw.get('mlp_bias') else ''}"
            f"{'tied' if kw['tie_word_embeddings'] else ''} {ckpt}").strip()


def main():
    ap = argparse.ArgumentParser(prog="ingot check", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("entry", nargs="*", help="models.lua entries (llama, qwen2, ...)")
    ap.add_argument("--all", action="store_true", help="every entry of models.lua")
    ap.add_argument("--seeds", type=int, default=3, help="random models per architecture (default 3)")
    ap.add_argument("--first-seed", type=int, default=1)
    ap.add_argument("--cudasim", action="store_true", help="also the CUDA backend on cudasim (slow)")
    ap.add_argument("--no-unfused", action="store_true", help="skip the --no-fuse builds")
    ap.add_argument("--models", metavar="FILE", default=str(ROOT / "models.lua"),
                    help="the descriptions to check (default: the tree's models.lua)")
    ap.add_argument("--keep", metavar="DIR", help="keep the checkpoints and logits in DIR (and the builds, build/check-*)")
    args = ap.parse_args()
    known = entries(args.models)
    if args.all == bool(args.entry):
        print("ingot check: name the entries to check, or --all (not both)", file=sys.stderr)
        return 2
    chosen = sorted(known) if args.all else list(dict.fromkeys(args.entry))
    unknown = [e for e in chosen if e not in known]
    if unknown:
        print(f"ingot check: no entry '{unknown[0]}' in models.lua (entries: {', '.join(sorted(known))})",
              file=sys.stderr)
        return 2
    try:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        import numpy as np
        import torch
        import transformers
        transformers.utils.logging.disable_progress_bar()
        transformers.utils.logging.set_verbosity_error()
    except ImportError as e:
        print(f"ingot check: needs torch and transformers ({e.name} is missing): scripts/setup.sh --check",
              file=sys.stderr)
        return 2
    torch.set_num_threads(2)
    work = pathlib.Path(args.keep) if args.keep else pathlib.Path(tempfile.mkdtemp(prefix="ingot-check-"))
    work.mkdir(parents=True, exist_ok=True)
    # the KV cache in f32: the bound is for f32 arithmetic on both sides
    exact = ["--kv-dtype", "f32", "--models", os.path.abspath(args.models)]
    backends = [("cpu", exact, "fused")] + ([] if args.no_unfused else [("cpu", ["--no-fuse", *exact], "unfused")])
    if args.cudasim:
        cuda = ["--backend", "cuda", "--cudasim", *exact]
        backends.append(("cudasim", cuda, "fused"))
        if not args.no_unfused:
            backends.append(("cudasim", ["--no-fuse", *cuda], "unfused"))
    failures = 0
    print(f"{'architecture':24s} {'seed':>4s}  {'config':44s} {'backend':8s} {'fusion':8s} "
          f"{'prefill':>9s} {'chunked':>9s} {'decode':>9s}  bound     verdict")
    for entry in chosen:
        if len(chosen) > 1:
            print(f"== {entry}", flush=True)
        archs, reads = known[entry]
        for arch in archs:
            print(f"{arch}: the config.json keys {entry} reads (each switch and scale among them varied): "
                  f"{', '.join(sorted(reads)) or '-'}")
            model_cls = getattr(transformers, arch, None)
            if model_cls is None:
                print(f"{arch:24s} transformers {transformers.__version__} has no such class: skipped")
                continue
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                d = work / f"{entry}-{arch}-{seed}"
                kw, cfg, ckpt, tokens, ref = draw_reference(model_cls, arch, seed, reads, d, torch)
                top = float(np.abs(ref).max())
                bound = min(BOUND * max(1.0, top / 8), REL_BOUND * top)
                summary = summary_of(kw, cfg, ckpt)
                for backend, opts, fusion in backends:
                    # the process id in the name: two checks at once (of one entry, too) never share a build
                    name = f"check-{os.getpid()}-{entry}-{arch.lower()}-{seed}-{backend}-{fusion}"
                    binary, err = build(d, name, opts)
                    cells, verdict = [], "PASS"
                    if binary is None:
                        verdict, cells = "FAIL (build)", ["-"] * 3
                    else:
                        for mode in MODES:
                            got, err = ingot_logits(binary, tokens, mode, work / f"{name}-{mode}.f32")
                            if got is None:
                                cells.append("error")
                                verdict = f"FAIL ({mode}: {err[:100]})"
                                continue
                            delta = float(np.abs(got - ref).max())
                            cells.append(f"{delta:9.2e}")
                            if not delta <= bound:
                                verdict = "FAIL"
                    failures += verdict != "PASS"
                    if binary is not None and not args.keep:  # build/check-*: nothing to reuse once compared
                        shutil.rmtree(binary.parent, ignore_errors=True)
                    print(f"{arch:24s} {seed:4d}  {summary[:44]:44s} {backend:8s} {fusion:8s} "
                          f"{cells[0]:>9s} {cells[1]:>9s} {cells[2]:>9s}  {bound:.1e}  {verdict}", flush=True)
                    if binary is None:  # the whole error: the generator's line, or the compiler's messages
                        print("".join("    " + line + "\n" for line in err.splitlines()[-40:]), end="", flush=True)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{'all passed' if failures == 0 else f'{failures} failed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
