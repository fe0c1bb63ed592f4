#!/usr/bin/env bash
# gpu_s22i.sh — session 22, call 10 (nvidia-h200, ~4 min): issue 6's
# scorecard on main with this session's changes (s21-gluxs merged: the
# GEMM-GLU's rows through the ping-pong staging; the last layer on a lone
# finishing prompt's last row, VLLM_LAST_ROWS=1 by default):
# gpu_bench.sh prebuilt, both bf16 shapes (decode / prefill vs the
# same-run ceilings, concurrency 1 / 16 / 64 / 256, HF side by side, the
# HF oracle, async == sync). The GGUF row (gpu_s14b.sh's tail) is left
# out: no device time left for it (its path is unchanged but for the
# last-rows rule, which a batch-1 decode does not take).
#   bash scripts/gpu_snap.sh s22i vllm test_engine_async_64
#   run carry [".gpu-snap-s22i"] "cd .gpu-snap-s22i && OUT=$OUT bash scripts/gpu_s22i.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s22i
gpu_bin
mkdir -p "$FINAL/bench"
say "scorecard (gpu_bench.sh, prebuilt)"
VLLM_BENCH_PREBUILT=1 VLLM_BENCH_BUILD=bin OUT=$FINAL/bench timeout 400 bash scripts/gpu_bench.sh 2>&1 | tail -60
say done
