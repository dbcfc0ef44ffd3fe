#!/usr/bin/env python3
"""Long-context retrieval with each KV cache element type: a fact (a passphrase) placed at several
depths of a ~3,000-token text, then asked for; how many answers hold it, per --kv-dtype.

The text is the GPL-3 (Debian's /usr/share/common-licenses/GPL-3), the question comes after it in
the same user turn, the model's own chat template applies (through `serve`), greedy decoding. Each
binary serves in turn on the same prompts; a trial passes when the answer contains the
passphrase's number.

  python3 bench/bench_kv_needle.py build/smollm2-kvf16/smollm2-kvf16 build/smollm2-kvq4/smollm2-kvq4

Not a test: it prints a table (depth x binary) and the totals.
"""
import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)
NEEDLES = (("amber", 4721), ("cobalt", 9386), ("violet", 2158))
HAYSTACK_CHARS = 13000  # about 3,000 SmolLM2 tokens of the GPL-3


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ask(port, model, text):
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": 24,
                       "temperature": 0}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", body,
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())["choices"][0]["message"]["content"]


def prompt(haystack, depth, word, number):
    fact = f" The secret passphrase is {word}-{number}. "
    cut = int(len(haystack) * depth)
    cut = haystack.rfind("\n", 0, cut) + 1 if depth > 0 else 0  # at a line break
    text = haystack[:cut] + fact + haystack[cut:]
    return text + "\n\nWhat is the secret passphrase mentioned in the text above? Answer with the passphrase only."


def main():
    binaries = [Path(b) for b in sys.argv[1:]]
    if not binaries:
        sys.exit(__doc__)
    haystack = Path("/usr/share/common-licenses/GPL-3").read_text()[:HAYSTACK_CHARS]
    results = {}
    for binary in binaries:
        port = free_port()
        server = subprocess.Popen([str(binary), "serve", "--port", str(port), "--kv-memory", "256"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            for _ in range(600):
                if server.poll() is not None:
                    sys.exit(f"{binary}: serve exited: {server.stderr.read().strip()}")
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2)
                    break
                except OSError:
                    time.sleep(0.1)
            for depth in DEPTHS:
                for word, number in NEEDLES:
                    answer = ask(port, binary.name, prompt(haystack, depth, word, number))
                    results[(binary.name, depth, word)] = (str(number) in answer, answer.strip())
        finally:
            server.terminate()
            server.wait()
    names = [b.name for b in binaries]
    print("depth  " + "  ".join(f"{n:>22s}" for n in names))
    for depth in DEPTHS:
        row = [sum(results[(n, depth, w)][0] for w, _ in NEEDLES) for n in names]
        print(f"{depth:5.2f}  " + "  ".join(f"{r:>20d}/{len(NEEDLES)}" for r in row))
    totals = [sum(results[(n, d, w)][0] for d in DEPTHS for w, _ in NEEDLES) for n in names]
    print("total  " + "  ".join(f"{t:>19d}/{len(DEPTHS) * len(NEEDLES)}" for t in totals))
    for (name, depth, word), (ok, answer) in sorted(results.items()):
        if not ok:
            print(f"  missed: {name} depth {depth} ({word}): {answer!r}")


if __name__ == "__main__":
    main()
