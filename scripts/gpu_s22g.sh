#!/usr/bin/env bash
# gpu_s22g.sh — session 22, call 8 (nvidia-h200, ~1.5 min): call 7 ran
# concurrency-64 serving 2.5% slower (mean TTFT 70 vs 53 ms, 3 of 3
# rounds) with the last layer on the logit rows: its block-table rows were
# uploaded past the step's in m->block_tables, whose growth moved the
# buffer the decode graphs hold (each one recorded again). Now in their own
# buffer (m->bt_p). Concurrency 64 default / VLLM_LAST_ROWS=0, three
# rounds; test_engine_async_64; 2048-token TTFT, two rounds.
#   bash scripts/gpu_snap.sh s22g vllm test_engine_async_64
#   run carry [".gpu-snap-s22g"] "cd .gpu-snap-s22g && OUT=$OUT bash scripts/gpu_s22g.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s22g
gpu_bin
gpu_models
gpu_model_wait 6
(cd bin && VLLM_TEST_DEVICE=cuda VLLM_TEST_ASYNC_MODEL=$M6 timeout 200 ./test_engine_async_64) >$L/async64.log 2>&1
echo "test_engine_async_64 exit $?: $(grep -E 'async == sync|FAILED|request [0-9]+ ' $L/async64.log | head -3)"
c64() { timeout 150 ./bin/vllm bench --device cuda --model $M6 --num-prompts 128 --input-len 1024 --output-len 128 \
    --concurrency 64 --max-num-seqs 64 --max-num-batched-tokens 8192 >$1 2>&1
    echo "$(grep -E 'Output token throughput|Mean TTFT|P99 TTFT|Mean TPOT' $1 | tr -s ' ' | tr '\n' ';')"; }
for r in 1 2 3; do
    echo "c64 round $r default: $(c64 $L/c64_d_$r.log)"
    echo "c64 round $r all rows: $(VLLM_LAST_ROWS=0 c64 $L/c64_0_$r.log)"
done
for r in 1 2; do
    gpu_pf vllm $M6 $L/pf_d_$r.log
    VLLM_LAST_ROWS=0 gpu_pf vllm $M6 $L/pf_0_$r.log
    echo "2048 round $r: default $(gpu_med $L/pf_d_$r.log) / all rows $(gpu_med $L/pf_0_$r.log) ms"
done
say done
