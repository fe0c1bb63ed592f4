#!/usr/bin/env bash
# gpu_s20a.sh — session 20, call 1 (nvidia-h200, ~6 min):
#   0. test_cuda_flash in full (session 19's review mends, fw_lo_tile and
#      spd_call, were never run on the device);
#   1. test_cuda_gemm with the ping-pong GEMM-GLU (k_gemm_glu_pp, new):
#      every shape on both fused kernels vs the CPU and cuBLAS + k_glu,
#      the speed of the three paths alone at the 0.6B / 8B shapes;
#      memcheck of test_gemm_glu_fused;
#   2. warm 2048-token TTFT (median of 8): 0.6B with VLLM_CUDA_GEMM_GLU=0
#      (cuBLAS + k_glu), =1 PP=0 (cooperative), =1 (ping-pong); 8B the
#      same three; two rounds; greedy ids of the 0.6B per path;
#   3. ncu source profile of k_gemm_glu_pp in the 0.6B prefill.
#   bash scripts/gpu_snap.sh s20a vllm test_cuda_gemm test_cuda_flash
#   run carry [".gpu-snap-s20a"] "cd .gpu-snap-s20a && OUT=$OUT bash scripts/gpu_s20a.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s20a
gpu_bin
gpu_models
say "tests"
gpu_test tf 200 ./test_cuda_flash
gpu_test tg 200 ./test_cuda_gemm
grep -E "gemm_glu fused|speed: matmul_glu" $L/tg.log
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
(cd bin && VLLM_TEST_ONLY=test_gemm_glu_fused VLLM_CUDA_SPEED=0 timeout 150 $SAN --tool memcheck ./test_cuda_gemm) >$L/mc.log 2>&1
echo "memcheck exit $? $(grep -E 'ERROR SUMMARY|PASSED|FAILED' $L/mc.log | tr '\n' ' ')"
if ! grep -q "PASSED.*test" $L/tg.log || grep -q FAILED $L/tg.log; then say "test_cuda_gemm did not pass: stop"; exit 1; fi
gpu_model_wait 6
say "0.6B TTFT: cuBLAS (0) / cooperative (c) / ping-pong (p)"
for r in 1 2; do
    for m in 0 c p; do
        case $m in 0) e="VLLM_CUDA_GEMM_GLU=0" ;; c) e="VLLM_CUDA_GEMM_GLU=1 VLLM_CUDA_GEMM_GLU_PP=0" ;; p) e="VLLM_CUDA_GEMM_GLU=1" ;; esac
        eval "$e gpu_pf vllm $M6 $L/pf6_${m}_$r.log"
        echo "round $r $m: $(gpu_med $L/pf6_${m}_$r.log)"
    done
done
for m in 0 p; do
    case $m in 0) e="VLLM_CUDA_GEMM_GLU=0" ;; p) e="VLLM_CUDA_GEMM_GLU=1" ;; esac
    eval "$e gpu_greedy vllm $M6 $L/g6_$m.txt"
done
echo "0.6B greedy ids cuBLAS vs ping-pong: $(cmp -s $L/g6_0.txt $L/g6_p.txt && echo identical || echo differ)"
gpu_model_wait 8
say "8B TTFT: cuBLAS (0) / cooperative (c, the default before) / ping-pong (p)"
for r in 1 2; do
    for m in 0 c p; do
        case $m in 0) e="VLLM_CUDA_GEMM_GLU=0" ;; c) e="VLLM_CUDA_GEMM_GLU=1 VLLM_CUDA_GEMM_GLU_PP=0" ;; p) e="VLLM_CUDA_GEMM_GLU=1" ;; esac
        eval "$e gpu_pf vllm $M8 $L/pf8_${m}_$r.log"
        echo "round $r $m: $(gpu_med $L/pf8_${m}_$r.log)"
    done
done
ids=$($PY -c "import json, random; random.seed(1); V = json.load(open('$M6/config.json'))['vocab_size'];
print(','.join(str(random.randrange(V // 100, min(V, 100000))) for _ in range(2048)))")
say "ncu source profile: k_gemm_glu_pp in the 0.6B prefill"
VLLM_CUDA_GEMM_GLU=1 gpu_ncu_src pp6 "k_gemm_glu_pp" 5 1 ./bin/vllm run --device cuda --model $M6 --prompt-ids $ids \
    --max-tokens 1 --ignore-eos --temperature 0
say done
