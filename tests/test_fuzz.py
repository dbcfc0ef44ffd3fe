"""The libFuzzer harnesses (tests/fuzz) in regression mode: every committed seed and crash input,
and the fixtures that seed them (GGUFs, tokenizer.json files, chat templates), run once under ASan +
UBSan, with no new inputs (seconds of fuzzing add little to the long campaigns). An input that
once crashed a parser is committed to its corpus, so this fails if the bug comes back. `make fuzz` runs the long campaigns
(docs/fuzzing.md has their results)."""
import subprocess

import pytest

from conftest import ROOT


def test_fuzz_harnesses_replay_their_corpora():
    r = subprocess.run([ROOT / "scripts" / "fuzz.sh", "--regress"], capture_output=True, text=True, timeout=900)
    print(r.stdout)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
    rows = [line.split() for line in r.stdout.splitlines() if line.endswith(" ok")]
    assert len(rows) == len(list((ROOT / "tests" / "fuzz").glob("fuzz_*.c"))), r.stdout
    assert all(int(row[1]) > 0 and int(row[3]) > 0 for row in rows), r.stdout  # ran, and covered code


@pytest.mark.full
def test_fuzz_harnesses_replay_their_corpora_under_msan():
    """The same inputs under MemorySanitizer (`scripts/fuzz.sh --msan --regress`): a read of memory
    never written aborts the harness (the grammar compiler once scanned elements it had not
    written). cJSON, utf8proc and libevent are built instrumented from Debian's sources first
    (scripts/msan_deps.sh: network once, then cached in build/msan-deps). The full tier: the
    default tier replays under ASan + UBSan above."""
    r = subprocess.run([ROOT / "scripts" / "fuzz.sh", "--msan", "--regress"], capture_output=True, text=True,
                       timeout=1800)
    print(r.stdout)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
    rows = [line.split() for line in r.stdout.splitlines() if line.endswith(" ok")]
    assert len(rows) == len(list((ROOT / "tests" / "fuzz").glob("fuzz_*.c"))), r.stdout
    assert all(int(row[1]) > 0 and int(row[3]) > 0 for row in rows), r.stdout
