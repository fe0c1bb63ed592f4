#!/usr/bin/env bash
# gpu_s18f.sh — session 18, call 6 (nvidia-h200, ~3 min): branch s18-n256
# with BK 32 (64-byte rows, 64B swizzle, 8 stages of 24 KB instead of 4 of
# 48 KB: a stage is refilled after half the work, so more of the ring is in
# flight; call 1's ncu showed the consumers waiting ~10% on "full"):
# VLLM_CUDA_GEMM_GLU=4 (m64n256, BK 32) and =5 (the same in clusters of 2).
#   1. test_gemm_glu_fused (modes 1-5 vs the CPU and cuBLAS + k_glu; speed
#      at the 0.6B and 8B shapes), memcheck;
#   2. greedy ids 2048 + 32 (0.6B, 8B) with =4 vs =0;
#   3. warm 2048-token TTFT 0.6B and 8B =0 / =2 / =4, three rounds.
# Make (from /work/main on s18-n256, clean):
#   bash scripts/gpu_snap.sh s18f vllm test_cuda_gemm
#   run carry [".gpu-snap-s18f"] "cd .gpu-snap-s18f && OUT=$OUT bash scripts/gpu_s18f.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s18f
gpu_bin
gpu_models
say "test_gemm_glu_fused"
gpu_test gg 120 VLLM_TEST_ONLY=test_gemm_glu_fused ./test_cuda_gemm
grep -E "LINE|Failure|FAILED|vs cuBLAS|speed:|error" $L/gg.log | cut -c1-160 | head -50
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
(cd bin && VLLM_TEST_ONLY=test_gemm_glu_fused VLLM_CUDA_SPEED=0 timeout 120 $SAN --tool memcheck ./test_cuda_gemm) >$L/mc.log 2>&1
echo "memcheck exit $? $(grep -E 'ERROR SUMMARY|PASSED|FAILED' $L/mc.log | tr '\n' ' ')"
grep -q "PASSED" $L/gg.log || { say "the test failed: stop"; exit 1; }
for mdl in 6 8; do
    gpu_model_wait $mdl
    eval M=\$M$mdl
    VLLM_CUDA_GEMM_GLU=0 gpu_greedy vllm $M $L/ids${mdl}_0.txt
    VLLM_CUDA_GEMM_GLU=4 gpu_greedy vllm $M $L/ids${mdl}_4.txt
    cmp -s $L/ids${mdl}_0.txt $L/ids${mdl}_4.txt && echo "model $mdl greedy ids =4 == =0" || echo "model $mdl greedy ids differ"
    say "model $mdl TTFT: =0 / =2 / =4"
    for r in 1 2 3; do
        for m in 0 2 4; do VLLM_CUDA_GEMM_GLU=$m gpu_pf vllm $M $L/pf${mdl}_${m}_$r.log; done
        echo "round $r: $(gpu_med $L/pf${mdl}_0_$r.log) / $(gpu_med $L/pf${mdl}_2_$r.log) / $(gpu_med $L/pf${mdl}_4_$r.log) ms"
    done
done
say done
