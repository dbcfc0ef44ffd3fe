"""Shared pytest fixtures: builds the runtime, tools and C tests once per session.

INGOT_SAN=1 runs the whole suite against the AddressSanitizer+UBSan build.

Breadth: a test (or a parameter) marked `full` repeats what another test
already covers on more inputs (every tiny model through nvcc, every family
on cudasim, ...). It runs when INGOT_TEST_FULL=1 (`make test-full`); in the
default tier it is skipped with that reason, by name.
"""
import contextlib
import fcntl
import json
import os
import subprocess
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SAN = os.environ.get("INGOT_SAN") == "1"
OBJDIR = ROOT / "build" / ("_obj-san" if SAN else "_obj")
# the sanitizer pass runs the front end (./ingot, tools/frontend) under ASan + UBSan too: every
# build a test makes goes through it
if SAN:
    os.environ["INGOT_FRONTEND_SAN"] = "1"
FULL = os.environ.get("INGOT_TEST_FULL") == "1"
FIXTURES = ROOT / "tests" / "fixtures"

# a parameter of the wider matrix: pytest.param(value, marks=BREADTH)
BREADTH = pytest.mark.full


def pytest_configure(config):
    config.addinivalue_line("markers", "full: breadth beyond the default tier; runs in make test-full")


def pytest_sessionstart(session):
    """The fixture weights the tree does not track (tests/fixtures/regenerate.py: torch remakes
    them from their seeds) are remade before the first test when any is missing."""
    manifest = json.loads((FIXTURES / "regenerated.json").read_text())
    if all((FIXTURES / rel).exists() for rel in manifest["weights"]):
        return
    with locked("fixtures"):
        subprocess.run([sys.executable, str(FIXTURES / "regenerate.py")], check=True)


def in_tree(path):
    """Whether the tree holds PATH, a file under tests/fixtures, rather than regenerate.py
    --oracles remaking it for make test-full (regenerated.json's oracles list those)."""
    rel = pathlib.Path(path).resolve().relative_to(FIXTURES).as_posix()
    return rel not in json.loads((FIXTURES / "regenerated.json").read_text())["oracles"]


def fixture_file(path):
    """PATH, a file under tests/fixtures; a clear failure where it is one of the llama.cpp files
    only make test-full reads, not in the tree until regenerate.py --oracles remakes it."""
    path = pathlib.Path(path)
    if not path.exists():
        pytest.fail(f"{path.relative_to(ROOT)} is not in the tree: `python3 tests/fixtures/regenerate.py --oracles` "
                    "remakes it (make test-full runs it; needs scripts/setup.sh --oracles)", pytrace=False)
    return path


def pytest_collection_modifyitems(config, items):
    if FULL:
        return
    skip = pytest.mark.skip(reason="breadth: the same check on more inputs runs in make test-full")
    for item in items:
        if item.get_closest_marker("full"):
            item.add_marker(skip)


@contextlib.contextmanager
def locked(name):
    """An exclusive lock across processes (pytest-xdist workers build into
    the same folders): held while the block runs."""
    d = ROOT / "build" / ".locks"
    d.mkdir(parents=True, exist_ok=True)
    with open(d / f"{name}.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def make(*targets):
    cmd = ["make", "-s", "-C", str(ROOT), f"SAN={1 if SAN else 0}", *targets]
    with locked("make"):
        subprocess.run(cmd, check=True)


@pytest.fixture(scope="session")
def built():
    """Builds runtime, tools and C tests; returns the object folder."""
    make("all", "tests")
    return OBJDIR


def run(cmd, **kw):
    """Runs a command, capturing text output; never raises on non-zero exit."""
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    kw.setdefault("timeout", 600)
    return subprocess.run([str(c) for c in cmd], **kw)
