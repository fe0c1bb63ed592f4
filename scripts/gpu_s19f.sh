#!/usr/bin/env bash
# gpu_s19f.sh — session 19, call 6 (nvidia-h200, ~3 min):
#   1. test_cuda_gemm (test_gemm_glu_fused's default rule now bounded at
#      6,144 rows: GG_MAX_N);
#   2. where the 0.6B's 2048-token TTFT (5.37 ms in call 4) goes beyond
#      the GPU's forward: test_cuda_speed's model path (one forward of a
#      2048-token prompt, inputs up and logits down, 3 back to back) vs
#      `vllm bench`'s median TTFT, and VLLM_CUDA_PROFILE=1 (eager, events
#      around every op: the op sum per step) on the same bench.
#   bash scripts/gpu_snap.sh s19f vllm test_cuda_gemm test_cuda_speed
#   run carry [".gpu-snap-s19f"], "cd .gpu-snap-s19f && OUT=$OUT bash scripts/gpu_s19f.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s19f
gpu_bin
gpu_models
gpu_test tg 300 ./test_cuda_gemm
grep -E "gemm_glu default|FAILED|Failure" $L/tg.log | head
gpu_model_wait 6
(cd bin && VLLM_CUDA_BENCH_MODEL=$M6 timeout 120 ./test_cuda_speed) >$L/speed6.log 2>&1
echo "test_cuda_speed exit $?: $(grep -E 'speed: prefill' $L/speed6.log)"
for r in 1 2; do
    gpu_pf vllm $M6 $L/pf6_$r.log
    echo "bench TTFT median $(gpu_med $L/pf6_$r.log) ms, mean $(sed -n 's/^Mean TTFT (ms): *\([0-9.]*\).*/\1/p' $L/pf6_$r.log)"
done
VLLM_CUDA_PROFILE=1 VLLM_CUDA_GRAPHS=0 gpu_pf vllm $M6 $L/prof6.log
echo "profiled bench TTFT median $(gpu_med $L/prof6.log) ms"
grep -A30 "cuda profile" $L/prof6.log | head -30
say done
