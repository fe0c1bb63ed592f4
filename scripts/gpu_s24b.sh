#!/usr/bin/env bash
# gpu_s24b.sh — prepared in session 23 for the next session (nvidia-h200,
# ~2 min; branch s23-graphwarm, CPU-tested, never run on the device): the
# decode graphs of every bucket up to max_num_seqs recorded at start on the
# runner's own KV cache (runner_warm.c; session 23's traces: concurrency
# 64's tail decode steps held the host 3-10 ms each at a bucket's first
# use). Checks: test_engine_warmup on the device (the default warm-up,
# graphs included, against VLLM_WARMUP=0: the same tokens and blocks),
# test_engine_async_64; concurrency 64 traced (the tail's decode steps
# should queue in < 1 ms), 3 rounds against VLLM_WARMUP_ROWS=0 (neither
# warm-up; main's own numbers: gpu_s24a.sh).
#   bash scripts/gpu_snap.sh s24b vllm test_engine_warmup test_engine_async_64
#   run carry [".gpu-snap-s24b"] "cd .gpu-snap-s24b && OUT=$OUT bash scripts/gpu_s24b.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s24b
gpu_bin
gpu_models
gpu_fixtures
gpu_model_wait 6
gpu_test warm 120 VLLM_TEST_DEVICE=cuda VLLM_TEST_ASYNC_MODEL=$M6 ./test_engine_warmup
(cd bin && VLLM_TEST_DEVICE=cuda VLLM_TEST_ASYNC_MODEL=$M6 timeout 120 ./test_engine_async_64) >$L/async64.log 2>&1
echo "test_engine_async_64 exit $?: $(grep -E 'async == sync|FAILED|request [0-9]+ ' $L/async64.log | head -3)"
echo "c64 traced: $(VLLM_STEP_TRACE=1 gpu_c64 $FINAL/c64_trace.log)"
grep -E "warm-up" $FINAL/c64_trace.log
$PY tools/step_trace.py $FINAL/c64_trace.log --list 20 | tail -22
for r in 1 2 3; do
    echo "c64 round $r: $(gpu_c64 $L/c64_$r.log)"
    echo "c64 round $r VLLM_WARMUP_ROWS=0: $(VLLM_WARMUP_ROWS=0 gpu_c64 $L/c64_0_$r.log)"
done
say done
