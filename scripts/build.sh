#!/usr/bin/env bash
# Configures and builds vllm.c into build/ (Release, tests on).
# Extra CMake arguments pass through, e.g. scripts/build.sh -DVLLM_CUDA=ON
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build -j"$(nproc)"
