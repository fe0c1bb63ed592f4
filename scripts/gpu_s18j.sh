#!/usr/bin/env bash
# gpu_s18j.sh — session 18, call 10 (nvidia-h200, ~3 min): k_gemm_glu as
# merged (one kernel: clusters of 2 with multicast W tiles, wait 0, the
# grouped raster; call 8's mode 4) and its default rule (K >= 4096 and
# n >= 1024 rows; VLLM_CUDA_GEMM_GLU=0 / =1 override).
#   1. test_cuda_gemm, the whole binary (test_gemm_glu_fused: values vs
#      the CPU and cuBLAS + k_glu, the default rule by the launch counter,
#      speed), then memcheck of test_gemm_glu_fused;
#   2. greedy ids 2048 + 32, 8B: default vs =0; 0.6B: default vs =0;
#   3. warm TTFT, 8B, default vs =0: 2048 tokens three rounds, 1024 and 512
#      two rounds each (512 < the rule's 1024 rows: the same path both
#      ways); 0.6B 2048 default vs =0 one round (not taken at K 1024).
# Make (from /work/main on s18-n256, clean):
#   bash scripts/gpu_snap.sh s18j vllm test_cuda_gemm
#   run carry [".gpu-snap-s18j"] "cd .gpu-snap-s18j && OUT=$OUT bash scripts/gpu_s18j.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s18j
gpu_bin
gpu_models
say "test_cuda_gemm"
gpu_test tg 240 ./test_cuda_gemm
grep -E "LINE|Failure|FAILED|gemm_glu|speed: matmul_glu" $L/tg.log | cut -c1-160 | head -16
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
(cd bin && VLLM_TEST_ONLY=test_gemm_glu_fused VLLM_CUDA_SPEED=0 timeout 120 $SAN --tool memcheck ./test_cuda_gemm) >$L/mc.log 2>&1
echo "memcheck exit $? $(grep -E 'ERROR SUMMARY|PASSED|FAILED' $L/mc.log | tr '\n' ' ')"
for mdl in 8 6; do
    gpu_model_wait $mdl
    eval M=\$M$mdl
    gpu_greedy vllm $M $L/ids${mdl}_d.txt
    VLLM_CUDA_GEMM_GLU=0 gpu_greedy vllm $M $L/ids${mdl}_0.txt
    cmp -s $L/ids${mdl}_0.txt $L/ids${mdl}_d.txt && echo "model $mdl greedy ids default == =0" || echo "model $mdl greedy ids differ"
done
say "8B TTFT: default / =0"
for len in 2048 1024 512; do
    rounds=3; [ $len = 2048 ] || rounds=2
    for r in $(seq $rounds); do
        gpu_pf vllm $M8 $L/pf8_d_${len}_$r.log --input-len $len
        VLLM_CUDA_GEMM_GLU=0 gpu_pf vllm $M8 $L/pf8_0_${len}_$r.log --input-len $len
        echo "input $len round $r: $(gpu_med $L/pf8_d_${len}_$r.log) / $(gpu_med $L/pf8_0_${len}_$r.log) ms"
    done
done
say "0.6B TTFT: default / =0"
gpu_pf vllm $M6 $L/pf6_d.log
VLLM_CUDA_GEMM_GLU=0 gpu_pf vllm $M6 $L/pf6_0.log
echo "input 2048: $(gpu_med $L/pf6_d.log) / $(gpu_med $L/pf6_0.log) ms"
say done
