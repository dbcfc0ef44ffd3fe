#!/usr/bin/env bash
# Installs what ingot needs to build models and run its tests, from Debian's
# packages and PyPI only. Safe to run again: it installs only what is missing.
#   scripts/setup.sh           build dependencies and the test tools
#   scripts/setup.sh --check   also torch and transformers, the reference
#                              `ingot check` compares a models.lua entry with
#                              (what the default test tier needs: it checks
#                              every entry)
#   scripts/setup.sh --oracles also the rest of the reference libraries
#                              (llama-cpp-python, sentencepiece, accelerate)
#                              needed only to regenerate tests/fixtures and to
#                              run bench/
set -euo pipefail

# libpcre2-dev: GPTQModel's per-module rules are Python regular expressions (runtime/load/quant_rules.c)
# prometheus: promtool checks /metrics; nginx-light: the gateway in front of several `serve` processes
# (tests/test_router.py, docs/deployment.md)
APT_PACKAGES="gcc make lua5.4 lua-penlight lua-cjson libcjson-dev libutf8proc-dev libevent-dev libpcre2-dev prometheus nginx-light"
PIP_PACKAGES="numpy pytest pytest-xdist safetensors gguf tokenizers jinja2 openai requests"
CHECK_PACKAGES="torch transformers"
ORACLE_PACKAGES="$CHECK_PACKAGES accelerate sentencepiece llama-cpp-python"
case "${1:-}" in
  "") extra="" ;;
  --check) extra=$CHECK_PACKAGES ;;
  --oracles) extra=$ORACLE_PACKAGES ;;
  *) echo "usage: scripts/setup.sh [--check|--oracles]" >&2; exit 2 ;;
esac

missing=""
for p in $APT_PACKAGES; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "setup: apt-get install$missing" >&2
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi

pip_missing=""
for p in $PIP_PACKAGES; do
  python3 -m pip show -q "$p" >/dev/null 2>&1 || pip_missing="$pip_missing $p"
done
if [ -n "$extra" ]; then
  for p in $extra; do
    python3 -m pip show -q "$p" >/dev/null 2>&1 || pip_missing="$pip_missing $p"
  done
fi
if [ -n "$pip_missing" ]; then
  echo "setup: pip install$pip_missing" >&2
  # llama-cpp-python builds from source: give its build both cores
  CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) python3 -m pip install -q $pip_missing
fi
