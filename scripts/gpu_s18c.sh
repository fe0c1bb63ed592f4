#!/usr/bin/env bash
# gpu_s18c.sh — session 18, call 3 (nvidia-h200, ~4 min): branch s18-n256
# with gg_tile's grouped raster (VLLM_CUDA_GG_GROUP token tiles run fastest
# in a group, default 16; 0 = call 2's order, feature tiles fastest, which
# re-read the 8B's 235 MB gate|up from DRAM once per token tile).
#   1. test_gemm_glu_fused at GG_GROUP 16 (correctness of both variants,
#      speed at the 0.6B and 8B shapes), speed again at 0 and 8; memcheck;
#   2. greedy ids 2048 + 32 (0.6B and 8B) with =2 vs =0;
#   3. warm 2048-token TTFT 0.6B =0 / =1 / =2, three rounds; 8B =0 / =1 /
#      =2, three rounds.
# Make (from /work/main on s18-n256, clean):
#   bash scripts/gpu_snap.sh s18c vllm test_cuda_gemm
#   run carry [".gpu-snap-s18c"] "cd .gpu-snap-s18c && OUT=$OUT bash scripts/gpu_s18c.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s18c
gpu_bin
gpu_models
say "test_gemm_glu_fused, GG_GROUP 16 (the default)"
gpu_test gg 120 VLLM_TEST_ONLY=test_gemm_glu_fused ./test_cuda_gemm
grep -E "LINE|Failure|FAILED|vs cuBLAS|speed: matmul_glu" $L/gg.log | cut -c1-160 | head -24
for gr in 0 8 32; do
    gpu_test gg$gr 120 VLLM_CUDA_GG_GROUP=$gr VLLM_TEST_ONLY=test_gemm_glu_fused ./test_cuda_gemm
    echo "GG_GROUP $gr:"; grep -E "speed: matmul_glu" $L/gg$gr.log | cut -c1-160
done
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
(cd bin && VLLM_TEST_ONLY=test_gemm_glu_fused VLLM_CUDA_SPEED=0 timeout 120 $SAN --tool memcheck ./test_cuda_gemm) >$L/mc.log 2>&1
echo "memcheck exit $? $(grep -E 'ERROR SUMMARY|PASSED|FAILED' $L/mc.log | tr '\n' ' ')"
gpu_model_wait 6
VLLM_CUDA_GEMM_GLU=0 gpu_greedy vllm $M6 $L/ids6_0.txt
VLLM_CUDA_GEMM_GLU=2 gpu_greedy vllm $M6 $L/ids6_2.txt
cmp -s $L/ids6_0.txt $L/ids6_2.txt && echo "0.6B greedy ids =2 == =0" || echo "0.6B greedy ids differ"
say "0.6B TTFT: =0 / =1 / =2"
for r in 1 2 3; do
    for m in 0 1 2; do VLLM_CUDA_GEMM_GLU=$m gpu_pf vllm $M6 $L/pf6_${m}_$r.log; done
    echo "round $r: $(gpu_med $L/pf6_0_$r.log) / $(gpu_med $L/pf6_1_$r.log) / $(gpu_med $L/pf6_2_$r.log) ms"
done
gpu_model_wait 8
VLLM_CUDA_GEMM_GLU=0 gpu_greedy vllm $M8 $L/ids8_0.txt
VLLM_CUDA_GEMM_GLU=2 gpu_greedy vllm $M8 $L/ids8_2.txt
cmp -s $L/ids8_0.txt $L/ids8_2.txt && echo "8B greedy ids =2 == =0" || echo "8B greedy ids differ"
say "8B TTFT: =0 / =1 / =2"
for r in 1 2 3; do
    for m in 0 1 2; do VLLM_CUDA_GEMM_GLU=$m gpu_pf vllm $M8 $L/pf8_${m}_$r.log; done
    echo "round $r: $(gpu_med $L/pf8_0_$r.log) / $(gpu_med $L/pf8_1_$r.log) / $(gpu_med $L/pf8_2_$r.log) ms"
done
say done
