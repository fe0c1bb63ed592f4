#!/usr/bin/env bash
# gpu_s21c.sh — session 21, call 3 (branch s20-qkvr): k_gemm_qkv_pp with
# a leaner epilogue: tile-uniform paths, the sin / cos shared by a tile's
# two heads, one store path for bf16 caches (call 2: 50.5 us a 0.6B layer
# with 2,550 SASS instructions a warp's epilogue, the GLU kernel's 841).
#   0. test_matmul_rope_store; memcheck of it;
#   1. 0.6B warm 2048-token TTFT fused / in clusters of 2 / VLLM_CUDA_QKV_ROPE=0,
#      three rounds;
#      greedy ids of both; the HF oracle with the fused path;
#   2. ncu durations of one 0.6B prefill; source profile of k_gemm_qkv_pp.
#   bash scripts/gpu_snap.sh s21c vllm test_cuda_gemm
#   run carry [".gpu-snap-s21c"] "cd .gpu-snap-s21c && OUT=$OUT bash scripts/gpu_s21c.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s21c
gpu_bin
gpu_models
gpu_test tq 60 VLLM_TEST_ONLY=test_matmul_rope_store ./test_cuda_gemm
grep -E "matmul_rope_store|ERROR|Failure" $L/tq.log | head -14
grep -q "PASSED.*1 test" $L/tq.log || { say "test_matmul_rope_store did not pass: stop"; exit 1; }
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
(cd bin && VLLM_TEST_ONLY=test_matmul_rope_store timeout 150 $SAN --tool memcheck ./test_cuda_gemm) >$L/mc.log 2>&1
echo "memcheck exit $? $(grep -E 'ERROR SUMMARY|PASSED|FAILED' $L/mc.log | tr '\n' ' ')"
gpu_model_wait 6
for r in 1 2 3; do
    gpu_pf vllm $M6 $L/pf_f_$r.log
    VLLM_CUDA_QKV_CL=2 gpu_pf vllm $M6 $L/pf_2_$r.log
    VLLM_CUDA_QKV_ROPE=0 gpu_pf vllm $M6 $L/pf_0_$r.log
    echo "round $r: fused $(gpu_med $L/pf_f_$r.log) / fused CL2 $(gpu_med $L/pf_2_$r.log) / unfused $(gpu_med $L/pf_0_$r.log) ms"
done
gpu_greedy vllm $M6 $L/g_f.txt
VLLM_CUDA_QKV_ROPE=0 gpu_greedy vllm $M6 $L/g_0.txt
echo "greedy ids fused vs unfused: $(cmp -s $L/g_f.txt $L/g_0.txt && echo identical || echo differ)"
$PY -c "import json, random; random.seed(5); V = json.load(open('$M6/config.json'))['vocab_size'];
print(' '.join(str(random.randrange(V // 100, min(V, 100000))) for _ in range(2048)))" >$L/p.ids
timeout 120 ./bin/vllm run --device cuda --model $M6 --prompt-ids "$(tr ' ' ',' <$L/p.ids)" --max-tokens 64 \
    --ignore-eos --temperature 0 --print-ids >$L/ours.ids 2>$L/ours.err
timeout 200 $PY scripts/gpu_hf.py hf --model $M6 --prompt-ids $L/p.ids --ours $L/ours.ids --max-tokens 64 >$L/hf.json 2>$L/hf.err
echo "gpu_hf.py hf exit $?: $(cat $L/hf.json)"
ids=$($PY -c "import json, random; random.seed(1); V = json.load(open('$M6/config.json'))['vocab_size'];
print(','.join(str(random.randrange(V // 100, min(V, 100000))) for _ in range(2048)))")
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
timeout 200 "$NCU" --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
    --clock-control none --cache-control none --csv --print-units base --launch-count 1000 \
    ./bin/vllm run --device cuda --model $M6 --prompt-ids "$ids" --max-tokens 1 --ignore-eos \
    --temperature 0 >$L/ncu.csv 2>$L/ncu.err
echo "ncu exit $?"
$PY tools/ncu_summary.py $L/ncu.csv >$L/ncu_sum.txt 2>&1; head -12 $L/ncu_sum.txt
gpu_ncu_src qkv "k_gemm_qkv_pp" 5 1 ./bin/vllm run --device cuda --model $M6 --prompt-ids $ids \
    --max-tokens 1 --ignore-eos --temperature 0
say done
