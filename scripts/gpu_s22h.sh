#!/usr/bin/env bash
# gpu_s22h.sh — session 22, call 9 (nvidia-h200, ~1 min): with bt_p the
# last-rows path still ran concurrency-64 serving with a higher mean TTFT
# (64-75 vs 52-55 ms, P99 190-221 vs 144-150; throughput even): one-time
# costs? Its L-row steps (L = a step's logit rows, any count) meet kernels
# the warm-up did not load (CUDA loads modules lazily). Same A/B with
# CUDA_MODULE_LOADING=EAGER, two rounds.
#   bash scripts/gpu_snap.sh s22h vllm
#   run carry [".gpu-snap-s22h"] "cd .gpu-snap-s22h && OUT=$OUT bash scripts/gpu_s22h.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s22h
gpu_bin
gpu_models
gpu_model_wait 6
c64() { timeout 150 ./bin/vllm bench --device cuda --model $M6 --num-prompts 128 --input-len 1024 --output-len 128 \
    --concurrency 64 --max-num-seqs 64 --max-num-batched-tokens 8192 >$1 2>&1
    echo "$(grep -E 'Output token throughput|Mean TTFT|P99 TTFT|Mean TPOT' $1 | tr -s ' ' | tr '\n' ';')"; }
export CUDA_MODULE_LOADING=EAGER
for r in 1 2; do
    echo "c64 EAGER round $r default: $(c64 $L/c64_d_$r.log)"
    echo "c64 EAGER round $r all rows: $(VLLM_LAST_ROWS=0 c64 $L/c64_0_$r.log)"
done
say done
