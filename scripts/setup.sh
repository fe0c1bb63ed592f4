#!/usr/bin/env bash
# README command 1: install dependencies, fetch the default model, build,
# and generate text with it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh --no-python
model=$(scripts/fetch_model.sh)
scripts/build.sh
echo "== vllm run --model $model"
./build/vllm run --model "$model" --prompt "The three primary colors are" --max-tokens 48 --temperature 0
