#!/usr/bin/env bash
# gpu_s16a.sh — session 16, call 1 (nvidia-h200, ~8 min): the runner's
# device-sampling parameters through rt_sample_row on CUDA
# (test_engine_devsample, test_engine_async with VLLM_TEST_DEVICE=cuda;
# verified on the CPU only in session 15), then issue 6's scorecard on this
# main (scripts/gpu_s14b.sh: gpu_bench.sh prebuilt + the 8B Q4_K_M row).
#   bash scripts/gpu_snap.sh a vllm test_engine_async_64 quantize test_engine_devsample test_engine_async
#   run carry [".gpu-snap-a"] "cd .gpu-snap-a && OUT=$OUT bash scripts/gpu_s16a.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
(
source scripts/gpu_common.sh s16a
gpu_bin
for t in test_engine_devsample test_engine_async; do
    gpu_test $t 90 VLLM_TEST_DEVICE=cuda ./$t
    grep -E "LINE|ERROR" $L/$t.log | head -4
done
say done
)
OUT=${OUT:-$PWD/gpu-out} bash scripts/gpu_s14b.sh
