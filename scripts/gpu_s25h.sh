#!/usr/bin/env bash
# gpu_s25h.sh — session 25, call 8 (nvidia-h200, ~6 min): main with
# s24-x16 merged (the bf16 residual stream in prefill steps) — its op
# tests (test_cuda_ops with the bf16-dst MATMUL_ADD bound at two
# roundings, test_model_last_rows on the GPU), then gpu_bench.sh on both
# shapes without the concurrency sweep (VLLM_BENCH_CONC=""; it ran them
# after all: gpu_bench.sh took its default for an empty value then): decode and
# prefill against the same-run ceilings, async == sync, HF side by side
# and the HF oracle of our greedy ids; then the 8B's warm 2048-token TTFT
# with and without the bf16 residual, two rounds.
#   bash scripts/gpu_snap.sh s25h vllm test_engine_async_64 test_cuda_ops test_model_last_rows
#   run carry [".gpu-snap-s25h"] "cd .gpu-snap-s25h && OUT=$OUT bash scripts/gpu_s25h.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s25h
gpu_bin
gpu_fixtures
gpu_test ops 90 VLLM_CUDA_SPEED=0 ./test_cuda_ops
grep -E "FAILED|ERROR" $L/ops.log | head -5
gpu_test lr 60 VLLM_TEST_DEVICE=cuda ./test_model_last_rows
mkdir -p "$FINAL/bench"
say "gpu_bench.sh, both shapes, no concurrency sweep"
VLLM_BENCH_CONC="" VLLM_BENCH_PREBUILT=1 VLLM_BENCH_BUILD=bin OUT=$FINAL/bench timeout 460 bash scripts/gpu_bench.sh 2>&1 | tail -45
for r in 1 2; do
    gpu_pf vllm $M8 $L/pf8_16_$r.log
    VLLM_BF16_RESIDUAL=0 gpu_pf vllm $M8 $L/pf8_32_$r.log
    echo "8B round $r: 2048 TTFT bf16 residual $(gpu_med $L/pf8_16_$r.log) ms, f32 $(gpu_med $L/pf8_32_$r.log) ms"
done
say done
