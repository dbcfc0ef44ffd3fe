"""CPU kernels and thread pool: runs the C test program tests/c/test_kernels.c,
and its f16-, q8_0- and q4-KV variants tests/c/test_kernels_kvf16.c, test_kernels_kvq8.c and
test_kernels_kvq4.c (attention over a cache built with --kv-dtype f16 / q8_0 / q4), and
tests/c/test_x16.c (the 16-row interleaved layout of every block type,
kernels/cpu/kc_x16.h and kc_x16k.h) on every instruction-set path they have."""
import pytest

from conftest import run


@pytest.mark.parametrize("program", ["test_kernels", "test_kernels_kvf16", "test_kernels_kvq8", "test_kernels_kvq4", "test_x16"])
def test_kernels(built, program):
    r = run([built / "tests" / program])
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    last = r.stdout.strip().splitlines()[-1]
    assert last.endswith(" 0 failed"), last


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        return next(line for line in f if line.startswith("flags")).split()


@pytest.mark.parametrize("amx", ["default", "off"])
def test_x16s_amx(built, amx):
    """kernels/cpu/kc_x16s.h: with AMX where the CPU has it (Linux grants the tile state to
    every process that asks), and with INGOT_AMX=0 (the vector paths alone). test_x16 checks
    every step of 16+ tokens bit for bit against each token alone, which takes the vector
    path: on an AMX machine, AMX against the vectors."""
    import os
    env = dict(os.environ, INGOT_AMX="0") if amx == "off" else {k: v for k, v in os.environ.items() if k != "INGOT_AMX"}
    r = run([built / "tests" / "test_x16"], env=env)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert r.stdout.strip().splitlines()[-1].endswith(" 0 failed")
    has_amx = "amx_int8" in cpu_flags() and "amx_tile" in cpu_flags()
    want = "on" if amx == "default" and has_amx else "off"
    assert f"kc_x16s: AMX tiles {want}" in r.stdout, r.stdout[:200]


# The instruction-set paths of the interleaved layout's integer kernels (kernels/cpu/kc_x16.h,
# kc_x16k.h): the make-built test_x16 above is this machine's (-march=native); this builds
# tests/c/test_x16.c again for each other path the headers have, and runs it here.
X16_PATHS = {
    "avx512-novnni": ("skylake-avx512", "avx512bw"),  # vpmaddubsw/vpmaddwd in 512 bits
    "avx2-vnni": ("alderlake", "avx_vnni"),           # AVX-VNNI vpdpbusd in 256 bits
    "avx2": ("haswell", "avx2"),                      # vpmaddubsw/vpmaddwd in 256 bits
    "portable": ("x86-64", "sse2"),                   # plain C
}


@pytest.mark.parametrize("path", list(X16_PATHS))
def test_x16_paths(built, path, tmp_path):
    program = "test_x16"
    import os
    from conftest import ROOT
    if os.environ.get("INGOT_SAN"):
        pytest.skip("the sanitizer pass runs the make-built test_x16 (test_kernels)")
    march, flag = X16_PATHS[path]
    if flag not in cpu_flags():
        pytest.skip(f"this CPU has no {flag}: the {path} path cannot run here")
    binary = tmp_path / f"{program}-{path}"
    inc = [f"-I{ROOT / d}" for d in ("runtime/core", "runtime/load", "kernels/cpu", "tests/c")]
    r = run(["cc", "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror", "-O2", f"-march={march}", *inc,
             ROOT / f"tests/c/{program}.c", "-o", binary, built / "libingot.a", "-lcjson", "-lpcre2-8", "-lm", "-pthread"])
    assert r.returncode == 0, r.stderr
    r = run([binary])
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert r.stdout.strip().splitlines()[-1].endswith(" 0 failed")
