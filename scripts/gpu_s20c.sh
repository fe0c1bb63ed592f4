#!/usr/bin/env bash
# gpu_s20c.sh — session 20, call 3 (nvidia-h200, ~7 min): the branch-free
# activation only into bf16 (call 2: the f32 GLU tests failed with it in
# cuda_silu / cuda_gelu_tanh), ex2 / rcp .approx.ftz, packed bf16
# rounding in the epilogue, and k_gemm_glu_pp in clusters of 4 (W
# multicast to 4 CTAs: a third less L2 traffic) next to clusters of 2.
#   0. the CUDA tests that run a GLU: test_cuda_gemm (both fused kernels,
#      speed alone), test_cuda_ops, test_cuda_gemv_xr,
#      test_cuda_fused; memcheck of test_gemm_glu_fused;
#   1. warm 2048-token TTFT (median of 8): cuBLAS + k_glu, the cooperative
#      kernel, ping-pong in clusters of 2 and of 4; 0.6B three rounds, 8B
#      two; greedy ids;
#   2. ncu source profile of k_gemm_glu_pp (clusters of 4) in the 0.6B
#      prefill.
#   bash scripts/gpu_snap.sh s20c vllm test_cuda_gemm test_cuda_ops test_cuda_gemv_xr test_cuda_fused
#   run carry [".gpu-snap-s20c"] "cd .gpu-snap-s20c && OUT=$OUT bash scripts/gpu_s20c.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s20c
gpu_bin
gpu_models
say "tests"
gpu_test tg 200 ./test_cuda_gemm
grep -E "gemm_glu fused|speed: matmul_glu|matmul_glu x" $L/tg.log
for t in ops gemv_xr fused; do gpu_test t_$t 200 ./test_cuda_$t; done
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
(cd bin && VLLM_TEST_ONLY=test_gemm_glu_fused VLLM_CUDA_SPEED=0 timeout 150 $SAN --tool memcheck ./test_cuda_gemm) >$L/mc.log 2>&1
echo "memcheck exit $? $(grep -E 'ERROR SUMMARY|PASSED|FAILED' $L/mc.log | tr '\n' ' ')"
if ! grep -q "PASSED.*test" $L/tg.log || grep -q FAILED $L/tg.log; then say "test_cuda_gemm did not pass: stop"; exit 1; fi
gpu_model_wait 6
V0="VLLM_CUDA_GEMM_GLU=0" Vc="VLLM_CUDA_GEMM_GLU=1 VLLM_CUDA_GEMM_GLU_PP=0"
V2="VLLM_CUDA_GEMM_GLU=1 VLLM_CUDA_GEMM_GLU_CL=2" V4="VLLM_CUDA_GEMM_GLU=1 VLLM_CUDA_GEMM_GLU_CL=4"
say "0.6B TTFT: cuBLAS (0) / cooperative (c) / ping-pong clusters of 2 (2) / of 4 (4)"
for r in 1 2 3; do
    for m in 0 c 2 4; do
        eval e=\$V$m
        eval "$e gpu_pf vllm $M6 $L/pf6_${m}_$r.log"
        echo "round $r $m: $(gpu_med $L/pf6_${m}_$r.log)"
    done
done
for m in 0 4; do
    eval e=\$V$m
    eval "$e gpu_greedy vllm $M6 $L/g6_$m.txt"
done
echo "0.6B greedy ids cuBLAS vs ping-pong 4: $(cmp -s $L/g6_0.txt $L/g6_4.txt && echo identical || echo differ)"
gpu_model_wait 8
say "8B TTFT: cuBLAS (0) / cooperative (c) / ping-pong clusters of 2 (2) / of 4 (4)"
for r in 1 2; do
    for m in 0 c 2 4; do
        eval e=\$V$m
        eval "$e gpu_pf vllm $M8 $L/pf8_${m}_$r.log"
        echo "round $r $m: $(gpu_med $L/pf8_${m}_$r.log)"
    done
done
ids=$($PY -c "import json, random; random.seed(1); V = json.load(open('$M6/config.json'))['vocab_size'];
print(','.join(str(random.randrange(V // 100, min(V, 100000))) for _ in range(2048)))")
say "ncu source profile: k_gemm_glu_pp (clusters of 4) in the 0.6B prefill"
VLLM_CUDA_GEMM_GLU=1 gpu_ncu_src pp6 "k_gemm_glu_pp" 5 1 ./bin/vllm run --device cuda --model $M6 --prompt-ids $ids \
    --max-tokens 1 --ignore-eos --temperature 0
say done
