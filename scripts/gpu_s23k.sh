#!/usr/bin/env bash
# gpu_s23k.sh — session 23, call 11 (nvidia-h200, ~1 min; main): why does
# concurrency-64 serving's mean TTFT rise ~12 ms with VLLM_LAST_ROWS=any
# (calls 1 and session 22) while throughput stays even? Per-step host
# times (VLLM_STEP_TRACE=1: schedule / execute / outputs of each
# synchronous step, and the model's own split of execute) for the default
# and for any, into $OUT (read offline).
#   bash scripts/gpu_snap.sh s23k vllm
#   run carry [".gpu-snap-s23k"] "cd .gpu-snap-s23k && OUT=$OUT bash scripts/gpu_s23k.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s23k
gpu_bin
gpu_models
gpu_model_wait 6
c64() { timeout 150 ./bin/vllm bench --device cuda --model $M6 --num-prompts 128 --input-len 1024 --output-len 128 \
    --concurrency 64 --max-num-seqs 64 --max-num-batched-tokens 8192 >$1 2>&1
    echo "$(grep -E 'Output token throughput|Mean TTFT|Mean TPOT' $1 | tr -s ' ' | tr '\n' ';')"; }
for r in 1 2; do
    echo "c64 default: $(VLLM_STEP_TRACE=1 c64 $FINAL/c64_trace_d_$r.log)"
    echo "c64 any: $(VLLM_STEP_TRACE=1 VLLM_LAST_ROWS=any c64 $FINAL/c64_trace_a_$r.log)"
done
say done
