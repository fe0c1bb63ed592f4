#!/usr/bin/env bash
# gpu_s21o.sh — session 21, call 15 (branch s20-qkvr, as call 14): serving
# with the fused QKV kernel (default) / VLLM_CUDA_QKV_ROPE=0: concurrency
# 64, four more rounds alternated (call 14: 12,543 / 13,245 / 12,361 vs
# 13,037 / 13,105 / 12,973 tok/s), concurrency 256 one round each.
#   bash scripts/gpu_snap.sh s21o vllm
#   run carry [".gpu-snap-s21o"] "cd .gpu-snap-s21o && OUT=$OUT bash scripts/gpu_s21o.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s21o
gpu_bin
gpu_models
gpu_model_wait 6
for r in 1 2 3 4; do
    for m in f 0; do
        e=""; [ $m = 0 ] && e="VLLM_CUDA_QKV_ROPE=0"
        env $e timeout 150 ./bin/vllm bench --device cuda --model $M6 --num-prompts 128 --input-len 1024 --output-len 128 \
            --concurrency 64 --max-num-seqs 64 --max-num-batched-tokens 8192 >$L/c64_${m}_$r.log 2>&1
        echo "c64 round $r $m: $(grep -E 'Output token throughput|Mean TTFT|Mean TPOT' $L/c64_${m}_$r.log | tr -s ' ' | tr '\n' ';')"
    done
done
for m in f 0; do
    e=""; [ $m = 0 ] && e="VLLM_CUDA_QKV_ROPE=0"
    env $e timeout 150 ./bin/vllm bench --device cuda --model $M6 --num-prompts 512 --input-len 1024 --output-len 128 \
        --concurrency 256 --max-num-seqs 256 --max-num-batched-tokens 8192 >$L/c256_$m.log 2>&1
    echo "c256 $m: $(grep -E 'Output token throughput|Mean TTFT|Mean TPOT' $L/c256_$m.log | tr -s ' ' | tr '\n' ';')"
done
say done
