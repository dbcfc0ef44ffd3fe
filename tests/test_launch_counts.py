"""kernels/cuda/README.md's table of CUDA launches per decode step is what `--info` says.

For every models.lua entry, the generator casts the checkpoint the table names (a tiny model of
tests/fixtures/families) for the CUDA backend, fused and --no-fuse, and the `CUDA:` line of the
generated --info text must give the table's launches per layer (by layer kind) and per step.
Only the generator runs (no nvcc), as in test_citations.
"""
import re

import pytest

from conftest import ROOT
from test_citations import ENTRIES, generate, inspect_tool  # noqa: F401  (inspect_tool is a fixture)

README = ROOT / "kernels" / "cuda" / "README.md"
ROW = re.compile(r"^\| (\w+) \| (\w+) \| ([^|]+) \| (\d+) \| ([^|]+) \| (\d+) \|$", re.M)
INFO = re.compile(r"CUDA: +(\d+) launches per decode step: (.*?) \+ \d+ outside the layers")


def table():
    return {m.group(1): m.groups()[1:] for m in ROW.finditer(README.read_text())}


def test_table_lists_every_entry():
    assert sorted(table()) == ENTRIES


@pytest.mark.parametrize("entry", ENTRIES)
def test_launch_counts_match_info(entry, tmp_path, inspect_tool):  # noqa: F811
    checkpoint, fused_layer, fused_step, unfused_layer, unfused_step = table()[entry]
    model = ROOT / "tests" / "fixtures" / "families" / checkpoint
    for variant, (per_layer, per_step) in {"cuda": (fused_layer, fused_step),
                                            "cuda-nofuse": (unfused_layer, unfused_step)}.items():
        out = tmp_path / variant
        out.mkdir()
        text = "\n".join(generate(model, variant, out, inspect_tool).values())
        m = INFO.search(text)
        assert m, f"no CUDA launch line in the {variant} build of {checkpoint}"
        assert (m.group(2), m.group(1)) == (per_layer.strip(), per_step), f"{entry} {variant}: --info says {m.group(0)}"
