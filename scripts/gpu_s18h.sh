#!/usr/bin/env bash
# gpu_s18h.sh — session 18, call 8 (nvidia-h200, ~3 min): branch s18-n256,
# k_gemm_glu with m64n256 only (modes renumbered: 1 = call 7's =2, 2 = its
# =3) and two new options: W0 (a consumer waits for its stage's products,
# wait_group 0, and releases the stage at once: 3 of 4 stages in flight
# instead of 2) and TS (the epilogue through a swizzled shared tile and
# two TMA stores, asynchronous). Modes 3 W0, 4 W0 + clusters, 5 W0 + TS,
# 6 W0 + TS + clusters.
#   1. test_gemm_glu_fused (modes 1-6 vs the CPU and cuBLAS + k_glu; speed
#      at the 0.6B and 8B shapes), memcheck;
#   2. greedy ids 2048 + 32 (0.6B, 8B) with =6 and =5 vs =0;
#   3. warm 2048-token TTFT 0.6B and 8B =0 / =1 / =4 / =5 / =6, three rounds.
# Make (from /work/main on s18-n256, clean):
#   bash scripts/gpu_snap.sh s18h vllm test_cuda_gemm
#   run carry [".gpu-snap-s18h"] "cd .gpu-snap-s18h && OUT=$OUT bash scripts/gpu_s18h.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s18h
gpu_bin
gpu_models
say "test_gemm_glu_fused"
gpu_test gg 120 VLLM_TEST_ONLY=test_gemm_glu_fused ./test_cuda_gemm
grep -E "LINE|Failure|FAILED|speed:|error|differ" $L/gg.log | cut -c1-160 | head -40
grep -E "vs cuBLAS" $L/gg.log | awk '{print $3, $4, $9, $13}' | sort | uniq -c | sort -rn | head -8
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
(cd bin && VLLM_TEST_ONLY=test_gemm_glu_fused VLLM_CUDA_SPEED=0 timeout 120 $SAN --tool memcheck ./test_cuda_gemm) >$L/mc.log 2>&1
echo "memcheck exit $? $(grep -E 'ERROR SUMMARY|PASSED|FAILED' $L/mc.log | tr '\n' ' ')"
grep -q "PASSED" $L/gg.log || { say "the test failed: stop"; grep -E "gemm_glu" $L/gg.log | tail -20; exit 1; }
for mdl in 6 8; do
    gpu_model_wait $mdl
    eval M=\$M$mdl
    for m in 0 5 6; do VLLM_CUDA_GEMM_GLU=$m gpu_greedy vllm $M $L/ids${mdl}_$m.txt; done
    for m in 5 6; do cmp -s $L/ids${mdl}_0.txt $L/ids${mdl}_$m.txt && echo "model $mdl greedy ids =$m == =0" || echo "model $mdl greedy ids =$m differ"; done
    say "model $mdl TTFT: =0 / =1 / =4 / =5 / =6"
    for r in 1 2 3; do
        for m in 0 1 4 5 6; do VLLM_CUDA_GEMM_GLU=$m gpu_pf vllm $M $L/pf${mdl}_${m}_$r.log; done
        echo "round $r: $(for m in 0 1 4 5 6; do printf '%s / ' $(gpu_med $L/pf${mdl}_${m}_$r.log); done)"
    done
done
say done
