#!/usr/bin/env bash
# gpu_s20f.sh — session 20, call 6 (nvidia-h200, ~8 min): the merged
# default rule's test (test_cuda_gemm, no speed part), then issue 6's full
# scorecard on main with the ping-pong GEMM-GLU default below K 2048:
# scripts/gpu_s14b.sh (gpu_bench.sh prebuilt: 8B and 0.6B bf16 decode /
# prefill vs the same-run ceilings, concurrency 1 / 16 / 64 / 256, HF side
# by side, the HF oracle, async == sync; the 8B Q4_K_M row).
#   bash scripts/gpu_snap.sh s20f vllm test_engine_async_64 quantize test_cuda_gemm
#   run carry [".gpu-snap-s20f"] "cd .gpu-snap-s20f && OUT=$OUT bash scripts/gpu_s20f.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s20f
gpu_bin
say "test_cuda_gemm (VLLM_CUDA_SPEED=0)"
gpu_test tg 200 VLLM_CUDA_SPEED=0 ./test_cuda_gemm
grep -E "ERROR|default" $L/tg.log | head -5
OUT=${OUT:-$PWD/gpu-out} timeout 500 bash scripts/gpu_s14b.sh
say done
