#!/usr/bin/env bash
# gpu_s21g.sh — session 21, call 7 (branch s20-qkvr): the fused QKV kernel
# alone with W from DRAM and contiguous slots in 256 K-slot caches
# (engine-like) vs hot; the engine's per-op GPU time (VLLM_CUDA_PROFILE,
# PDL and graphs off) fused in clusters of 2 vs unfused; TTFT fused CL2 /
# unfused, five rounds alternated.
#   bash scripts/gpu_snap.sh s21g vllm test_cuda_gemm
#   run carry [".gpu-snap-s21g"] "cd .gpu-snap-s21g && OUT=$OUT bash scripts/gpu_s21g.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s21g
gpu_bin
gpu_models
gpu_test tq 120 VLLM_TEST_ONLY=test_matmul_rope_store ./test_cuda_gemm
grep -E "speed|ERROR|Failure" $L/tq.log | head -20
gpu_model_wait 6
ids=$($PY -c "import json, random; random.seed(1); V = json.load(open('$M6/config.json'))['vocab_size'];
print(','.join(str(random.randrange(V // 100, min(V, 100000))) for _ in range(2048)))")
for e in "VLLM_CUDA_QKV_CL=2" "VLLM_CUDA_QKV_ROPE=0"; do
    env $e VLLM_CUDA_PROFILE=1 VLLM_CUDA_PDL=0 VLLM_CUDA_GRAPHS=0 ./bin/vllm run --device cuda --model $M6 \
        --prompt-ids "$ids" --max-tokens 2 --ignore-eos --temperature 0 >/dev/null 2>$L/prof.txt
    echo "== per-op GPU time, $e"
    grep -vE "^\s*$" $L/prof.txt | grep -iE "profile|matmul|rope|glu|attn|norm|total" | head -14 | cut -c1-150
done
for r in 1 2 3 4 5; do
    VLLM_CUDA_QKV_CL=2 gpu_pf vllm $M6 $L/pf_2_$r.log
    VLLM_CUDA_QKV_ROPE=0 gpu_pf vllm $M6 $L/pf_0_$r.log
    echo "round $r: fused CL2 $(gpu_med $L/pf_2_$r.log) / unfused $(gpu_med $L/pf_0_$r.log) ms"
done
say done
