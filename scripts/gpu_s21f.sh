#!/usr/bin/env bash
# gpu_s21f.sh — session 21, call 6 (branch s20-qkvr): where the fused QKV
# kernel's alone gain (call 5: 29.8 us in clusters of 2 vs 38.4 unfused)
# goes in the engine (TTFT even): test_matmul_rope_store's speed lines
# with W hot (L2) and cold (8 copies in turn, from DRAM); ncu durations of
# one 0.6B prefill fused in clusters of 2 and unfused; TTFT in clusters of
# 2 / 4 / unfused, three rounds; greedy ids.
#   bash scripts/gpu_snap.sh s21f vllm test_cuda_gemm
#   run carry [".gpu-snap-s21f"] "cd .gpu-snap-s21f && OUT=$OUT bash scripts/gpu_s21f.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s21f
gpu_bin
gpu_models
gpu_test tq 120 VLLM_TEST_ONLY=test_matmul_rope_store ./test_cuda_gemm
grep -E "speed|ERROR|Failure" $L/tq.log | head -20
grep -q "PASSED.*1 test" $L/tq.log || { say "test_matmul_rope_store did not pass: stop"; exit 1; }
gpu_model_wait 6
for r in 1 2 3; do
    VLLM_CUDA_QKV_CL=2 gpu_pf vllm $M6 $L/pf_2_$r.log
    VLLM_CUDA_QKV_CL=4 gpu_pf vllm $M6 $L/pf_4_$r.log
    VLLM_CUDA_QKV_ROPE=0 gpu_pf vllm $M6 $L/pf_0_$r.log
    echo "round $r: fused CL2 $(gpu_med $L/pf_2_$r.log) / fused CL4 $(gpu_med $L/pf_4_$r.log) / unfused $(gpu_med $L/pf_0_$r.log) ms"
done
VLLM_CUDA_QKV_CL=2 gpu_greedy vllm $M6 $L/g_f.txt
VLLM_CUDA_QKV_ROPE=0 gpu_greedy vllm $M6 $L/g_0.txt
echo "greedy ids fused CL2 vs unfused: $(cmp -s $L/g_f.txt $L/g_0.txt && echo identical || echo differ)"
ids=$($PY -c "import json, random; random.seed(1); V = json.load(open('$M6/config.json'))['vocab_size'];
print(','.join(str(random.randrange(V // 100, min(V, 100000))) for _ in range(2048)))")
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for e in "VLLM_CUDA_QKV_CL=2" "VLLM_CUDA_QKV_ROPE=0"; do
    env $e timeout 200 "$NCU" --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
        --clock-control none --cache-control none --csv --print-units base --launch-count 1000 \
        ./bin/vllm run --device cuda --model $M6 --prompt-ids "$ids" --max-tokens 1 --ignore-eos \
        --temperature 0 >$L/ncu.csv 2>$L/ncu.err
    echo "ncu $e exit $?"
    $PY tools/ncu_summary.py $L/ncu.csv >$L/ncu_sum.txt 2>&1; sed -n 3,12p $L/ncu_sum.txt
done
say done
