"""CPU kernels and thread pool: runs the C test program tests/c/test_kernels.c,
and its f16- and q8_0-KV variants tests/c/test_kernels_kvf16.c and
test_kernels_kvq8.c (attention over a cache built with --kv-dtype f16 / q8_0)."""
import pytest

from conftest import run


@pytest.mark.parametrize("program", ["test_kernels", "test_kernels_kvf16", "test_kernels_kvq8"])
def test_kernels(built, program):
    r = run([built / "tests" / program])
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    last = r.stdout.strip().splitlines()[-1]
    assert last.endswith(" 0 failed"), last
