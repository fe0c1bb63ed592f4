#!/usr/bin/env bash
# gpu_s22b.sh — prepared in session 21 (nvidia-h200, ~4 min; branch
# s21-gluxs, compiled, never run): k_gemm_glu_pp's GLU rows out through
# the QKV kernel's staging (8 rows x 256 bytes a warp, the bulk-copy
# engine) instead of the fragments' 4-byte stores, which were the fused
# QKV kernel's epilogue cost (alone 38.9 -> 29.8 us, session 21).
# VLLM_CUDA_GEMM_GLU_STAGE=0 keeps the 4-byte stores (A/B in one binary).
#   0. test_gemm_glu_fused staged (default) and =0, with speed lines;
#      memcheck staged;
#   1. 0.6B warm TTFT staged / =0 at 2048 tokens (four rounds) and 8190
#      (two); greedy ids of both; the HF oracle (staged);
#   2. concurrency 64, 1024 / 128, three rounds each.
#   bash scripts/gpu_snap.sh s22b vllm test_cuda_gemm
#   run carry [".gpu-snap-s22b"] "cd .gpu-snap-s22b && OUT=$OUT bash scripts/gpu_s22b.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s22b
gpu_bin
gpu_models
gpu_test tg 120 VLLM_TEST_ONLY=test_gemm_glu_fused VLLM_CUDA_SPEED=2 ./test_cuda_gemm
grep -E "ping-pong|speed: matmul_glu|ERROR|Failure" $L/tg.log | head -24
grep -q "PASSED.*1 test" $L/tg.log || { say "test_gemm_glu_fused (staged) did not pass: stop"; exit 1; }
gpu_test t0 120 VLLM_CUDA_GEMM_GLU_STAGE=0 VLLM_TEST_ONLY=test_gemm_glu_fused VLLM_CUDA_SPEED=2 ./test_cuda_gemm
grep -E "speed: matmul_glu|ERROR|Failure" $L/t0.log | head -10
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
(cd bin && VLLM_CUDA_SPEED=0 VLLM_TEST_ONLY=test_gemm_glu_fused timeout 150 $SAN --tool memcheck ./test_cuda_gemm) >$L/mc.log 2>&1
echo "memcheck exit $? $(grep -E 'ERROR SUMMARY|PASSED|FAILED' $L/mc.log | tr '\n' ' ')"
gpu_model_wait 6
for r in 1 2 3 4; do
    gpu_pf vllm $M6 $L/pf_s_$r.log
    VLLM_CUDA_GEMM_GLU_STAGE=0 gpu_pf vllm $M6 $L/pf_0_$r.log
    echo "2048 round $r: staged $(gpu_med $L/pf_s_$r.log) / 4-byte stores $(gpu_med $L/pf_0_$r.log) ms"
done
for r in 1 2; do
    for m in s 0; do
        e=""; [ $m = 0 ] && e="VLLM_CUDA_GEMM_GLU_STAGE=0"
        env $e timeout 90 ./bin/vllm bench --device cuda --model $M6 --num-prompts 8 --input-len 8190 --output-len 1 \
            --concurrency 1 --max-num-seqs 1 --max-num-batched-tokens 8192 >$L/pf8k_${m}_$r.log 2>&1
    done
    echo "8190 round $r: staged $(gpu_med $L/pf8k_s_$r.log) / 4-byte stores $(gpu_med $L/pf8k_0_$r.log) ms"
done
gpu_greedy vllm $M6 $L/g_s.txt
VLLM_CUDA_GEMM_GLU_STAGE=0 gpu_greedy vllm $M6 $L/g_0.txt
echo "greedy ids staged vs 4-byte stores: $(cmp -s $L/g_s.txt $L/g_0.txt && echo identical || echo differ)"
$PY -c "import json, random; random.seed(5); V = json.load(open('$M6/config.json'))['vocab_size'];
print(' '.join(str(random.randrange(V // 100, min(V, 100000))) for _ in range(2048)))" >$L/p.ids
timeout 120 ./bin/vllm run --device cuda --model $M6 --prompt-ids "$(tr ' ' ',' <$L/p.ids)" --max-tokens 64 \
    --ignore-eos --temperature 0 --print-ids >$L/ours.ids 2>$L/ours.err
timeout 200 $PY scripts/gpu_hf.py hf --model $M6 --prompt-ids $L/p.ids --ours $L/ours.ids --max-tokens 64 >$L/hf.json 2>$L/hf.err
echo "gpu_hf.py hf exit $?: $(cat $L/hf.json)"
for r in 1 2 3; do
    for m in s 0; do
        e=""; [ $m = 0 ] && e="VLLM_CUDA_GEMM_GLU_STAGE=0"
        env $e timeout 150 ./bin/vllm bench --device cuda --model $M6 --num-prompts 128 --input-len 1024 --output-len 128 \
            --concurrency 64 --max-num-seqs 64 --max-num-batched-tokens 8192 >$L/c64_${m}_$r.log 2>&1
        echo "c64 round $r $m: $(grep -E 'Output token throughput|Mean TTFT|Mean TPOT' $L/c64_${m}_$r.log | tr -s ' ' | tr '\n' ';')"
    done
done
say done
