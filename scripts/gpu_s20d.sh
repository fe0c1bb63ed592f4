#!/usr/bin/env bash
# gpu_s20d.sh — session 20, call 4 (nvidia-h200, ~5 min): the default rule
# for the ping-pong GEMM-GLU below K 4096 (clusters of 4, 512 to 8192 rows).
#   0. test_cuda_gemm (the rule and the kernel it takes; the speed of the
#      four paths at gate|up shapes from SmolLM2-135M to the 8B, the 0.6B's
#      at 512 to 8192 rows), test_cuda_gemv_xr (its few-output bound);
#   1. 0.6B 1024-in / 128-out at concurrency 64: default / =0 (cuBLAS +
#      k_glu) / clusters of 2, two rounds;
#   2. 0.6B warm TTFT (median of 8) at 512, 2048 and 8190 tokens: default
#      vs =0, two rounds (2048: three).
#   bash scripts/gpu_snap.sh s20d vllm test_cuda_gemm test_cuda_gemv_xr
#   run carry [".gpu-snap-s20d"] "cd .gpu-snap-s20d && OUT=$OUT bash scripts/gpu_s20d.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s20d
gpu_bin
gpu_models
say "tests"
gpu_test tg 300 ./test_cuda_gemm
grep -E "speed: matmul_glu" $L/tg.log
gpu_test txr 200 ./test_cuda_gemv_xr
grep -E "vs d4" $L/txr.log | head -5
gpu_model_wait 6
V0="VLLM_CUDA_GEMM_GLU=0" Vd="" V2="VLLM_CUDA_GEMM_GLU_CL=2"
say "0.6B concurrency 64, 1024 / 128: default (d) / cuBLAS (0) / clusters of 2 (2)"
for r in 1 2; do
    for m in d 0 2; do
        eval e=\$V$m
        eval "$e timeout 90 ./bin/vllm bench --device cuda --model $M6 --num-prompts 128 --input-len 1024 --output-len 128 \
            --concurrency 64 --max-num-seqs 64 --max-num-batched-tokens 8192 >$L/c64_${m}_$r.log 2>&1"
        echo "round $r $m: $(grep -E 'Output token throughput|Mean TTFT|Mean TPOT' $L/c64_${m}_$r.log | tr -s ' ' | tr '\n' ';')"
    done
done
say "0.6B TTFT by prompt length: default (d) / cuBLAS (0)"
for len in 2048 512 8190; do
    for r in 1 2 $([ $len = 2048 ] && echo 3); do
        for m in d 0; do
            eval e=\$V$m
            eval "$e timeout 90 ./bin/vllm bench --device cuda --model $M6 --num-prompts 8 --input-len $len --output-len 1 \
                --concurrency 1 --max-num-seqs 1 --max-num-batched-tokens 8192 >$L/pf_${len}_${m}_$r.log 2>&1"
            echo "len $len round $r $m: $(gpu_med $L/pf_${len}_${m}_$r.log)"
        done
    done
done
say done
