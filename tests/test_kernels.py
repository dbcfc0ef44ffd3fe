"""CPU kernels and thread pool: runs the C test program tests/c/test_kernels.c."""
from conftest import run


def test_kernels(built):
    r = run([built / "tests" / "test_kernels"])
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    last = r.stdout.strip().splitlines()[-1]
    assert last.endswith(" 0 failed"), last
