#!/usr/bin/env bash
# gpu_s18l.sh — prepared in session 18 (its device time ran out before it
# could run: a check for session 19's first call; nvidia-h200, ~2 min):
# does the fused GEMM-GLU default (taken at
# K >= 4096, >= 1024 rows) change 8B serving? `vllm bench` random
# 1024-in / 128-out at concurrency 64 (128 prompts, gpu_bench.sh's row:
# chunked prefill steps of up to 8192 rows take the fused kernel), default
# vs VLLM_CUDA_GEMM_GLU=0, alternated twice.
#   bash scripts/gpu_snap.sh l vllm
#   run carry [".gpu-snap-l"], "cd .gpu-snap-l && OUT=$OUT bash scripts/gpu_s18l.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s18l
gpu_bin
[ -f $M8/config.json ] || $PY scripts/gpu_hf.py make --shape llama-8b --out $M8 >$L/make8.log 2>&1 || { tail -3 $L/make8.log; exit 1; }
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
