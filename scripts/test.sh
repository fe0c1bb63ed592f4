#!/usr/bin/env bash
# README command 2: every test. Installs what is missing, builds, runs the
# C unit tests (ctest), the Python oracle tests (pytest) and a short fuzz
# run of every parser. FUZZ_SECONDS (default 20) sets the fuzz time per target.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
# The default model (for its golden test); tests skip if it cannot be fetched.
scripts/fetch_model.sh >/dev/null || echo "warning: default model unavailable; its tests will skip"
scripts/build.sh
echo "== ctest"
(cd build && ctest --output-on-failure -j"$(nproc)")
echo "== pytest"
VLLM_BUILD_DIR="$PWD/build" .venv/bin/python -m pytest -q tests/python
if [ -x scripts/fuzz_smoke.sh ]; then
  echo "== fuzz smoke"
  FUZZ_SECONDS="${FUZZ_SECONDS:-20}" scripts/fuzz_smoke.sh
fi
