#!/usr/bin/env bash
# gpu_s20e.sh — session 20, call 5 (nvidia-h200, ~3 min): the fixed rule
# test (call 4's test compared the launch count with the kernel number)
# and the speed of the four GEMM-GLU paths at gate|up shapes from
# SmolLM2-135M to the 8B (the 0.6B's at 512 to 8192 rows), memcheck of
# test_gemm_glu_fused, test_cuda_model; 0.6B warm 2048-token TTFT with the
# ping-pong kernel in clusters of 4 (default) / of 2 / cuBLAS + k_glu,
# three rounds.
#   bash scripts/gpu_snap.sh s20e vllm test_cuda_gemm test_cuda_model
#   run carry [".gpu-snap-s20e"] "cd .gpu-snap-s20e && OUT=$OUT bash scripts/gpu_s20e.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s20e
gpu_bin
gpu_models
say "tests"
gpu_test tg 300 ./test_cuda_gemm
grep -E "speed: matmul_glu|ERROR" $L/tg.log
gpu_test tm 300 ./test_cuda_model
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
(cd bin && VLLM_TEST_ONLY=test_gemm_glu_fused VLLM_CUDA_SPEED=0 timeout 150 $SAN --tool memcheck ./test_cuda_gemm) >$L/mc.log 2>&1
echo "memcheck exit $? $(grep -E 'ERROR SUMMARY|PASSED|FAILED' $L/mc.log | tr '\n' ' ')"
gpu_model_wait 6
V0="VLLM_CUDA_GEMM_GLU=0" V4="" V2="VLLM_CUDA_GEMM_GLU_CL=2"
say "0.6B TTFT 2048: clusters of 4 (4, default) / of 2 (2) / cuBLAS + k_glu (0)"
for r in 1 2 3; do
    for m in 4 2 0; do
        eval e=\$V$m
        eval "$e gpu_pf vllm $M6 $L/pf6_${m}_$r.log"
        echo "round $r $m: $(gpu_med $L/pf6_${m}_$r.log)"
    done
done
say done
