"""Shared pytest fixtures: builds the runtime, tools and C tests once per session.

INGOT_SAN=1 runs the whole suite against the AddressSanitizer+UBSan build.
"""
import os
import subprocess
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SAN = os.environ.get("INGOT_SAN") == "1"
OBJDIR = ROOT / "build" / ("_obj-san" if SAN else "_obj")


def make(*targets):
    cmd = ["make", "-s", "-C", str(ROOT), f"SAN={1 if SAN else 0}", *targets]
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
