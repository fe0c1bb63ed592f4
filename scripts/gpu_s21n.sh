#!/usr/bin/env bash
# gpu_s21n.sh — session 21, call 14 (branch s20-qkvr): the fused QKV
# kernel only where its rounds of items fill 85% (GQ_MIN_FILL; call 13:
# concurrency-64 serving 4% fewer tokens a second fused, its steps of
# 1,087 rows filling 3 rounds 73%). test_matmul_rope_store (the rule by
# the launch counter); concurrency 64 fused / VLLM_CUDA_QKV_ROPE=0, three
# rounds; 2048-token TTFT, two rounds.
#   bash scripts/gpu_snap.sh s21n vllm test_cuda_gemm
#   run carry [".gpu-snap-s21n"] "cd .gpu-snap-s21n && OUT=$OUT bash scripts/gpu_s21n.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s21n
gpu_bin
gpu_models
gpu_test tq 90 VLLM_CUDA_SPEED=0 VLLM_TEST_ONLY=test_matmul_rope_store ./test_cuda_gemm
grep -E "ERROR|Failure|default" $L/tq.log | head -8
gpu_model_wait 6
for r in 1 2 3; do
    for m in f 0; do
        e=""; [ $m = 0 ] && e="VLLM_CUDA_QKV_ROPE=0"
        env $e timeout 150 ./bin/vllm bench --device cuda --model $M6 --num-prompts 128 --input-len 1024 --output-len 128 \
            --concurrency 64 --max-num-seqs 64 --max-num-batched-tokens 8192 >$L/c64_${m}_$r.log 2>&1
        echo "round $r $m: $(grep -E 'Output token throughput|Mean TTFT|Mean TPOT' $L/c64_${m}_$r.log | tr -s ' ' | tr '\n' ';')"
    done
done
for r in 1 2; do
    gpu_pf vllm $M6 $L/pf_f_$r.log
    VLLM_CUDA_QKV_ROPE=0 gpu_pf vllm $M6 $L/pf_0_$r.log
    echo "2048 round $r: fused $(gpu_med $L/pf_f_$r.log) / unfused $(gpu_med $L/pf_0_$r.log) ms"
done
say done
