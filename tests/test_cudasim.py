"""cudasim: CUDA kernels executed on the CPU (kernels/cudasim), no GPU needed.

Good kernels (tests/cuda_sim/*.cu) must compile with real nvcc (-arch=sm_80,
warnings as errors) and, under the simulator, match their C++ references in
every build mode (plain, race = instrumented race detector, asan) and under
fuzzed schedules.  Known-bad kernels must be caught in the expected way.
"""
import importlib.util
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIM = os.path.join(ROOT, "kernels", "cudasim")
CASES = os.path.join(ROOT, "tests", "cuda_sim")

_spec = importlib.util.spec_from_file_location("cudasim_build", os.path.join(SIM, "cudasim_build.py"))
cb = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cb)

GOOD = {
    "block_reduce": ["block_reduce.cu"],
    "warp_reduce": ["warp_reduce.cu"],
    "scan": ["scan.cu"],
    "matmul": ["matmul.cu", "matmul_host.cpp"],
    "softmax": ["softmax.cu"],
    "histogram": ["histogram.cu"],
    "graph": ["graph.cu"],
}
BAD = ["bad_race.cu", "bad_sync.cu", "bad_shfl.cu", "bad_oob.cu"]
ERROR_EXIT = 86  # cudasim's exit status for detected errors (CUDASIM_ON_ERROR=exit)


@pytest.fixture(scope="session")
def builder(tmp_path_factory):
    root = tmp_path_factory.mktemp("cudasim")
    cache = {}

    def build(name, sources, mode="plain"):
        key = (name, mode)
        if key not in cache:
            wd = root / mode
            out = str(wd / name)
            cb.build([os.path.join(CASES, s) for s in sources], out, mode=mode, workdir=str(wd))
            cache[key] = out
        return cache[key]

    return build


def run(exe, *args, seed=None, env_extra=None):
    env = dict(os.environ)
    env.pop("CUDASIM_SEED", None)
    if seed is not None:
        env["CUDASIM_SEED"] = str(seed)
    env["ASAN_OPTIONS"] = "detect_leaks=1"
    env.update(env_extra or {})
    return subprocess.run([exe, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=env, timeout=120)


def checksum_of(r):
    lines = [l for l in r.stdout.splitlines() if l.startswith("CHECKSUM")]
    assert lines, r.stdout + r.stderr
    return lines[-1]


def nvcc_path():
    p = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not os.path.exists(p):
        pytest.fail("nvcc not found (PATH or /usr/local/cuda/bin/nvcc): the CUDA toolkit is required to prove "
                    "that the test kernels are real CUDA")
    return p


# ------------------------------------------------------------------ nvcc
@pytest.mark.parametrize("src", sorted({s for v in GOOD.values() for s in v if s.endswith(".cu")} | set(BAD)))
def test_nvcc_compiles(src, tmp_path):
    r = subprocess.run([nvcc_path(), "-arch=sm_80", "-std=c++17", "-c", "--Werror", "all-warnings",
                        "-Xcompiler", "-Wall,-Wextra,-Werror", "-I", CASES, os.path.join(CASES, src),
                        "-o", str(tmp_path / "k.o")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout


# ------------------------------------------------------------ good kernels
@pytest.mark.parametrize("mode", ["plain", "race", "asan"])
@pytest.mark.parametrize("name", sorted(GOOD))
def test_good_kernel_matches_reference(builder, name, mode):
    exe = builder(name, GOOD[name], mode)
    r = run(exe)
    assert r.returncode == 0 and "ALL OK" in r.stdout, r.stdout + r.stderr
    assert "cudasim:" not in r.stderr, r.stderr


@pytest.mark.parametrize("name", sorted(GOOD))
def test_good_kernel_schedule_independent(builder, name):
    """Random thread interleavings and block orders give bit-identical results."""
    exe = builder(name, GOOD[name], "plain")
    sums = set()
    for seed in (0, 1, 2, 3):
        r = run(exe, seed=seed)
        assert r.returncode == 0 and "ALL OK" in r.stdout, "seed %d:\n%s%s" % (seed, r.stdout, r.stderr)
        sums.add(checksum_of(r))
    assert len(sums) == 1, sums


def test_fuzzed_race_build_of_good_kernels(builder):
    """Race builds with fuzzing also yield at random shared accesses."""
    for name in ("block_reduce", "softmax", "scan"):
        exe = builder(name, GOOD[name], "race")
        r = run(exe, seed=7)
        assert r.returncode == 0 and "ALL OK" in r.stdout, r.stdout + r.stderr


# ------------------------------------------------------------- bad kernels
@pytest.mark.parametrize("variant,where", [(0, "__shared__ `reverse_block"), (1, "dynamic shared memory"),
                                           (2, "__shared__ `rotate_lanes_racy")])
def test_race_detected_by_shadow_memory(builder, variant, where):
    r = run(builder("bad_race", ["bad_race.cu"], "race"), variant)
    assert r.returncode == ERROR_EXIT, r.stdout + r.stderr
    assert "cudasim: RACE" in r.stderr and where in r.stderr, r.stderr
    assert "bad_race.cu:" in r.stderr  # both accesses are located in the source
    assert "previous" in r.stderr and "thread (" in r.stderr


@pytest.mark.parametrize("variant", [0, 1])
def test_race_changes_output_under_schedule_fuzzing(builder, variant):
    exe = builder("bad_race", ["bad_race.cu"], "plain")
    sums = {checksum_of(run(exe, variant, seed=s)) for s in (0, 1, 2, 3, 4)}
    assert len(sums) > 1, "racy kernel gave identical output under 5 schedules"


@pytest.mark.parametrize("variant,msg", [(0, "exited while 16 thread(s) wait at __syncthreads"),
                                         (1, "divergent __syncthreads")])
def test_barrier_misuse_detected(builder, variant, msg):
    exe = builder("bad_sync", ["bad_sync.cu"], "plain")
    for seed in (0, 3):
        r = run(exe, variant, seed=seed)
        assert r.returncode == ERROR_EXIT, r.stdout + r.stderr
        assert "kernel completed" not in r.stdout
        if seed == 0:
            assert msg in r.stderr, r.stderr
        else:  # other interleavings may hit the misuse from the other side
            assert "__syncthreads" in r.stderr, r.stderr


def test_barrier_misuse_as_cuda_error(builder):
    """CUDASIM_ON_ERROR=return: the launch fails like a CUDA launch failure."""
    r = run(builder("bad_sync", ["bad_sync.cu"], "plain"), 1, env_extra={"CUDASIM_ON_ERROR": "return"})
    assert r.returncode == 2, r.stdout + r.stderr  # CHECK(cudaDeviceSynchronize()) exits 2
    assert "cudaDeviceSynchronize" in r.stderr and "launch failure" in r.stderr


def test_shuffle_with_exited_lane_detected(builder):
    exe = builder("bad_shfl", ["bad_shfl.cu"], "plain")
    for seed in (0, 1, 2):
        r = run(exe, seed=seed)
        assert r.returncode == ERROR_EXIT, r.stdout + r.stderr
        assert "__shfl_xor_sync(mask 0xffffffff)" in r.stderr or "mask 0xffffffff naming lane" in r.stderr, r.stderr
        assert "exited" in r.stderr


def test_oob_write_detected_by_guard_zone(builder):
    r = run(builder("bad_oob", ["bad_oob.cu"], "plain"))
    assert r.returncode == ERROR_EXIT, r.stdout + r.stderr
    assert "wrote outside the 400-byte cudaMalloc buffer" in r.stderr and "offset 400" in r.stderr


def test_oob_write_detected_at_the_access(builder):
    r = run(builder("bad_oob", ["bad_oob.cu"], "race"))
    assert r.returncode == ERROR_EXIT, r.stdout + r.stderr
    assert "OUT-OF-BOUNDS" in r.stderr and "writes 4 byte(s) at offset 400 of a 400-byte" in r.stderr
    assert "bad_oob.cu:9" in r.stderr


def test_oob_write_detected_by_asan(builder):
    r = run(builder("bad_oob", ["bad_oob.cu"], "asan"))
    assert r.returncode != 0 and "kernel completed" not in r.stdout
    assert "AddressSanitizer: heap-buffer-overflow" in r.stderr and "WRITE of size 4" in r.stderr
    assert "bad_oob.cu:9" in r.stderr


# ------------------------------------------------------------- the rewrite
def test_launch_rewrite():
    src = "k<<<g, b>>>(x, y); ns::t<float, 4><<<dim3(1, 2), 64, s * sizeof(float), st>>>(p);"
    out = cb.rewrite_launches(src)
    assert out == ('::cudasim::launcher(k, "k", g, b)(x, y); '
                   '::cudasim::launcher(ns::t<float, 4>, "ns::t<float, 4>", dim3(1, 2), 64, s * sizeof(float), st)(p);')


# ------------------------------------------------------- cuBLASLt substitute
def _lt_cases(path):
    """The cases tests/cuda_sim/lt_gemm.cpp wrote: (head, alpha, beta, A, B, C, bias, D) per case."""
    import numpy as np
    raw = np.fromfile(path, dtype="<u1")
    off, cases = 0, []

    def take(n, dtype):
        nonlocal off
        v = raw[off:off + 4 * n].view(dtype)
        off += 4 * n
        return v

    while off < raw.size:
        m, n, k, t, ta, bias = (int(x) for x in take(6, "<i4"))
        alpha, beta = (float(x) for x in take(2, "<f4"))
        a, b = take(m * k, "<f4"), take(k * n, "<f4")
        c, bv, d = take(m * n, "<f4"), take(m, "<f4"), take(m * n, "<f4")
        cases.append(((m, n, k, t, ta, bias), alpha, beta, a, b, c, bv, d))
    return cases


@pytest.mark.parametrize("mode", ["plain", "asan"])
def test_cublaslt_substitute_matches_numpy(builder, tmp_path, mode):
    """cudasim's cuBLASLt (the reference GEMM the generated models call in prefill) against numpy:
    column-major D = alpha op(A) B + beta C + bias for f32, f16 and bf16 inputs (values exact in
    all three, so the only difference is f32 accumulation order: 1e-5 relative), and the refusals
    cuBLASLt makes (shapes that do not chain, mixed input types, pointers below the alignment the
    algorithm was chosen for)."""
    import numpy as np
    exe = builder("lt_gemm", ["lt_gemm.cpp"], mode)
    out = tmp_path / "lt.bin"
    r = run(exe, out)
    assert r.returncode == 0 and "ALL OK" in r.stdout, r.stdout + r.stderr
    assert "k mismatch: CUBLAS_STATUS_INVALID_VALUE" in r.stdout
    assert "mixed types: CUBLAS_STATUS_NOT_SUPPORTED" in r.stdout
    assert "misaligned B: CUBLAS_STATUS_INVALID_VALUE" in r.stdout
    cases = _lt_cases(out)
    assert len(cases) == 4
    for (m, n, k, t, ta, bias), alpha, beta, a, b, c, bv, d in cases:
        A = a.reshape(m, k) if ta else a.reshape(k, m).T  # column-major storage of op(A) (m x k)
        B = b.reshape(n, k).T                             # k x n, column-major
        want = alpha * (A.astype(np.float64) @ B) + beta * c.reshape(n, m).T + (bv[:, None] if bias else 0)
        got = d.reshape(n, m).T
        err = np.abs(got - want).max() / max(1.0, np.abs(want).max())
        assert err <= 1e-5, f"{m}x{n}x{k} type {t}: relative error {err:.3g}"


def test_cublaslt_program_builds_against_the_real_library(tmp_path):
    """The same program compiles against the toolkit's <cublasLt.h> and links with libcublasLt:
    the substitute declares the library's API, not an invented one."""
    cuda = os.path.dirname(os.path.dirname(nvcc_path()))
    r = subprocess.run(["g++", "-std=c++17", "-Wall", "-Wextra", "-Werror", "-I", os.path.join(cuda, "include"),
                        os.path.join(CASES, "lt_gemm.cpp"), "-o", str(tmp_path / "lt_real"),
                        "-L", os.path.join(cuda, "lib64"), "-lcublasLt", "-lcudart"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert r.returncode == 0, r.stdout
