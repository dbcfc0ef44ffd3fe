"""CUDA kernel library (kernels/cuda/*.cuh), proven without a GPU.

* nvcc: every header compiles, through a translation unit that instantiates its kernels at model
  shapes, with warnings as errors, for sm_86 (make test-full: sm_80/86/89/90); ptxas's
  registers / shared memory / spills per kernel are tabulated (printed, and written to build/_obj/cuda_ptxas.txt); no spills allowed.
* NVRTC: every header compiles alone (no include path but kernels/cuda: self-contained) to PTX
  for compute_80 and compute_90 (tests/cuda_kernels/nvrtc_compile.cpp, linked with -lnvrtc).
  The KV kernels compile both ways again with the q8_0 KV pool (IG_KV_Q8).
* cudasim: the test programs tests/cuda_kernels/t_*.cu run the kernels on the CPU (plain and race
  builds, default and shuffled schedules) and compare them with kernels/cpu; every run of one
  program must also give bit-identical results (the kernels are deterministic). t_attn and
  t_rope_kv run again over a q8_0 pool (t_*_kvq8: the stored bytes must be the CPU store's). Under
  INGOT_SAN=1 (make test's sanitizer pass) the programs are built in cudasim's asan mode instead.
Missing tools fail the tests; nothing is skipped.
"""
import concurrent.futures
import importlib.util
import os
import re
import shutil
import subprocess

import pytest

from conftest import BREADTH, FULL

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KDIR = os.path.join(ROOT, "kernels", "cuda")
TDIR = os.path.join(ROOT, "tests", "cuda_kernels")
OBJ = os.path.join(ROOT, "build", "_obj", "cuda_kernels")
CUDA = os.environ.get("CUDA_HOME", "/usr/local/cuda")
# sm_86 stands for sm_86/89 (1536 threads per SM: launch bounds leave the fewest registers) and sm_90
# for the H100; sm_80 shares sm_90's limits. make test-full compiles for all four.
# The default tier compiles for sm_86 alone (its register limits are the tightest; the model builds
# of test_cuda_models compile every kernel for sm_90).
ARCHS = ["80", "86", "89", "90"] if FULL else ["86"]

_spec = importlib.util.spec_from_file_location("cudasim_build", os.path.join(ROOT, "kernels", "cudasim", "cudasim_build.py"))
cb = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cb)

# Kernels instantiated per header at the shapes generated models use (SmolLM2-135M: hidden 576,
# 9/3 heads of 64, ff 1536, vocab 49152; Llama-3-8B-like: 4096, 32/8 heads of 128, ff 14336;
# Gemma-2-like: head_dim 256, group 2). NVRTC and nvcc compile the same list.
KQUANTS = ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS")  # 256-element super-blocks: rows of 1536, 4096, ...
REPACKED = ("Q4_Z", "Q8_Z", "F8_B32")  # what GPTQ/AWQ/FP8 checkpoints load as (runtime/load/quant_ckpt.h)
INSTANCES = {
    "embed.cuh": ["embed_kernel<IG_F32, 576>", "embed_kernel<IG_F16, 4096>", "embed_kernel<IG_BF16, 2304>",
                  "embed_kernel<IG_Q8_0, 576>", "embed_kernel<IG_Q4_0, 4096>", "embed_kernel<IG_Q4_1, 576>",
                  "embed_kernel<IG_Q5_0, 576>", "embed_kernel<IG_IQ4_NL, 2304>"]
                 + ["embed_kernel<IG_%s, 4096>" % dt for dt in KQUANTS],
    "norm.cuh": ["rmsnorm_kernel<576>", "rmsnorm_kernel<4096, 4096, 1024>", "rmsnorm_kernel<4096, 128, 256>",
                 "rmsnorm_kernel<2304, 256, 256>", "layernorm_kernel<2560>", "layernorm_kernel<4096, 4096, 1024>",
                 "layernorm_kernel<4096, 128, 256, true>"],
    "gemv_q.cuh": ["gemv_q_kernel<IG_%s, %d, %d>" % (dt, k, t)
                   for dt in ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "IQ4_NL", "MXFP4")
                   for (k, t) in ((576, 1), (1536, 8), (4096, 1), (14336, 4))]
                  + ["gemv_q_kernel<IG_%s, %d, %d>" % (dt, k, t) for dt in KQUANTS + REPACKED
                     for (k, t) in ((1536, 8), (4096, 1), (14336, 4))],
    "rope_kv.cuh": ["rope_kv_kernel<9, 3, 64, 64, true>", "rope_kv_kernel<32, 8, 128, 128, false>",
                    "rope_kv_kernel<8, 4, 256, 256, false>", "rope_kv_kernel<16, 2, 128, 64, false>"],
    "attn_decode.cuh": ["attn_decode_kernel<64, 3, 3>", "attn_decode_kernel<64, 1, 9>",
                        "attn_decode_kernel<128, 4, 8>", "attn_decode_kernel<128, 8, 8>",
                        "attn_decode_kernel<256, 2, 4>",
                        "attn_decode_combine_kernel<64, 9>", "attn_decode_combine_kernel<128, 32>",
                        "attn_decode_combine_kernel<256, 8>"],
    "attn_prefill.cuh": ["attn_prefill_kernel<64, 3, 3, 16>", "attn_prefill_kernel<64, 1, 9, 32>",
                         "attn_prefill_kernel<128, 4, 8, 4>", "attn_prefill_kernel<128, 1, 32, 16>"],
    "elementwise.cuh": ["silu_mul_kernel<1536>", "gelu_tanh_mul_kernel<9216>", "add_kernel<576>",
                        "softcap_kernel<256000>", "scale_kernel<2304>"],
    "argmax.cuh": ["argmax_kernel<49152>", "argmax_kernel<128256, 512>"],
    "gemm_q.cuh": ["gemm_q_kernel<IG_%s, %d>" % (dt, k) for dt in ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1",
                                                                     "Q5_0", "Q5_1", "IQ4_NL", "MXFP4")
                                                for k in (576, 4096)]
                  + ["gemm_q_kernel<IG_%s, 4096>" % dt for dt in KQUANTS + REPACKED],
    "pack.cuh": ["pack_kernel<576, IG_F16>", "pack_kernel<4096, IG_BF16>", "pack_kernel<2304, IG_F32>"],
    "attn_rows.cuh": ["attn_rows_kernel<64, 3, 3>", "attn_rows_kernel<12, 4, 2>", "attn_rows_kernel<40, 2, 1>",
                      "attn_rows_kernel<256, 2, 4>", "attn_rows_kernel<576, 16, 1, 512, true>"],  # + DeepSeek-V2-Lite's MLA
    # DeepSeek-V2-Lite's absorbed W_UK^T and W_UV blocks of kv_b_proj (16 heads of 128 + 128 rows, 512 columns)
    "head_linear.cuh": ["head_linear_kernel<IG_BF16, 16, 256, 0, 128, 512, true>",
                        "head_linear_kernel<IG_Q8_0, 16, 256, 128, 128, 512, false>"],
    # LFM2-1.2B's short convolution (2048 channels, 3 taps); a Mamba-2 convolution of 4 taps over
    # x|B|C (Granite-4.0-H: 3072 + 2 x 128 channels); its scan (48 heads of 64, state 128, 1 group);
    # Qwen3-Next-80B's gated delta rule (16 key heads, 32 value heads, 128 x 128)
    "conv.cuh": ["causal_conv_kernel<2048, 3>", "causal_conv_keep_kernel<2048, 3>", "causal_conv_kernel<3328, 4>",
                 "causal_conv_keep_kernel<3328, 4>"],
    "ssm.cuh": ["ssm_scan_kernel<48, 64, 128, 1>", "ssm_scan_kernel<128, 64, 128, 8>"],
    "delta.cuh": ["delta_scan_kernel<16, 32, 128, 128>"],
    "moe.cuh": ["moe_route_kernel<IG_BF16, 4096, 8, 2>", "moe_route_kernel<IG_Q4_1, 4096, 8, 2>",
                "moe_route_kernel<IG_F32, 2048, 64, 6>", "moe_combine_kernel<4096, 8, 2>", "moe_combine_kernel<2048, 64, 6>"],
}
# The kernels that store or read the KV pool again with its q8_0 element (--kv-dtype q8_0: the
# generated source defines IG_KV_Q8 1): nvcc (no spills) and NVRTC compile these too. Rows are
# whole blocks of 32 values there, so only head dims that are multiples of 32: SmolLM2's and the
# Llama-3-like shapes, the widest decode state (GROUP 8 x 128) and DeepSeek-V2-Lite's MLA rows.
KVQ8_DEFINE = "IG_KV_Q8=1"
KVQ8_INSTANCES = {
    "rope_kv.cuh": ["rope_kv_kernel<9, 3, 64, 64, true>", "rope_kv_kernel<32, 8, 128, 128, false>"],
    "attn_decode.cuh": ["attn_decode_kernel<64, 3, 3>", "attn_decode_kernel<128, 8, 8>",
                        "attn_decode_kernel<256, 2, 4>"],
    "attn_prefill.cuh": ["attn_prefill_kernel<64, 3, 3, 16>", "attn_prefill_kernel<128, 4, 8, 4>"],
    "attn_rows.cuh": ["attn_rows_kernel<64, 3, 3>", "attn_rows_kernel<576, 16, 1, 512, true>"],
}
# (header, macro definitions): every translation unit nvcc and NVRTC compile
BUILDS = [(h, ()) for h in sorted(INSTANCES)] + [(h, (KVQ8_DEFINE,)) for h in sorted(KVQ8_INSTANCES)]


def instances(header, defines):
    return KVQ8_INSTANCES[header] if KVQ8_DEFINE in defines else INSTANCES[header]


# cudasim test programs and the headers each covers (t_X_kvq8: t_X.cu built with IG_KV_Q8 and
# KC_KV_Q8, the kernels and the CPU reference over a q8_0 KV pool)
KVQ8_SUFFIX = "_kvq8"
PROGRAMS = {
    "t_pointwise": ["embed.cuh", "norm.cuh", "elementwise.cuh", "argmax.cuh"],
    "t_gemv": ["gemv_q.cuh"],
    "t_rope_kv": ["rope_kv.cuh"],
    "t_rope_kv_kvq8": ["rope_kv.cuh"],
    "t_attn": ["attn_decode.cuh", "attn_prefill.cuh"],
    "t_attn_kvq8": ["attn_decode.cuh", "attn_prefill.cuh"],
    "t_moe": ["moe.cuh"],
    "t_head_linear": ["head_linear.cuh"],
}
# headers whose kernels are exercised through whole generated models (tests/test_cuda_models.py)
COVERED_BY_MODELS = ["attn_rows.cuh", "gemm_q.cuh", "pack.cuh",
                     "conv.cuh", "ssm.cuh", "delta.cuh"]  # the hybrids' families on cudasim, against the CPU
RUNS = [("plain", None), ("plain", 3), ("race", None), ("race", 7)]
if os.environ.get("INGOT_SAN") == "1":  # make test's sanitizer pass: the same programs under ASan
    RUNS = [("asan", None), ("asan", 5)]


def test_every_header_is_covered():
    headers = sorted(f for f in os.listdir(KDIR) if f.endswith(".cuh") and f != "common.cuh")
    assert headers == sorted(INSTANCES), "INSTANCES must list every kernel header"
    assert sorted({h for v in PROGRAMS.values() for h in v} | set(COVERED_BY_MODELS)) == headers, \
        "every header needs a cudasim test"


def tool(name):
    p = shutil.which(name) or os.path.join(CUDA, "bin", name)
    if not os.path.exists(p):
        pytest.fail("%s not found (PATH or %s/bin): the CUDA toolkit is required" % (name, CUDA))
    return p


def run(cmd, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


# ------------------------------------------------------------------ nvcc + ptxas
def _instance_tu(header, defines):
    os.makedirs(OBJ, exist_ok=True)
    tag = "".join("_" + d.split("=")[0].lower() for d in defines)
    path = os.path.join(OBJ, "inst_" + header.replace(".cuh", tag + ".cu"))
    lines = ["// generated by tests/test_cuda_kernels.py: instantiates %s's kernels" % header]
    lines += ["#define %s %s" % tuple(d.split("=")) for d in defines]
    lines += ['#include "%s"' % header, "extern void* const ig_instances[];", "void* const ig_instances[] = {"]
    lines += ["    (void*)&%s," % e for e in instances(header, defines)]
    lines += ["};", ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))
    return path


def _nvcc(build):
    header, defines = build
    tu = _instance_tu(header, defines)
    cmd = [tool("nvcc"), "-std=c++17", "-c", "-I", KDIR, "--Werror", "all-warnings",
           "-Xptxas", "-v,-warn-spills,-warn-lmem-usage", "-o", tu[:-3] + ".o", tu]
    for a in ARCHS:
        cmd += ["-gencode", "arch=compute_%s,code=sm_%s" % (a, a)]
    return build, cmd, run(cmd)


def parse_ptxas(out):
    """[(arch, mangled, regs, smem, stack, spill_st, spill_ld)] from `ptxas -v` output."""
    rows, cur, frame = [], None, None
    for line in out.splitlines():
        m = re.search(r"Compiling entry function '(\w+)' for 'sm_(\d+)'", line)
        if m:
            cur, frame = (m.group(2), m.group(1)), None
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and cur:
            frame = tuple(int(x) for x in m.groups())
            continue
        m = re.search(r"Used (\d+) registers.*?(?:(\d+) bytes smem)?", line)
        if m and cur:
            smem = re.search(r"(\d+) bytes smem", line)
            st, sp_st, sp_ld = frame or (0, 0, 0)
            rows.append((cur[0], cur[1], int(m.group(1)), int(smem.group(1)) if smem else 0, st, sp_st, sp_ld))
            cur = None
    return rows


def demangle(names):
    r = subprocess.run(["c++filt"], input="\n".join(names), stdout=subprocess.PIPE, text=True)
    return r.stdout.splitlines() if r.returncode == 0 else names


SAN_SKIP = pytest.mark.skipif(os.environ.get("INGOT_SAN") == "1",
                              reason="sanitizer pass: compile-only checks already ran in the optimized pass")


@SAN_SKIP
def test_nvcc_ptxas_table():
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as ex:
        results = list(ex.map(_nvcc, BUILDS))
    failed = ["%s:\n$ %s\n%s" % (b, " ".join(c), r.stdout[-4000:]) for b, c, r in results if r.returncode != 0]
    assert not failed, "\n".join(failed)
    rows = []
    for (h, defines), _, r in results:
        got = parse_ptxas(r.stdout)
        assert len(got) == len(instances(h, defines)) * len(ARCHS), \
            "ptxas -v output of %s not understood:\n%s" % (h, r.stdout)
        label = h.replace(".cuh", "") + ("/kvq8" if defines else "")
        rows += [(label,) + x for x in got]
    names = demangle([x[2] for x in rows])
    hdr = "%-16s %-5s %-62s %5s %6s %6s %6s" % ("header", "arch", "kernel", "regs", "smem", "stack", "spill")
    lines = [hdr, "-" * len(hdr)]
    for (h, arch, _, regs, smem, stack, st, ld), name in zip(rows, names):
        name = re.sub(r"\(.*\)$", "", name).replace("(int)", "")
        lines.append("%-16s sm_%-2s %-62s %5d %6d %6d %6d" % (h, arch, name[:62], regs, smem, stack, st + ld))
    table = "\n".join(lines)
    print("\n" + table)
    os.makedirs(os.path.dirname(OBJ), exist_ok=True)
    with open(os.path.join(ROOT, "build", "_obj", "cuda_ptxas.txt"), "w") as f:
        f.write(table + "\n")
    spills = [l for l, x in zip(lines[2:], rows) if x[6] or x[7]]
    assert not spills, "register spills:\n" + "\n".join(spills)
    local = [l for l, x in zip(lines[2:], rows) if x[5]]
    assert not local, "local-memory stack frames:\n" + "\n".join(local)


# ------------------------------------------------------------------ NVRTC
@pytest.fixture(scope="session")
def nvrtc_exe():
    os.makedirs(OBJ, exist_ok=True)
    exe = os.path.join(OBJ, "nvrtc_compile")
    src = os.path.join(TDIR, "nvrtc_compile.cpp")
    lib = os.path.join(CUDA, "lib64")
    if not os.path.exists(os.path.join(CUDA, "include", "nvrtc.h")):
        pytest.fail("nvrtc.h not found under %s/include: the CUDA toolkit is required" % CUDA)
    r = run(["g++", "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-I", os.path.join(CUDA, "include"), src,
             "-L", lib, "-lnvrtc", "-Wl,-rpath," + lib, "-o", exe])
    assert r.returncode == 0, r.stdout
    return exe


# the q8_0 sources for compute_90 in the default tier, for compute_80 too in make test-full
NVRTC_CASES = [pytest.param(b, a, id="%s%s-%s" % (b[0], "".join("-" + d for d in b[1]), a),
                            marks=BREADTH if b[1] and a != "compute_90" else ())
               for b in BUILDS for a in ("compute_80", "compute_90")]


@pytest.mark.parametrize("build,arch", NVRTC_CASES)
@SAN_SKIP
def test_nvrtc(nvrtc_exe, build, arch):
    header, defines = build
    r = run([nvrtc_exe, arch, KDIR, header] + ["&" + e for e in instances(header, defines)]
            + ["-D" + d for d in defines])
    assert r.returncode == 0 and "NVRTC OK" in r.stdout, r.stdout


# ------------------------------------------------------------------ cudasim
@pytest.fixture(scope="session")
def sim_build():
    cache = {}

    def build(prog, mode):
        if (prog, mode) not in cache:
            wd = os.path.join(OBJ, "sim_" + mode)
            out = os.path.join(wd, prog)
            os.makedirs(wd, exist_ok=True)  # a fresh build tree has no sim_<mode> folder before cb.build
            incs = ["-I", KDIR, "-I", os.path.join(ROOT, "kernels", "cpu"),
                    *[a for d in ("core", "load", "text", "serve") for a in ("-I", os.path.join(ROOT, "runtime", d))]]
            link = [_c_object(c, wd, incs) for c in ("dtype.c", "quantize.c")]
            src, defines = prog, []
            if prog.endswith(KVQ8_SUFFIX):  # the same program over a q8_0 pool, CUDA and CPU side alike
                src, defines = prog[:-len(KVQ8_SUFFIX)], ["-DIG_KV_Q8=1", "-DKC_KV_Q8=1"]
            cb.build([os.path.join(TDIR, src + ".cu")], out, mode=mode, workdir=wd, extra=incs + defines, link=link)
            cache[(prog, mode)] = out
        return cache[(prog, mode)]

    return build


def _c_object(name, wd, incs):
    """runtime/load/NAME compiled as C into wd, once per workdir and rebuilt when the source is newer: the
    CPU reference kernels read its tables (dtype.c's IQ4 values). Parallel builds write a temporary
    first, as cudasim_build does."""
    src, obj = os.path.join(ROOT, "runtime", "load", name), os.path.join(wd, name + ".o")
    if not os.path.exists(obj) or os.path.getmtime(obj) < os.path.getmtime(src):
        tmp = "%s.%d.tmp" % (obj, os.getpid())
        subprocess.run(["cc", "-std=c11", "-O2", "-c", src, "-o", tmp] + incs, check=True)
        os.replace(tmp, obj)
    return obj


_checksums = {}


# the q8_0 variants repeat their f32 programs' schedules: one plain and one race run in the default
# tier (the first ASan run in the sanitizer pass), every run in make test-full
KVQ8_RUNS = [("plain", None), ("race", 7), ("asan", None)]
SIM_CASES = [pytest.param(prog, mode, seed, id="%s-%s-seed%s" % (prog, mode, seed or 0),
                          marks=BREADTH if prog.endswith(KVQ8_SUFFIX) and (mode, seed) not in KVQ8_RUNS else ())
             for prog in sorted(PROGRAMS) for mode, seed in RUNS]


@pytest.mark.parametrize("prog,mode,seed", SIM_CASES)
def test_cudasim(sim_build, prog, mode, seed):
    exe = sim_build(prog, mode)
    env = dict(os.environ)
    env.pop("CUDASIM_SEED", None)
    if seed is not None:
        env["CUDASIM_SEED"] = str(seed)
    r = subprocess.run([exe], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, timeout=600)
    out = r.stdout + r.stderr
    print(out)
    assert r.returncode == 0 and "PASS" in r.stdout and "MISMATCH" not in r.stdout, out
    assert re.search(r"PASS: [1-9]\d* checks, 0 failures", r.stdout), out
    cs = re.findall(r"CHECKSUM (\w+)", r.stdout)[-1]
    first = _checksums.setdefault(prog, (cs, mode, seed))
    assert cs == first[0], "%s: results differ between runs (%s seed %s vs %s seed %s)" % (
        prog, mode, seed, first[1], first[2])
