"""The libFuzzer harnesses (tests/fuzz) in regression mode: every committed seed and crash input,
and the fixtures that seed them (GGUFs, tokenizer.json files, chat templates), run once under ASan +
UBSan, with no new inputs (seconds of fuzzing add little to the long campaigns). An input that
once crashed a parser is committed to its corpus, so this fails if the bug comes back. `make fuzz` runs the long campaigns
(docs/fuzzing.md has their results)."""
import subprocess

from conftest import ROOT


def test_fuzz_harnesses_replay_their_corpora():
    r = subprocess.run([ROOT / "scripts" / "fuzz.sh", "--regress"], capture_output=True, text=True, timeout=900)
    print(r.stdout)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
    rows = [line.split() for line in r.stdout.splitlines() if line.endswith(" ok")]
    assert len(rows) == len(list((ROOT / "tests" / "fuzz").glob("fuzz_*.c"))), r.stdout
    assert all(int(row[1]) > 0 and int(row[3]) > 0 for row in rows), r.stdout  # ran, and covered code
