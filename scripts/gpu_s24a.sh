#!/usr/bin/env bash
# gpu_s24a.sh — prepared in session 23 for the next session (nvidia-h200,
# ~1.5 min; main with VLLM_LAST_ROWS=any as the default and the warm-up of
# every row count, merged without this call: session 23's device time ran
# out; `any` set explicitly passed test_model_last_rows on the device in
# call 10 and async == sync (padded variant) in call 1):
# call 13 (gpu_s23m.sh) measured
# concurrency 64 with the warm-up of every row count: any 51.9 / 52.5 ms
# mean TTFT vs 1 52.8 / 69.0 (unwarmed any 69.7 / 74.0). Checks:
# test_model_last_rows and async == sync on the device with the new
# default, concurrency 64 any (default) / 1 interleaved, 3 rounds, the
# async engine once each, a traced run (the warm-up's sampling), the
# 2048-token TTFT.
#   bash scripts/gpu_snap.sh s24a vllm test_engine_async_64 test_model_last_rows
#   run carry [".gpu-snap-s24a"] "cd .gpu-snap-s24a && OUT=$OUT bash scripts/gpu_s24a.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s24a
gpu_bin
gpu_models
gpu_fixtures
gpu_test lr 60 VLLM_TEST_DEVICE=cuda ./test_model_last_rows
gpu_model_wait 6
(cd bin && VLLM_TEST_DEVICE=cuda VLLM_TEST_ASYNC_MODEL=$M6 timeout 120 ./test_engine_async_64) >$L/async64.log 2>&1
echo "test_engine_async_64 exit $?: $(grep -E 'async == sync|FAILED|request [0-9]+ ' $L/async64.log | head -3)"
for r in 1 2 3; do
    echo "c64 round $r any (default): $(gpu_c64 $L/c64_a_$r.log)"
    echo "c64 round $r VLLM_LAST_ROWS=1: $(VLLM_LAST_ROWS=1 gpu_c64 $L/c64_1_$r.log)"
done
echo "c64 async any: $(gpu_c64 $L/c64_asa.log --async-scheduling)"
echo "c64 async 1: $(VLLM_LAST_ROWS=1 gpu_c64 $L/c64_as1.log --async-scheduling)"
# the warm-up samples its row steps now (after session 23's device time):
# the first steps' host time should show no SAMPLE of ~13 ms
echo "c64 traced: $(VLLM_STEP_TRACE=1 gpu_c64 $FINAL/c64_trace.log)"
grep -E "^step trace: 8192|warm-up" $FINAL/c64_trace.log | head -4 | cut -c1-220
gpu_pf vllm $M6 $L/pf.log
echo "2048 TTFT: $(gpu_med $L/pf.log) ms"
say done
