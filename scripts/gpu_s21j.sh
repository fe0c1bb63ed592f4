#!/usr/bin/env bash
# gpu_s21j.sh — session 21, call 10 (branch s20-qkvr): k_gemm_qkv_pp with
# the 5-stage ring again and 17 KB of staging (a head's 8 rows at a time;
# the products' registers free after each item's epilogue). Call 9 (4
# stages, 33 KB): 38.1 us in the engine (ncu) vs 28.9 without an
# epilogue, consumers waiting on TMA data. test_matmul_rope_store (+ speed
# lines), memcheck; TTFT clusters of 2 / 4 / unfused, four rounds; greedy;
# the HF oracle; ncu in the engine with / without the epilogue.
#   bash scripts/gpu_snap.sh s21j vllm test_cuda_gemm
#   run carry [".gpu-snap-s21j"] "cd .gpu-snap-s21j && OUT=$OUT bash scripts/gpu_s21j.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s21j
gpu_bin
gpu_models
gpu_test tq 120 VLLM_TEST_ONLY=test_matmul_rope_store ./test_cuda_gemm
grep -E "matmul_rope_store n=2048.*clusters of 4|speed|ERROR|Failure" $L/tq.log | head -20
grep -q "PASSED.*1 test" $L/tq.log || { say "test_matmul_rope_store did not pass: stop"; exit 1; }
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
(cd bin && VLLM_CUDA_SPEED=0 VLLM_TEST_ONLY=test_matmul_rope_store timeout 150 $SAN --tool memcheck ./test_cuda_gemm) >$L/mc.log 2>&1
echo "memcheck exit $? $(grep -E 'ERROR SUMMARY|PASSED|FAILED' $L/mc.log | tr '\n' ' ')"
gpu_model_wait 6
for r in 1 2 3 4; do
    VLLM_CUDA_QKV_CL=2 gpu_pf vllm $M6 $L/pf_2_$r.log
    VLLM_CUDA_QKV_CL=4 gpu_pf vllm $M6 $L/pf_4_$r.log
    VLLM_CUDA_QKV_ROPE=0 gpu_pf vllm $M6 $L/pf_0_$r.log
    echo "round $r: fused CL2 $(gpu_med $L/pf_2_$r.log) / fused CL4 $(gpu_med $L/pf_4_$r.log) / unfused $(gpu_med $L/pf_0_$r.log) ms"
done
VLLM_CUDA_QKV_CL=2 gpu_greedy vllm $M6 $L/g_f.txt
VLLM_CUDA_QKV_ROPE=0 gpu_greedy vllm $M6 $L/g_0.txt
echo "greedy ids fused CL2 vs unfused: $(cmp -s $L/g_f.txt $L/g_0.txt && echo identical || echo differ)"
$PY -c "import json, random; random.seed(5); V = json.load(open('$M6/config.json'))['vocab_size'];
print(' '.join(str(random.randrange(V // 100, min(V, 100000))) for _ in range(2048)))" >$L/p.ids
VLLM_CUDA_QKV_CL=2 timeout 120 ./bin/vllm run --device cuda --model $M6 --prompt-ids "$(tr ' ' ',' <$L/p.ids)" --max-tokens 64 \
    --ignore-eos --temperature 0 --print-ids >$L/ours.ids 2>$L/ours.err
timeout 200 $PY scripts/gpu_hf.py hf --model $M6 --prompt-ids $L/p.ids --ours $L/ours.ids --max-tokens 64 >$L/hf.json 2>$L/hf.err
echo "gpu_hf.py hf exit $?: $(cat $L/hf.json)"
ids=$($PY -c "import json, random; random.seed(1); V = json.load(open('$M6/config.json'))['vocab_size'];
print(','.join(str(random.randrange(V // 100, min(V, 100000))) for _ in range(2048)))")
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for e in "VLLM_CUDA_QKV_DBG=0" "VLLM_CUDA_QKV_DBG=1" "VLLM_CUDA_QKV_ROPE=0"; do
    env $e VLLM_CUDA_QKV_CL=2 timeout 200 "$NCU" --metrics gpu__time_duration.sum \
        --clock-control none --cache-control none --csv --print-units base \
        ./bin/vllm run --device cuda --model $M6 --prompt-ids "$ids" --max-tokens 1 --ignore-eos \
        --temperature 0 >$L/ncu.csv 2>$L/ncu.err
    echo "ncu engine $e exit $?"
    $PY tools/ncu_runs.py $L/ncu.csv 0 | grep -E "qkv|glu_pp|nvjet|rope"
done
say done
