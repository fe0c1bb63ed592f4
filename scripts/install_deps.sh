#!/usr/bin/env bash
# Installs what vllm.c needs to build and test on Debian 12:
#   - Debian packages: compiler toolchain, cmake, pkg-config, jansson, pcre2,
#     utf8proc, libmicrohttpd, cmocka, clang (libFuzzer), python3-venv, xz,
#     chromium + chromium-driver (the web chat page test)
#   - a Python venv at .venv with the test oracles (tokenizers,
#     transformers without torch, jinja2, numpy, pytest, gguf)
# Idempotent: packages already present are not reinstalled.
# Usage: scripts/install_deps.sh [--no-python]
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(build-essential cmake pkg-config libjansson-dev libpcre2-dev libutf8proc-dev
      libmicrohttpd-dev libcmocka-dev clang libclang-rt-14-dev python3-venv xz-utils)
if [ "${1:-}" != "--no-python" ]; then pkgs+=(chromium chromium-driver); fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing Debian packages: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ "${1:-}" != "--no-python" ]; then
  if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
  fi
  if ! .venv/bin/python -c "import tokenizers, transformers, jinja2, numpy, pytest, gguf, openai, selenium" 2>/dev/null; then
    echo "installing Python test oracles into .venv"
    .venv/bin/pip install -q --disable-pip-version-check -r tests/python/requirements.txt
  fi
fi
