#!/usr/bin/env bash
# gpu_s18k.sh — session 18, call 11 (nvidia-h200, ~5 min): issue 6's
# scorecard on main after the merge of s18-n256 (k_gemm_glu on by default
# for the 8B's gate|up), reduced to fit the session's last device time:
# scripts/gpu_bench.sh on prebuilt binaries with VLLM_BENCH_CONC=1 (no
# 64 / 256 rows; its sampled concurrency-16 row still runs) and no GGUF
# row; the HF oracle (teacher-forced, both
# shapes: the 8B's prefill now runs the fused kernel), HF transformers side
# by side, async == sync (both shapes).
#   bash scripts/gpu_snap.sh k vllm test_engine_async_64
#   run carry [".gpu-snap-k"], "cd .gpu-snap-k && OUT=$OUT bash scripts/gpu_s18k.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s18k
gpu_bin
mkdir -p "$FINAL/bench"
say "scorecard (gpu_bench.sh, prebuilt, concurrency 1)"
VLLM_BENCH_CONC=1 VLLM_BENCH_PREBUILT=1 VLLM_BENCH_BUILD=bin OUT=$FINAL/bench timeout 320 bash scripts/gpu_bench.sh 2>&1 | tail -45
say done
