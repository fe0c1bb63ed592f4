#!/usr/bin/env bash
# gpu_s17h.sh — session 17, call 10 (nvidia-h200, ~3 min, the session's last
# ~280 s): the first run of cuda_gemm_glu.cu (MATMUL_GLU as one wgmma GEMM
# with the GLU in its epilogue; VLLM_CUDA_GEMM_GLU=1, off by default):
#   1. test_cuda_gemm's test_gemm_glu_fused (vs the CPU, vs cuBLAS + k_glu,
#      the launch counter; speed of both at 2048 x 1024 -> 2 x 3072), under
#      a short limit (a hang must not eat the call);
#   2. memcheck of it with VLLM_CUDA_SPEED=0;
#   3. if 1 passed: greedy ids 2048 + 32 of the 0.6B, 0 vs 1, and the warm
#      2048-token TTFT 0 / 1, two rounds.
# Make: bash scripts/gpu_snap.sh s17h vllm test_cuda_gemm; run carry
#   [".gpu-snap-s17h"] "cd .gpu-snap-s17h && OUT=$OUT bash scripts/gpu_s17h.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s17h
gpu_bin
gpu_models
say "test_gemm_glu_fused"
gpu_test gg 60 VLLM_TEST_ONLY=test_gemm_glu_fused ./test_cuda_gemm
ok=$?
grep -E "LINE|Failure|FAILED|gemm_glu|speed: matmul_glu|did not run" $L/gg.log | cut -c1-200 | head -14
grep -q "PASSED  \] 1 test" $L/gg.log || { say "test failed: stop"; exit 0; }
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
(cd bin && VLLM_TEST_ONLY=test_gemm_glu_fused VLLM_CUDA_SPEED=0 timeout 90 $SAN --tool memcheck ./test_cuda_gemm) >$L/mc.log 2>&1
echo "memcheck exit $? $(grep -E 'ERROR SUMMARY|PASSED|FAILED' $L/mc.log | tr '\n' ' ')"
gpu_model_wait 6
for v in 0 1; do VLLM_CUDA_GEMM_GLU=$v gpu_greedy vllm $M6 $L/ids_$v.txt; done
cmp -s $L/ids_0.txt $L/ids_1.txt && echo "greedy ids 1 == 0" || echo "greedy ids 1 != 0: $(head -c 200 $L/ids_0.txt) | $(head -c 200 $L/ids_1.txt)"
for r in 1 2; do
    line="0.6B TTFT round $r:"
    for v in 0 1; do VLLM_CUDA_GEMM_GLU=$v gpu_pf vllm $M6 $L/pf_${v}_$r.log; line="$line $v: $(gpu_med $L/pf_${v}_$r.log)"; done
    echo "$line ms"
done
say done
