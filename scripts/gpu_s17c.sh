#!/usr/bin/env bash
# gpu_s17c.sh — session 17, call 3 (nvidia-h200, ~6 min): MATMUL_ADD (Wo /
# Wdown add into the f32 residual inside their cuBLAS GEMM, beta = 1; the
# norm after them a plain RMSNORM). One binary, A/B by
# VLLM_CUDA_MATMUL_ADD=0 (main's MATMUL + ADD_RMSNORM) / 1 (default):
#   1. test_cuda_ops (the new test_matmul_add: the GPU op vs the CPU's
#      MATMUL + ADD and vs the GPU's own MATMUL + ADD), memcheck of it;
#   2. greedy ids 2048 + 32, 0.6B and 8B, 0 vs 1; warm 2048-token TTFT
#      (median of 8), 0 / 1 alternated, three rounds each shape;
#   3. ncu durations of one layer's GEMMs and norms in the 0.6B prefill,
#      0 vs 1 (what the GEMM pays for reading C, what the norm saves);
#   4. `vllm bench` 1024 / 128 at concurrency 64 (decode batches of 64
#      rows take cuBLAS, so MATMUL_ADD too), 0.6B, 0 / 1.
# Make: bash scripts/gpu_snap.sh s17c vllm test_cuda_ops; run carry
#   [".gpu-snap-s17c"] "cd .gpu-snap-s17c && OUT=$OUT bash scripts/gpu_s17c.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s17c
gpu_bin
gpu_models
say "test_cuda_ops"
gpu_test ops 300 VLLM_CUDA_SPEED=0 ./test_cuda_ops
grep -E "LINE|Failure|FAILED|matmul_add|cuda vs cpu: matmul" $L/ops.log | cut -c1-200 | head -12
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
(cd bin && VLLM_TEST_ONLY=test_matmul_add timeout 120 $SAN --tool memcheck ./test_cuda_ops) >$L/mc_ops.log 2>&1
echo "memcheck test_matmul_add exit $? $(grep -E 'ERROR SUMMARY|PASSED|FAILED' $L/mc_ops.log | tr '\n' ' ')"
for m in 6 8; do
    M=/tmp/rand-$([ $m = 6 ] && echo qwen3-0.6b || echo llama-8b)
    gpu_model_wait $m
    for v in 0 1; do VLLM_CUDA_MATMUL_ADD=$v gpu_greedy vllm $M $L/ids_${m}_$v.txt; done
    cmp -s $L/ids_${m}_0.txt $L/ids_${m}_1.txt && echo "$m: greedy ids 1 == 0" || echo "$m: greedy ids 1 != 0: $(head -c 300 $L/ids_${m}_0.txt) | $(head -c 300 $L/ids_${m}_1.txt)"
    say "prefill 2048 TTFT, shape $m: MATMUL_ADD 0 / 1"
    for r in 1 2 3; do
        line="shape $m round $r:"
        for v in 0 1; do VLLM_CUDA_MATMUL_ADD=$v gpu_pf vllm $M $L/pf${m}_${v}_$r.log; line="$line $v: $(gpu_med $L/pf${m}_${v}_$r.log)"; done
        echo "$line ms"
    done
done
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
ids6=$($PY -c "import random; random.seed(1); print(','.join(str(random.randrange(1000, 100000)) for _ in range(2048)))")
say "ncu: one 0.6B layer's GEMMs and norms (clocks as ncu sets them)"
for v in 0 1; do
    VLLM_CUDA_MATMUL_ADD=$v timeout 150 $NCU -k regex:"nvjet|k_norm_vec" --launch-skip 40 --launch-count 12 --cache-control none \
        --section SpeedOfLight ./bin/vllm run --device cuda --model $M6 --prompt-ids $ids6 --max-tokens 2 --ignore-eos \
        --temperature 0 >$L/ncu_l_$v.txt 2>&1
    echo "MATMUL_ADD=$v: $(awk '/^  [a-zA-Z_]/{n=$1; sub(/\(.*/,"",n); sub(/<.*/,"",n)} /^ *Duration/{printf "%s %s; ", substr(n,1,28), $3}' $L/ncu_l_$v.txt)"
done
say "bench 1024 / 128 at concurrency 64, 0.6B: 0 / 1"
for v in 0 1 0 1; do
    VLLM_CUDA_MATMUL_ADD=$v timeout 120 ./bin/vllm bench --device cuda --model $M6 --num-prompts 128 --input-len 1024 \
        --output-len 128 --concurrency 64 --max-num-seqs 64 --max-num-batched-tokens 8192 --gpu-memory-utilization 0.9 \
        >$L/c64_$v.log 2>&1
    echo "c64 MATMUL_ADD=$v: $(tp $L/c64_$v.log), mean TTFT $(sed -n 's/^Mean TTFT (ms): *\([0-9.]*\).*/\1/p' $L/c64_$v.log)"
done
say done
