"""Every Python module the tests import is installed by the setup script of their tier, at the
pinned version.

A test that imports a package the setup script does not install passes on a machine where
someone once installed it by hand and fails on a bare one (CI from a fresh clone). This file
reads the imports of every Python file statically and holds them to scripts/requirements/:

- the default tier (`make test`, `scripts/setup.sh --check`, check.txt) runs tests/test_*.py,
  tests/conftest.py, scripts/*.py (`ingot check`) and kernels/**/*.py (the cudasim build):
  every import in them counts, inside functions too, and so do `pytest.importorskip("x")`
  (a skip on a bare machine is a check silently not run); of the project's own modules they
  import (tests/*.py helpers, tests/fixtures/*.py), the module-level imports count;
- the oracle tier (`scripts/setup.sh --oracles`, oracles.txt) also runs bench/*.py and the
  fixture generators tests/fixtures/**/*.py: every import in them counts.

A requirement's import name is its distribution name with '-' read as '_', unless its line says
`# import NAME`. Then the installed packages are checked against the pins of the tier running
(check.txt; oracles.txt under `make test-full`), and the pins against constraints.txt.
"""
import ast
import importlib.metadata
import importlib.util
import pathlib
import re
import sys

import pytest

from conftest import FULL, ROOT

REQUIREMENTS = ROOT / "scripts" / "requirements"
# the project's own import roots: tests put these on sys.path
LOCAL_DIRS = [ROOT / "tests", ROOT / "tests" / "fixtures", ROOT / "scripts", ROOT / "bench",
              ROOT / "kernels" / "cudasim"]


def normalized(dist):
    return re.sub(r"[-_.]+", "-", dist).lower()


def read_requirements(name):
    """{normalized distribution: (version, import name, file:line)} of a tier, its -r includes
    first."""
    pins = {}
    path = REQUIREMENTS / name
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line, _, comment = raw.partition("#")
        line = line.strip()
        if not line:
            continue
        if line.startswith("-r "):
            pins.update(read_requirements(line[3:].strip()))
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!-]+)", line)
        assert m, f"{path.name}:{number}: not an exact pin: {raw!r}"
        dist, version = m.groups()
        imp = re.search(r"\bimport\s+([A-Za-z_][A-Za-z0-9_]*)", comment)
        pins[normalized(dist)] = (version, imp.group(1) if imp else dist.replace("-", "_").lower(),
                                  f"{path.name}:{number}")
    return pins


def imports_of(path, module_level_only):
    """[(top-level module name, line)] that a file imports, importorskip included."""
    tree = ast.parse(path.read_text(), str(path))
    nodes = tree.body if module_level_only else ast.walk(tree)
    found = []
    for node in nodes:
        if isinstance(node, ast.Import):
            found += [(a.name.split(".")[0], node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module.split(".")[0], node.lineno))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "importorskip" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.append((node.args[0].value.split(".")[0], node.lineno))
    return found


def local_module(name):
    for d in LOCAL_DIRS:
        if (d / f"{name}.py").is_file():
            return d / f"{name}.py"
    return None


def third_party_imports(entry_files):
    """{module: [where it is imported]} for the entry files (every import) and the project's own
    modules they reach (module-level imports), the standard library and the project left out."""
    seen, found = set(), {}
    pending = [(f, False) for f in entry_files]
    while pending:
        path, module_level_only = pending.pop()
        if (path, module_level_only) in seen:
            continue
        seen.add((path, module_level_only))
        for name, line in imports_of(path, module_level_only):
            if name in sys.stdlib_module_names or name == "__future__":
                continue
            local = local_module(name)
            if local is not None:
                pending.append((local, True))
                continue
            found.setdefault(name, []).append(f"{path.relative_to(ROOT)}:{line}")
    return found


DEFAULT_TIER_FILES = sorted({*(ROOT / "tests").glob("test_*.py"), ROOT / "tests" / "conftest.py",
                             *(ROOT / "scripts").glob("*.py"), *(ROOT / "kernels").rglob("*.py")})
ORACLE_TIER_FILES = sorted({*(ROOT / "bench").glob("*.py"), *(ROOT / "tests" / "fixtures").rglob("*.py")})


@pytest.mark.parametrize("tier,files", [("check.txt", DEFAULT_TIER_FILES), ("oracles.txt", ORACLE_TIER_FILES)],
                         ids=["default", "oracles"])
def test_every_import_is_installed_by_its_tier(tier, files):
    provided = {imp for _, imp, _ in read_requirements(tier).values()}
    missing = {name: where for name, where in third_party_imports(files).items() if name not in provided}
    assert not missing, (f"imported but not installed by scripts/requirements/{tier} (add its package "
                         f"there, pinned, and run scripts/requirements/relock.sh): "
                         + "; ".join(f"{n} ({', '.join(w[:3])})" for n, w in sorted(missing.items())))


def test_the_scan_sees_what_the_tests_import():
    """The scanner itself: it finds a function-level import, an importorskip and a helper's
    module-level import, and leaves out the standard library and the project's own modules."""
    found = third_party_imports([ROOT / "tests" / "test_tokenizer.py", ROOT / "tests" / "test_quant_moe.py"])
    assert "tokenizers" in found and "gguf" in found  # importorskip
    assert "torch" in found and "transformers" in found  # inside a function
    assert "numpy" in found  # module level, here and in quant_ref.py
    assert not {"json", "os", "conftest", "quant_ref", "modelbuild"} & set(found)


def test_installed_versions_are_the_pins():
    """What the running tier's setup installs is here at the pinned version: a machine whose
    packages drifted (or that never ran the setup script) fails here, by name, and not somewhere
    inside a transformers traceback."""
    tier = "oracles.txt" if FULL else "check.txt"
    wrong = []
    for dist, (version, imp, where) in sorted(read_requirements(tier).items()):
        try:
            have = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            wrong.append(f"{dist} not installed ({where} pins {version})")
            continue
        if have != version:
            wrong.append(f"{dist} {have} installed, {where} pins {version}")
        elif importlib.util.find_spec(imp) is None:
            wrong.append(f"{dist} installed but `import {imp}` ({where}) finds nothing")
    assert not wrong, "run scripts/setup.sh" + (" --oracles" if FULL else " --check") + ": " + "; ".join(wrong)


def test_pins_agree_with_the_lock():
    """Every pinned package appears in constraints.txt at the same version (a pin moved without
    relock.sh would install one version and hold its dependencies to another's)."""
    lock = {}
    for raw in (REQUIREMENTS / "constraints.txt").read_text().splitlines():
        line = raw.split("#")[0].strip()
        if line:
            dist, _, version = line.partition("==")
            assert version, f"constraints.txt: not an exact pin: {raw!r}"
            lock[normalized(dist)] = version
    disagree = [f"{d} {v} ({where}) but constraints.txt has {lock.get(d, 'nothing')}"
                for d, (v, _, where) in read_requirements("oracles.txt").items() if lock.get(d) != v]
    assert not disagree, "run scripts/requirements/relock.sh: " + "; ".join(disagree)
