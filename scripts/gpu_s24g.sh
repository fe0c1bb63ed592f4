#!/usr/bin/env bash
# gpu_s24g.sh — session 24, call 7 (nvidia-h200, warm after call 6, ~4 min):
# the per-kernel GPU time of a 2048-token prefill and a graphed decode step
# on the final main, both bf16 shapes (gpu_ncu.sh, prebuilt vllm of call
# 6's snapshot): the breakdown the next lever of the 0.6B prefill gate
# (the norms; STATUS) is planned from.
#   run carry [".gpu-snap-s24f"] "cd .gpu-snap-s24f && OUT=$OUT bash scripts/gpu_s24g.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
mkdir -p bin && tar xJf bin.txz -C bin
VLLM_PREBUILT=$PWD/bin VLLM_NCU_SHAPES="qwen3-0.6b llama-8b" timeout 500 bash scripts/gpu_ncu.sh 2>&1 | tail -80
