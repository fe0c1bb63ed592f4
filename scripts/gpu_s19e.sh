#!/usr/bin/env bash
# gpu_s19e.sh — session 19, call 5 (nvidia-h200, ~3 min): where the fused
# GEMM-GLU stops winning on the 8B. Call 4: faster at 6144 tokens (155.4 /
# 155.9 vs 156.9 / 157.0 ms), 8192 refused (the checkpoint's context is
# 8192); call 1: ~0.4% slower in concurrency-64 serving (steps of up to
# 8192 rows with decode rows in them). Here, default vs
# VLLM_CUDA_GEMM_GLU=0 alternated: a single 8190-token prefill (one step
# of 8190 rows), 2 rounds; concurrency 64 (call 1's command), 2 rounds.
#   bash scripts/gpu_snap.sh s19e vllm  (main as in call 4)
#   run carry [".gpu-snap-s19e"], "cd .gpu-snap-s19e && OUT=$OUT bash scripts/gpu_s19e.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s19e
gpu_bin
gpu_models
gpu_model_wait 8
say "8B TTFT 8190: GEMM-GLU default / =0"
for r in 1 2; do
    for m in d 0; do
        env $([ $m = 0 ] && echo VLLM_CUDA_GEMM_GLU=0) timeout 60 ./bin/vllm bench --device cuda --model $M8 \
            --num-prompts 4 --input-len 8190 --output-len 1 --concurrency 1 --max-num-seqs 1 \
            --max-num-batched-tokens 8192 >$L/g_${m}_$r.log 2>&1
    done
    echo "round $r: $(gpu_med $L/g_d_$r.log) / $(gpu_med $L/g_0_$r.log) ms"
done
say "8B conc 64: default / =0"
for r in 1 2; do
    for m in d 0; do
        env $([ $m = 0 ] && echo VLLM_CUDA_GEMM_GLU=0) timeout 60 ./bin/vllm bench --device cuda --model $M8 --num-prompts 128 \
            --input-len 1024 --output-len 128 --concurrency 64 --max-num-seqs 64 --max-num-batched-tokens 8192 \
            --gpu-memory-utilization 0.9 >$L/c64_${m}_$r.log 2>&1
        echo "round $r $m: $(grep -E 'Output token throughput|Mean TTFT|Mean TPOT' $L/c64_${m}_$r.log | tr -s ' ' | tr '\n' ';')"
    done
done
say done
