#!/usr/bin/env bash
# gpu_s23e.sh — session 23, call 5 (nvidia-h200, ~2 min; branch s23-gnorm,
# second version: the row blocks' tiles meet, no last-warpgroup re-read;
# call 4 (gpu_s23d.sh) ran the first at 52.7 us vs 18.4): MATMUL_ADD_RMSNORM,
# the ping-pong GEMM with the
# residual add and the next RMSNORM in its epilogue (Wo and Wdown of a
# Llama-family layer, d 512 / 1024 / 2048; VLLM_CUDA_GEMM_NORM=0 the
# MATMUL_ADD + RMSNORM path).
#   0. test_cuda_gemm's test_matmul_add_rmsnorm (fused vs unfused, the
#      speed lines), then compute-sanitizer memcheck of it;
#   1. greedy ids on / off; the HF oracle on ours (2048-token prompt, 64);
#   2. 0.6B warm 2048-token TTFT on / off (6 rounds), 8190 tokens (2),
#      concurrency 64 (2), test_engine_async_64.
#   bash scripts/gpu_snap.sh s23e vllm test_cuda_gemm test_engine_async_64
#   run carry [".gpu-snap-s23e"] "cd .gpu-snap-s23e && OUT=$OUT bash scripts/gpu_s23e.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s23e
gpu_bin
gpu_models
gpu_test gn 200 VLLM_TEST_ONLY=test_matmul_add_rmsnorm ./test_cuda_gemm
grep -E "matmul_add_rmsnorm|ERROR|error" $L/gn.log | head -20
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
(cd bin && VLLM_CUDA_SPEED=0 VLLM_TEST_ONLY=test_matmul_add_rmsnorm timeout 200 $SAN --tool memcheck ./test_cuda_gemm) >$L/mc.log 2>&1
echo "memcheck exit $? $(grep -E 'ERROR SUMMARY|PASSED|FAILED' $L/mc.log | tr '\n' ' ')"
gpu_model_wait 6
gpu_greedy vllm $M6 $L/g_on.txt
VLLM_CUDA_GEMM_NORM=0 gpu_greedy vllm $M6 $L/g_off.txt
echo "greedy ids on vs off: $(cmp -s $L/g_on.txt $L/g_off.txt && echo identical || echo differ)"
$PY -c "import json, random; random.seed(5); V = json.load(open('$M6/config.json'))['vocab_size'];
print(' '.join(str(random.randrange(V // 100, min(V, 100000))) for _ in range(2048)))" >$L/p.ids
timeout 120 ./bin/vllm run --device cuda --model $M6 --prompt-ids "$(tr ' ' ',' <$L/p.ids)" --max-tokens 64 \
    --ignore-eos --temperature 0 --print-ids >$L/ours.ids 2>$L/ours.err
timeout 200 $PY scripts/gpu_hf.py hf --model $M6 --prompt-ids $L/p.ids --ours $L/ours.ids --max-tokens 64 >$L/hf.json 2>$L/hf.err
echo "gpu_hf.py hf exit $?: $(cat $L/hf.json)"
for r in 1 2 3 4 5 6; do
    gpu_pf vllm $M6 $L/pf_on_$r.log
    VLLM_CUDA_GEMM_NORM=0 gpu_pf vllm $M6 $L/pf_off_$r.log
    echo "2048 round $r: fused $(gpu_med $L/pf_on_$r.log) / off $(gpu_med $L/pf_off_$r.log) ms"
done
pf8k() { timeout 90 ./bin/vllm bench --device cuda --model $M6 --num-prompts 8 --input-len 8190 --output-len 1 \
    --concurrency 1 --max-num-seqs 1 --max-num-batched-tokens 8192 >$1 2>&1; }
for r in 1 2; do
    pf8k $L/pf8k_on_$r.log
    VLLM_CUDA_GEMM_NORM=0 pf8k $L/pf8k_off_$r.log
    echo "8190 round $r: fused $(gpu_med $L/pf8k_on_$r.log) / off $(gpu_med $L/pf8k_off_$r.log) ms"
done
c64() { timeout 150 ./bin/vllm bench --device cuda --model $M6 --num-prompts 128 --input-len 1024 --output-len 128 \
    --concurrency 64 --max-num-seqs 64 --max-num-batched-tokens 8192 >$1 2>&1
    echo "$(grep -E 'Output token throughput|Mean TTFT|Mean TPOT' $1 | tr -s ' ' | tr '\n' ';')"; }
for r in 1 2; do
    echo "c64 round $r fused: $(c64 $L/c64_on_$r.log)"
    echo "c64 round $r off: $(VLLM_CUDA_GEMM_NORM=0 c64 $L/c64_off_$r.log)"
done
(cd bin && VLLM_TEST_DEVICE=cuda VLLM_TEST_ASYNC_MODEL=$M6 timeout 200 ./test_engine_async_64) >$L/async64.log 2>&1
echo "test_engine_async_64 exit $?: $(grep -E 'async == sync|FAILED|request [0-9]+ ' $L/async64.log | head -3)"
say done
