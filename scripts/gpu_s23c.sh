#!/usr/bin/env bash
# gpu_s23c.sh — session 23, call 3 (nvidia-h200, ~3 min; branch s22-l2res's
# binary, the snapshot of call 2): call 2 found the residual add back in
# the norm (VLLM_CUDA_MATMUL_ADD=0) together with the L2 window over the
# residual (VLLM_CUDA_KEEP_CACHED=1) 4.84 / 4.85 / 5.00 / 4.95 ms against
# 4.96 / 5.04 / 5.01 / 5.06 (default) at 2048 tokens. More rounds,
# interleaved, of the four; the 8B and concurrency 64 for the pair.
#   run carry [".gpu-snap-s23b"] "cd .gpu-snap-s23b && OUT=$OUT bash scripts/gpu_s23c.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s23c
gpu_bin
gpu_models
gpu_model_wait 6
gpu_greedy vllm $M6 $L/g_d.txt
VLLM_CUDA_MATMUL_ADD=0 VLLM_CUDA_KEEP_CACHED=1 gpu_greedy vllm $M6 $L/g_b.txt
echo "greedy ids both vs default: $(cmp -s $L/g_d.txt $L/g_b.txt && echo identical || echo differ)"
for r in 1 2 3 4 5 6; do
    gpu_pf vllm $M6 $L/pf_d_$r.log
    VLLM_CUDA_KEEP_CACHED=1 gpu_pf vllm $M6 $L/pf_k_$r.log
    VLLM_CUDA_MATMUL_ADD=0 gpu_pf vllm $M6 $L/pf_m_$r.log
    VLLM_CUDA_MATMUL_ADD=0 VLLM_CUDA_KEEP_CACHED=1 gpu_pf vllm $M6 $L/pf_b_$r.log
    echo "2048 round $r: default $(gpu_med $L/pf_d_$r.log) / KEEP $(gpu_med $L/pf_k_$r.log) / MATMUL_ADD=0 $(gpu_med $L/pf_m_$r.log) / both $(gpu_med $L/pf_b_$r.log) ms"
done
c64() { timeout 150 ./bin/vllm bench --device cuda --model $M6 --num-prompts 128 --input-len 1024 --output-len 128 \
    --concurrency 64 --max-num-seqs 64 --max-num-batched-tokens 8192 >$1 2>&1
    echo "$(grep -E 'Output token throughput|Mean TTFT|Mean TPOT' $1 | tr -s ' ' | tr '\n' ';')"; }
for r in 1 2; do
    echo "c64 round $r default: $(c64 $L/c64_d_$r.log)"
    echo "c64 round $r both: $(VLLM_CUDA_MATMUL_ADD=0 VLLM_CUDA_KEEP_CACHED=1 c64 $L/c64_b_$r.log)"
done
gpu_model_wait 8
for r in 1 2 3; do
    gpu_pf vllm $M8 $L/pf8b_d_$r.log
    VLLM_CUDA_MATMUL_ADD=0 VLLM_CUDA_KEEP_CACHED=1 gpu_pf vllm $M8 $L/pf8b_b_$r.log
    echo "8B 2048 round $r: default $(gpu_med $L/pf8b_d_$r.log) / both $(gpu_med $L/pf8b_b_$r.log) ms"
done
say done
