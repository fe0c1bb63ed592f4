#!/usr/bin/env bash
# gpu_s23h.sh — session 23, call 8 (nvidia-h200, ~5 min): main (nothing
# of this session's device work merged: s22-lrpad, s22-l2res, s23-gnorm
# stay branches) with test_model_last_rows' GPU bound (2e-3; call 1
# measured 1.5e-4 over 1e-4): that test on the device (tiny Llama and
# tiny Gemma 3, whose last-rows path had run on the CPU only), then issue
# 6's scorecard (gpu_bench.sh prebuilt, both bf16 shapes).
#   bash scripts/gpu_snap.sh s23h vllm test_engine_async_64 test_model_last_rows
#   run carry [".gpu-snap-s23h"] "cd .gpu-snap-s23h && OUT=$OUT bash scripts/gpu_s23h.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s23h
gpu_bin
# the test reads its fixtures at the path compiled in (this machine's
# /work/main); the device's copy of the tree has them one level up
[ -d /work/main/tests/fixtures/models ] || { mkdir -p /work/main/tests && ln -sfn "$(cd .. && pwd)/tests/fixtures" /work/main/tests/fixtures; }
gpu_test lr 120 VLLM_TEST_DEVICE=cuda ./test_model_last_rows
grep -E "ERROR|differ" $L/lr.log | head -5
mkdir -p "$FINAL/bench"
say "scorecard (gpu_bench.sh, prebuilt)"
VLLM_BENCH_PREBUILT=1 VLLM_BENCH_BUILD=bin OUT=$FINAL/bench timeout 420 bash scripts/gpu_bench.sh 2>&1 | tail -60
say done
