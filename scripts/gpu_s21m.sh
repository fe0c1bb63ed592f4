#!/usr/bin/env bash
# gpu_s21m.sh — session 21, call 13 (branch s20-qkvr, as call 12): 0.6B
# concurrency 64, 1024 / 128, fused QKV (default) / VLLM_CUDA_QKV_ROPE=0,
# three rounds alternated (call 12's one round: 12,602 vs 13,030 tok/s).
#   bash scripts/gpu_snap.sh s21m vllm
#   run carry [".gpu-snap-s21m"] "cd .gpu-snap-s21m && OUT=$OUT bash scripts/gpu_s21m.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s21m
gpu_bin
gpu_models
gpu_model_wait 6
for r in 1 2 3; do
    for m in f 0; do
        e=""; [ $m = 0 ] && e="VLLM_CUDA_QKV_ROPE=0"
        env $e timeout 150 ./bin/vllm bench --device cuda --model $M6 --num-prompts 128 --input-len 1024 --output-len 128 \
            --concurrency 64 --max-num-seqs 64 --max-num-batched-tokens 8192 >$L/c64_${m}_$r.log 2>&1
        echo "round $r $m: $(grep -E 'Output token throughput|Mean TTFT|Mean TPOT' $L/c64_${m}_$r.log | tr -s ' ' | tr '\n' ';')"
    done
done
say done
