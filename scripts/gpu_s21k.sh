#!/usr/bin/env bash
# gpu_s21k.sh — session 21, call 11 (branch s20-qkvr): is the fused QKV
# kernel's epilogue slower in the engine (call 10: 9.2 us over no
# epilogue, alone 4.6) because its K / V rows land on lines not in L2?
# test_matmul_rope_store's speed lines now rotate 8 slot ranges in the
# engine-like set; VLLM_CUDA_QKV_BULK=1 stores the staged rows by bulk
# copies (TMA) instead of st.global. ncu in the engine (clusters of 2)
# st.global / bulk; TTFT st.global / bulk / unfused, four rounds.
#   bash scripts/gpu_snap.sh s21k vllm test_cuda_gemm
#   run carry [".gpu-snap-s21k"] "cd .gpu-snap-s21k && OUT=$OUT bash scripts/gpu_s21k.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s21k
gpu_bin
gpu_models
gpu_test tq 120 VLLM_TEST_ONLY=test_matmul_rope_store ./test_cuda_gemm
grep -E "speed|ERROR|Failure" $L/tq.log | head -20
VLLM_CUDA_QKV_BULK=1 gpu_test tb 60 VLLM_CUDA_SPEED=0 VLLM_TEST_ONLY=test_matmul_rope_store ./test_cuda_gemm
grep -E "n=2048.*clusters of 2|ERROR|Failure" $L/tb.log | head -8
gpu_model_wait 6
ids=$($PY -c "import json, random; random.seed(1); V = json.load(open('$M6/config.json'))['vocab_size'];
print(','.join(str(random.randrange(V // 100, min(V, 100000))) for _ in range(2048)))")
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for b in 0 1; do
    VLLM_CUDA_QKV_BULK=$b VLLM_CUDA_QKV_CL=2 timeout 200 "$NCU" --metrics gpu__time_duration.sum \
        --clock-control none --cache-control none --csv --print-units base -k regex:"k_gemm_qkv_pp" \
        ./bin/vllm run --device cuda --model $M6 --prompt-ids "$ids" --max-tokens 1 --ignore-eos \
        --temperature 0 >$L/ncu.csv 2>$L/ncu.err
    echo "ncu engine BULK=$b exit $?"
    $PY tools/ncu_runs.py $L/ncu.csv 0
done
for r in 1 2 3 4; do
    VLLM_CUDA_QKV_CL=2 gpu_pf vllm $M6 $L/pf_2_$r.log
    VLLM_CUDA_QKV_CL=2 VLLM_CUDA_QKV_BULK=1 gpu_pf vllm $M6 $L/pf_b_$r.log
    VLLM_CUDA_QKV_ROPE=0 gpu_pf vllm $M6 $L/pf_0_$r.log
    echo "round $r: fused CL2 $(gpu_med $L/pf_2_$r.log) / bulk $(gpu_med $L/pf_b_$r.log) / unfused $(gpu_med $L/pf_0_$r.log) ms"
done
VLLM_CUDA_QKV_CL=2 VLLM_CUDA_QKV_BULK=1 gpu_greedy vllm $M6 $L/g_b.txt
VLLM_CUDA_QKV_ROPE=0 gpu_greedy vllm $M6 $L/g_0.txt
echo "greedy ids bulk vs unfused: $(cmp -s $L/g_b.txt $L/g_0.txt && echo identical || echo differ)"
say done
