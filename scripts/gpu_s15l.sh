#!/usr/bin/env bash
# gpu_s15l.sh — session 15, call 12 (nvidia-h200, ~2-3 min): the merged
# main's CUDA op tests that this session's changes reach (test_cuda_fused:
# QK_ROPE_STORE with the shared-angle default; test_cuda_ops: every op
# against the CPU) and the async engine gates on the device
# (test_engine_async: async == sync; test_engine_mirror).
#   bash scripts/gpu_snap.sh l test_cuda_fused test_cuda_ops test_engine_async test_engine_mirror
#   run carry [".gpu-snap-l"] "cd .gpu-snap-l && OUT=$OUT bash scripts/gpu_s15l.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s15l
gpu_bin
for t in test_cuda_fused test_cuda_ops; do
    gpu_test $t 100 VLLM_CUDA_SPEED=0 ./$t
    grep -E "LINE|ERROR" $L/$t.log | head -4
done
for t in test_engine_async test_engine_mirror; do
    gpu_test $t 90 VLLM_TEST_DEVICE=cuda ./$t
    grep -E "LINE|ERROR" $L/$t.log | head -4
done
say done
