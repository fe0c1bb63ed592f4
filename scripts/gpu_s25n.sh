#!/usr/bin/env bash
# gpu_s25n.sh — session 25, call 14 (nvidia-h200, ~4 min): the final
# main's scorecard rows that call 8 took with the warm-up skipped (the
# bf16-residual bug fixed after it): gpu_bench.sh on both shapes with its
# concurrency rows, without the HF side (call 8 ran it: the oracle passed
# on both).
#   VLLM_SNAP_NOBUILD=1 bash scripts/gpu_snap.sh s25n vllm test_engine_async_64   (call 12's binaries)
#   run carry [".gpu-snap-s25n"] "cd .gpu-snap-s25n && OUT=$OUT bash scripts/gpu_s25n.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s25n
gpu_bin
mkdir -p "$FINAL/bench"
VLLM_BENCH_HF=0 VLLM_BENCH_PREBUILT=1 VLLM_BENCH_BUILD=bin OUT=$FINAL/bench timeout 300 bash scripts/gpu_bench.sh 2>&1 |
    grep -vE "^\{" | tail -40
say done
