#!/usr/bin/env bash
# gpu_s24f.sh — session 24, call 6 (nvidia-h200, ~6 min): issue 6's
# scorecard on the final main (gpu_bench.sh prebuilt, both bf16 shapes:
# decode and prefill against the same-run ceilings, concurrency 1 / 16 /
# 64 / 256, HF side by side, the HF oracle, async == sync). Main since
# session 23's scorecard: the decode graphs recorded at start, the warm-up
# of the whole step budget, --device auto (the scripts pass --device cuda).
#   bash scripts/gpu_snap.sh s24f vllm test_engine_async_64
#   run carry [".gpu-snap-s24f"] "cd .gpu-snap-s24f && OUT=$OUT bash scripts/gpu_s24f.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s24f
gpu_bin
mkdir -p "$FINAL/bench"
say "scorecard (gpu_bench.sh, prebuilt)"
VLLM_BENCH_PREBUILT=1 VLLM_BENCH_BUILD=bin OUT=$FINAL/bench timeout 540 bash scripts/gpu_bench.sh 2>&1 | tail -60
say done
