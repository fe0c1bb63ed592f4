#!/usr/bin/env bash
# gpu_s25d.sh — session 25, call 4 (nvidia-h200, ~4 min): branch
# s25-gemmdec after call 3 — test_gemm_dec (the MATMUL_ADD case's CPU
# scratch fixed), the speed table with a sweep of every tile width / K
# slice count (VLLM_CUDA_SPEED=sweep), then serving A/B
# (VLLM_CUDA_GEMM_DEC=0 / 1) at concurrency 64, three rounds, and 32.
#   bash scripts/gpu_snap.sh s25d vllm test_cuda_gemm
#   run carry [".gpu-snap-s25d"] "cd .gpu-snap-s25d && OUT=$OUT bash scripts/gpu_s25d.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s25d
gpu_bin
( [ -f $M6/config.json ] || $PY scripts/gpu_hf.py make --shape qwen3-0.6b --out $M6; echo "exit $?" ) >$L/make6.log 2>&1 &
gpu_fixtures
gpu_test dec 60 VLLM_TEST_ONLY=test_gemm_dec VLLM_CUDA_SPEED=0 ./test_cuda_gemm
grep -E "gemm_dec|FAIL|ERROR|rror" $L/dec.log | head -20
gpu_test decsp 200 VLLM_TEST_ONLY=test_gemm_dec_speed VLLM_CUDA_SPEED=sweep ./test_cuda_gemm
grep -E "speed|sweep|FAIL|ERROR" $L/decsp.log | head -30
wait
tail -1 $L/make6.log
for r in 1 2 3; do
    for v in 0 1; do
        echo "round $r, c64, VLLM_CUDA_GEMM_DEC=$v: $(VLLM_CUDA_GEMM_DEC=$v gpu_c64 $L/c64_${v}_$r.log)"
    done
done
for v in 0 1; do
    echo "c32, VLLM_CUDA_GEMM_DEC=$v: $(VLLM_CUDA_GEMM_DEC=$v gpu_c64 $L/c32_$v.log --concurrency 32 --max-num-seqs 32)"
done
say done
