#!/usr/bin/env bash
# gpu_s18g.sh — session 18, call 7 (nvidia-h200, ~3 min): branch s18-n256
# with the clusters' remote "empty" arrival as CUTLASS's (no .release.cluster:
# that qualifier compiled to MEMBAR.ALL.GPU + ERRBARs before every remote
# arrival, call 6's ~0.25-0.43 us a stage): VLLM_CUDA_GEMM_GLU=3 (BK 64) and
# =5 (BK 32) against =2 (no clusters) and cuBLAS + k_glu (=0).
#   1. test_gemm_glu_fused (modes 1-5; speed at the 0.6B and 8B shapes), memcheck;
#   2. greedy ids 2048 + 32 (0.6B, 8B) with =3 vs =0;
#   3. warm 2048-token TTFT 0.6B and 8B =0 / =2 / =3 / =5, three rounds.
# Make (from /work/main on s18-n256, clean):
#   bash scripts/gpu_snap.sh s18g vllm test_cuda_gemm
#   run carry [".gpu-snap-s18g"] "cd .gpu-snap-s18g && OUT=$OUT bash scripts/gpu_s18g.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s18g
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
    VLLM_CUDA_GEMM_GLU=3 gpu_greedy vllm $M $L/ids${mdl}_3.txt
    cmp -s $L/ids${mdl}_0.txt $L/ids${mdl}_3.txt && echo "model $mdl greedy ids =3 == =0" || echo "model $mdl greedy ids differ"
    say "model $mdl TTFT: =0 / =2 / =3 / =5"
    for r in 1 2 3; do
        for m in 0 2 3 5; do VLLM_CUDA_GEMM_GLU=$m gpu_pf vllm $M $L/pf${mdl}_${m}_$r.log; done
        echo "round $r: $(gpu_med $L/pf${mdl}_0_$r.log) / $(gpu_med $L/pf${mdl}_2_$r.log) / $(gpu_med $L/pf${mdl}_3_$r.log) / $(gpu_med $L/pf${mdl}_5_$r.log) ms"
    done
done
say done
