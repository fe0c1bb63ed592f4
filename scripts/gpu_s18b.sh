#!/usr/bin/env bash
# gpu_s18b.sh — session 18, call 2 (nvidia-h200, ~3 min): branch s18-n256
# (s17-ggp's persistent k_gemm_glu + a variant issuing one wgmma m64n256k16
# over the adjacent gate and up tiles instead of two m64n128k16: A read
# once from shared memory per k-step; VLLM_CUDA_GEMM_GLU=2) against =1
# (two n128) and cuBLAS + k_glu (=0), all in one binary.
#   1. test_gemm_glu_fused (both variants vs the CPU and cuBLAS + k_glu;
#      speed at the 0.6B's and the 8B's gate|up shapes), memcheck;
#   2. greedy ids 2048 + 32 (0.6B) with =2 vs =0;
#   3. warm 2048-token TTFT 0.6B =0 / =1 / =2, three rounds; 8B =0 / =2, two.
# Make (from /work/main on s18-n256, clean):
#   bash scripts/gpu_snap.sh s18b vllm test_cuda_gemm
#   run carry [".gpu-snap-s18b"] "cd .gpu-snap-s18b && OUT=$OUT bash scripts/gpu_s18b.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s18b
gpu_bin
gpu_models
say "test_gemm_glu_fused"
gpu_test gg 120 VLLM_TEST_ONLY=test_gemm_glu_fused ./test_cuda_gemm
grep -E "LINE|Failure|FAILED|vs cuBLAS|speed: matmul_glu" $L/gg.log | cut -c1-160 | head -24
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
(cd bin && VLLM_TEST_ONLY=test_gemm_glu_fused VLLM_CUDA_SPEED=0 timeout 120 $SAN --tool memcheck ./test_cuda_gemm) >$L/mc.log 2>&1
echo "memcheck exit $? $(grep -E 'ERROR SUMMARY|PASSED|FAILED' $L/mc.log | tr '\n' ' ')"
gpu_model_wait 6
VLLM_CUDA_GEMM_GLU=0 gpu_greedy vllm $M6 $L/ids_0.txt
VLLM_CUDA_GEMM_GLU=2 gpu_greedy vllm $M6 $L/ids_2.txt
cmp -s $L/ids_0.txt $L/ids_2.txt && echo "greedy ids =2 == =0" || echo "greedy ids differ"
say "0.6B TTFT: =0 / =1 / =2"
for r in 1 2 3; do
    for m in 0 1 2; do VLLM_CUDA_GEMM_GLU=$m gpu_pf vllm $M6 $L/pf6_${m}_$r.log; done
    echo "round $r: $(gpu_med $L/pf6_0_$r.log) / $(gpu_med $L/pf6_1_$r.log) / $(gpu_med $L/pf6_2_$r.log) ms"
done
gpu_model_wait 8
say "8B TTFT: =0 / =2"
for r in 1 2; do
    for m in 0 2; do VLLM_CUDA_GEMM_GLU=$m gpu_pf vllm $M8 $L/pf8_${m}_$r.log; done
    echo "round $r: $(gpu_med $L/pf8_0_$r.log) / $(gpu_med $L/pf8_2_$r.log) ms"
done
say done
