#!/usr/bin/env bash
# gpu_s25m.sh — session 25, call 13 (nvidia-h200, ~1 min): the final
# main's test_cuda_ops after the review mend (the bf16 RMSNORM checks
# through one helper) and test_model_last_rows on the GPU.
#   bash scripts/gpu_snap.sh s25m test_cuda_ops test_model_last_rows
#   run carry [".gpu-snap-s25m"] "cd .gpu-snap-s25m && OUT=$OUT bash scripts/gpu_s25m.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s25m
gpu_bin
gpu_fixtures
gpu_test ops 120 VLLM_CUDA_SPEED=0 ./test_cuda_ops
grep -E "FAILED|ERROR" $L/ops.log | head -5
gpu_test lr 60 VLLM_TEST_DEVICE=cuda ./test_model_last_rows
say done
