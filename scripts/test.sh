#!/usr/bin/env bash
# README command 2: every test. Installs what is missing, builds, runs the
# C unit tests (ctest), the Python oracle tests (pytest), compiles the CUDA
# backend and its tests where nvcc is (they skip without a GPU), and a short
# fuzz run of every parser. FUZZ_SECONDS (default 20) sets the fuzz time per target.
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
# The CUDA backend compiles wherever nvcc is (CI has no GPU: its tests
# start and skip; scripts/gpu_run.sh runs them on a GPU machine).
NVCC=$(command -v nvcc || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; } || true)
if [ -n "$NVCC" ]; then
  echo "== CUDA build (compile; tests skip without a device)"
  cmake -S . -B build-cuda -DVLLM_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$NVCC" >/dev/null
  cmake --build build-cuda -j"$(nproc)"
  (cd build-cuda && ctest --output-on-failure -R "cuda")
else
  echo "== CUDA build skipped: no nvcc"
fi
if [ -x scripts/fuzz_smoke.sh ]; then
  echo "== fuzz smoke"
  FUZZ_SECONDS="${FUZZ_SECONDS:-20}" scripts/fuzz_smoke.sh
fi
