#!/usr/bin/env python3
"""Build CUDA sources for cudasim, the CPU simulator of CUDA's execution model.

    python3 kernels/cudasim/cudasim_build.py [--mode plain|race|asan] -o prog \
        file.cu [host.cpp ...] [-- extra g++ flags]

Modes
  plain  everything at -O1; misuse of barriers / warp intrinsics is detected,
         out-of-bounds writes into cudaMalloc guard zones are found after each
         launch, CUDASIM_SEED=n fuzzes the schedule.
  race   the .cu translation units are compiled with -fsanitize=thread so that
         every load/store calls cudasim's own __tsan_* hooks (libtsan is not
         linked): shared- and global-memory races and out-of-bounds accesses are
         reported at the faulting access.
  asan   everything (cudasim.cpp included) under -fsanitize=address: overflows
         of cudaMalloc buffers are caught by ASan at the faulting access.

What the build does beyond plain g++:
  * .cu files are compiled as C++17 with `-include cudasim.h` and
    -I kernels/cudasim/include (shims for <cuda_runtime.h>, <cuda_fp16.h>, ...);
  * if a .cu file contains `kernel<<<...>>>(...)` launches, a copy with those
    rewritten to `::cudasim::launcher(kernel, "kernel", ...)(...)` is compiled
    instead (with a #line directive, so diagnostics name the original file);
  * every undefined TLS symbol of the objects (= an `extern __shared__` array)
    is aliased to cudasim's dynamic shared region with --defsym.
"""
import argparse
import hashlib
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
HEADER = os.path.join(HERE, "cudasim.h")
RUNTIME = os.path.join(HERE, "cudasim.cpp")
SHIMS = os.path.join(HERE, "include")

# -Wno-unknown-pragmas: `#pragma unroll` (GCC < 13 ignores the diagnostic pragma in cudasim.h, PR53431).
WARN = ["-Wall", "-Wextra", "-Werror", "-Wno-unknown-pragmas"]
# -g1: line tables only (a sanitizer's or debugger's backtrace names file and line), a third less
# compile time than -g's full variable information on a generated model
BASE = ["-std=c++17", "-O1", "-g1", "-DINGOT_CUDASIM=1", "-fno-omit-frame-pointer"]
MODE_FLAGS = {
    "plain": ([], []),
    "race": (["-fsanitize=thread"], []),
    "asan": (["-fsanitize=address"], ["-fsanitize=address"]),
}


def _skip_back_expr(src, i):
    """Start index of the kernel expression ending just before src[i] (e.g. `ns::k<T, 4>`)."""
    j = i
    while j > 0 and src[j - 1].isspace():
        j -= 1
    while j > 0:
        c = src[j - 1]
        if c.isalnum() or c in "_:":
            j -= 1
        elif c == ">":  # template argument list: skip the balanced <...>
            depth, k = 0, j - 1
            while k >= 0:
                if src[k] == ">":
                    depth += 1
                elif src[k] == "<":
                    depth -= 1
                    if depth == 0:
                        break
                k -= 1
            if k < 0:
                break
            j = k
        else:
            break
    return j


def _split_top(s):
    parts, depth, cur = [], 0, ""
    for c in s:
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += c
    parts.append(cur)
    return [p.strip() for p in parts]


def rewrite_launches(src):
    """`k<<<g, b, s, st>>>(args)` -> `::cudasim::launcher(k, "k", g, b, s, st)(args)`."""
    out, pos = [], 0
    while True:
        i = src.find("<<<", pos)
        if i < 0:
            out.append(src[pos:])
            return "".join(out)
        e = src.find(">>>", i)
        if e < 0:
            raise SystemExit("cudasim_build: unterminated <<< launch")
        start = _skip_back_expr(src, i)
        kernel = src[start:i].strip()
        if not kernel:
            raise SystemExit("cudasim_build: cannot find the kernel name before <<<")
        cfg = _split_top(src[i + 3:e])
        name = kernel.replace('"', "")
        out.append(src[pos:start])
        out.append('::cudasim::launcher(%s, "%s", %s)' % (kernel, name, ", ".join(cfg)))
        pos = e + 3


def _run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.stderr.write("$ " + " ".join(cmd) + "\n" + r.stdout)
        raise SystemExit(r.returncode)
    return r.stdout


def undefined_tls_symbols(objs):
    und, defined = set(), set()
    for o in objs:
        for line in _run(["readelf", "-sW", o]).splitlines():
            f = line.split()
            if len(f) >= 8 and f[3] == "TLS":
                (und if f[6] == "UND" else defined).add(f[7])
    return sorted(und - defined)


def build(sources, out, mode="plain", extra=(), workdir=None, link=()):
    cflags, lflags = MODE_FLAGS[mode]
    workdir = workdir or os.path.dirname(os.path.abspath(out)) or "."
    os.makedirs(workdir, exist_ok=True)
    # cudasim's runtime is the same for every program of a mode: compiled once into the build tree
    # (a third of a small model's build), not again beside each program
    rt_dir = os.path.join(ROOT, "build", "_obj-cudasim")
    os.makedirs(rt_dir, exist_ok=True)
    rt_obj = os.path.join(rt_dir, "cudasim_rt_%s.o" % mode)
    rt_flags = BASE + WARN + (["-fsanitize=address"] if mode == "asan" else []) + ["-I", SHIMS]
    newest = max(os.path.getmtime(p) for p in (RUNTIME, HEADER, os.path.abspath(__file__)))  # its flags too
    if not os.path.exists(rt_obj) or os.path.getmtime(rt_obj) < newest:
        tmp = "%s.%d.tmp" % (rt_obj, os.getpid())  # parallel builds share it: each writes its own, then renames
        _run(["g++"] + rt_flags + ["-c", RUNTIME, "-o", tmp])
        os.replace(tmp, rt_obj)
    objs = []
    for src in sources:
        src = os.path.abspath(src)
        is_cu = src.endswith(".cu")
        text = open(src).read()
        compile_src = src
        if "<<<" in text:
            tag = hashlib.sha1(src.encode()).hexdigest()[:8]
            # per process: parallel builds of the same program (test workers) never read a half-written file
            compile_src = os.path.join(workdir, "%s.%s.%d.sim.cpp" % (os.path.basename(src), tag, os.getpid()))
            with open(compile_src, "w") as f:
                f.write('#line 1 "%s"\n' % src + rewrite_launches(text))
        obj = os.path.join(workdir, os.path.basename(src) + ".%s.%d.o" % (mode, os.getpid()))
        flags = BASE + WARN + ["-I", SHIMS, "-I", os.path.dirname(src), "-include", HEADER]
        flags += cflags if (is_cu or mode == "asan") else []
        _run(["g++"] + flags + list(extra) + ["-x", "c++", "-c", compile_src, "-o", obj])
        if compile_src != src:
            os.remove(compile_src)  # its #line directive names the source, so messages never point here
        objs.append(obj)
    defsyms = ["-Wl,--defsym=%s=cudasim_dyn_smem" % s for s in undefined_tls_symbols(objs + [rt_obj])]
    tmp = "%s.%d.tmp" % (out, os.getpid())
    _run(["g++"] + lflags + objs + list(link) + [rt_obj] + defsyms + ["-o", tmp])
    os.replace(tmp, out)  # a program another process is running or about to run is replaced, never rewritten
    for obj in objs:
        os.remove(obj)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=sorted(MODE_FLAGS), default="plain")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--link-arg", action="append", default=[], help="extra link argument (object, library, flag)")
    ap.add_argument("sources", nargs="+")
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        k = argv.index("--")
        argv, extra = argv[:k], argv[k + 1:]
    a = ap.parse_args(argv)
    build(a.sources, a.output, a.mode, extra, link=a.link_arg)


if __name__ == "__main__":
    main()
