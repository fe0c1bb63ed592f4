#!/usr/bin/env bash
# gpu_s13b.sh — session 13, first call (nvidia-h200, ~5 min; prebuilt vllm
# and test_cuda_mmq from build-cuda in bin.txz, snapshot with scripts/,
# tools/, .deps (with libcmocka0) and .wheels):
#   1. scripts/gpu_s13a.sh: Nsight Compute of the GGUF kernels (d4 GEMV at
#      1 row, bf16 tile kernel at 16 rows) with stall reasons by SASS line;
#   2. scripts/gpu_ncu.sh on the Qwen3-0.6B shape with the prebuilt vllm:
#      per-kernel time of a 2048-token prefill and of a replayed decode step
#      (where the 0.6B gates, prefill 0.50 and decode 0.30, lose their time),
#      plus the warm-engine prefill TTFT.
#   OUT=$OUT bash scripts/gpu_s13b.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
bash scripts/gpu_s13a.sh
echo "== [$(( $(date +%s) - t0 ))s] gpu_ncu.sh qwen3-0.6b"
VLLM_PREBUILT=$PWD/bin VLLM_NCU_SHAPES=qwen3-0.6b OUT=$OUT/ncu bash scripts/gpu_ncu.sh
echo "== [$(( $(date +%s) - t0 ))s] done"
