#!/usr/bin/env bash
# gpu_s23a.sh — prepared in session 22 for the next session (nvidia-h200,
# ~2.5 min; branch s22-lrpad, compiled and CPU-tested, never run on the
# device): VLLM_LAST_ROWS=any with the logit rows padded to a power of two
# (the decode graphs' bucket shapes). Session 22 measured `any` (unpadded)
# at concurrency 64 with a mean TTFT ~10 ms above the whole last layer
# (throughput even; CUDA_MODULE_LOADING=EAGER halved it).
#   0. test_model_last_rows and test_engine_async_64 (VLLM_LAST_ROWS=any)
#      on the device;
#   1. concurrency 64, 1024 / 128: default (a lone logit row) / any
#      (padded) / 0, three rounds; then any with EAGER module loading;
#   2. 0.6B warm 2048-token TTFT default / 0 / VLLM_CUDA_MATMUL_ADD=0,
#      three rounds.
#   bash scripts/gpu_snap.sh s23a vllm test_engine_async_64 test_model_last_rows
#   run carry [".gpu-snap-s23a"] "cd .gpu-snap-s23a && OUT=$OUT bash scripts/gpu_s23a.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s23a
gpu_bin
gpu_models
# the test reads its fixtures at the path compiled in (this machine's
# /work/main); the device's copy of the tree has them one level up
[ -d /work/main/tests/fixtures/models ] || { mkdir -p /work/main/tests && ln -sfn "$(cd .. && pwd)/tests/fixtures" /work/main/tests/fixtures; }
gpu_test lr 120 VLLM_TEST_DEVICE=cuda ./test_model_last_rows
gpu_model_wait 6
(cd bin && VLLM_LAST_ROWS=any VLLM_TEST_DEVICE=cuda VLLM_TEST_ASYNC_MODEL=$M6 timeout 200 ./test_engine_async_64) >$L/async64.log 2>&1
echo "test_engine_async_64 (any) exit $?: $(grep -E 'async == sync|FAILED|request [0-9]+ ' $L/async64.log | head -3)"
c64() { timeout 150 ./bin/vllm bench --device cuda --model $M6 --num-prompts 128 --input-len 1024 --output-len 128 \
    --concurrency 64 --max-num-seqs 64 --max-num-batched-tokens 8192 >$1 2>&1
    echo "$(grep -E 'Output token throughput|Mean TTFT|P99 TTFT|Mean TPOT' $1 | tr -s ' ' | tr '\n' ';')"; }
for r in 1 2 3; do
    echo "c64 round $r default: $(c64 $L/c64_d_$r.log)"
    echo "c64 round $r any: $(VLLM_LAST_ROWS=any c64 $L/c64_a_$r.log)"
    echo "c64 round $r all rows: $(VLLM_LAST_ROWS=0 c64 $L/c64_0_$r.log)"
done
echo "c64 EAGER any: $(CUDA_MODULE_LOADING=EAGER VLLM_LAST_ROWS=any c64 $L/c64_ea.log)"
echo "c64 EAGER all rows: $(CUDA_MODULE_LOADING=EAGER VLLM_LAST_ROWS=0 c64 $L/c64_e0.log)"
# and the residual add back in the norm (VLLM_CUDA_MATMUL_ADD=0): session
# 22's ncu found the RMSNORM after nvjet's beta-add reading the residual
# from DRAM (L2 hit 42%, 6.8 us x 56)
for r in 1 2 3; do
    gpu_pf vllm $M6 $L/pf_d_$r.log
    VLLM_LAST_ROWS=0 gpu_pf vllm $M6 $L/pf_0_$r.log
    VLLM_CUDA_MATMUL_ADD=0 gpu_pf vllm $M6 $L/pf_ma0_$r.log
    echo "2048 round $r: default $(gpu_med $L/pf_d_$r.log) / all rows $(gpu_med $L/pf_0_$r.log) / MATMUL_ADD=0 $(gpu_med $L/pf_ma0_$r.log) ms"
done
say done
