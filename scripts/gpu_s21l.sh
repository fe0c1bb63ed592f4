#!/usr/bin/env bash
# gpu_s21l.sh — session 21, call 12 (branch s20-qkvr, the version to
# merge): k_gemm_qkv_pp in clusters of 2 with bulk-copy stores of the
# staged rows, K < 2048, 1024-8192 rows; the debug modes gone.
#   0. test_cuda_gemm whole (test_gemm_glu_fused: gp_run's item-local
#      products and ring parameter; test_matmul_rope_store + its speed
#      lines at 1024 / 2048 / 4096 / 8192 rows), memcheck of
#      test_matmul_rope_store and test_gemm_glu_fused;
#   1. 0.6B warm TTFT fused / VLLM_CUDA_QKV_ROPE=0 at 2048 (four rounds)
#      and 8190 tokens (two); concurrency 64, 1024 / 128, one round each;
#   2. greedy ids fused vs unfused; the HF oracle (fused).
#   bash scripts/gpu_snap.sh s21l vllm test_cuda_gemm
#   run carry [".gpu-snap-s21l"] "cd .gpu-snap-s21l && OUT=$OUT bash scripts/gpu_s21l.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s21l
gpu_bin
gpu_models
gpu_test tg 200 VLLM_CUDA_SPEED=2 ./test_cuda_gemm
grep -E "speed: matmul_(glu 2048 x 1024|rope)|ERROR|Failure|FAILED" $L/tg.log | head -24
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for t in test_matmul_rope_store test_gemm_glu_fused; do
    (cd bin && VLLM_CUDA_SPEED=0 VLLM_TEST_ONLY=$t timeout 150 $SAN --tool memcheck ./test_cuda_gemm) >$L/mc_$t.log 2>&1
    echo "memcheck $t exit $? $(grep -E 'ERROR SUMMARY|PASSED|FAILED' $L/mc_$t.log | tr '\n' ' ')"
done
gpu_model_wait 6
for r in 1 2 3 4; do
    gpu_pf vllm $M6 $L/pf_f_$r.log
    VLLM_CUDA_QKV_ROPE=0 gpu_pf vllm $M6 $L/pf_0_$r.log
    echo "2048 round $r: fused $(gpu_med $L/pf_f_$r.log) / unfused $(gpu_med $L/pf_0_$r.log) ms"
done
for r in 1 2; do
    for m in f 0; do
        e=""; [ $m = 0 ] && e="VLLM_CUDA_QKV_ROPE=0"
        env $e timeout 90 ./bin/vllm bench --device cuda --model $M6 --num-prompts 8 --input-len 8190 --output-len 1 \
            --concurrency 1 --max-num-seqs 1 --max-num-batched-tokens 8192 >$L/pf8k_${m}_$r.log 2>&1
    done
    echo "8190 round $r: fused $(gpu_med $L/pf8k_f_$r.log) / unfused $(gpu_med $L/pf8k_0_$r.log) ms"
done
for m in f 0; do
    e=""; [ $m = 0 ] && e="VLLM_CUDA_QKV_ROPE=0"
    env $e timeout 150 ./bin/vllm bench --device cuda --model $M6 --num-prompts 128 --input-len 1024 --output-len 128 \
        --concurrency 64 --max-num-seqs 64 --max-num-batched-tokens 8192 >$L/c64_$m.log 2>&1
    echo "conc 64 $m: $(grep -E 'Output token throughput|Mean TTFT|Mean TPOT' $L/c64_$m.log | tr -s ' ' | tr '\n' ';')"
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
say done
