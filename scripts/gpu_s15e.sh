#!/usr/bin/env bash
# gpu_s15e.sh — session 15, call 5 (nvidia-h200, ~2 min): the lab's chain
# with direct loads and an L2 prefetch warp (k_mk_chain3, VLLM_MK_MODE=64;
# calls 2-4: consumers reading a shared-memory ring from 8-9 warps were the
# limit, ncu: 0.27 issued a cycle per scheduler, mostly waiting): test_mk
# and test_mk_attn under 64, memcheck, the chains at prefetch windows of
# 8 / 16 / 32 / 64 pieces of 16 KB and pieces of 8 / 32 KB, 65 (no
# prefetch), 68 (no barrier wait), 69 (neither), whole layers with
# attention.
#   bash scripts/gpu_snap.sh e test_cuda_mk
#   run carry [".gpu-snap-e"] "cd .gpu-snap-e && OUT=$OUT bash scripts/gpu_s15e.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s15e
gpu_bin
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
say "test_mk, test_mk_attn under mode 64"
gpu_test test_mk_64 90 VLLM_MK_MODE=64 VLLM_CUDA_SPEED=0 ./test_cuda_mk
grep -E "^mk |LINE|ERROR|Failure|mk plan|mk run" $L/test_mk_64.log | cut -c1-200 | head -16
(cd bin && VLLM_MK_MODE=64 VLLM_CUDA_SPEED=0 timeout 120 $SAN --tool memcheck ./test_cuda_mk) >$L/memcheck_64.log 2>&1
echo "memcheck mode 64 exit $? $(grep -E 'ERROR SUMMARY' $L/memcheck_64.log | tail -1)"
say "chains: mode:stage:window"
for cfg in 64:16384:16 64:16384:8 64:16384:32 64:16384:64 64:8192:32 64:32768:8 65:16384:16 68:16384:16 69:16384:16; do
    IFS=: read m sb w <<<"$cfg"
    gpu_test speed_${m}_${sb}_$w 60 VLLM_MK_MODE=$m VLLM_MK_SB=$sb VLLM_MK_PF=$w VLLM_MK_SPEED=chain VLLM_TEST_ONLY=test_mk_speed ./test_cuda_mk >/dev/null
    grep -E "speed: mk|ERROR|mk plan|mk run" $L/speed_${m}_${sb}_$w.log | sed "s/ layers without attention//; s/the engine.s kernels, graphed/engine/; s/stage $sb/stage $sb window $w/" | cut -c1-230
done
say "whole layers, mode 64"
for w in 16 32; do
    gpu_test full_$w 60 VLLM_MK_MODE=64 VLLM_MK_PF=$w VLLM_TEST_ONLY=test_mk_speed ./test_cuda_mk >/dev/null
    grep -E "speed: mk.*whole|ERROR|mk run" $L/full_$w.log | sed "s/stage 16384/window $w/" | cut -c1-220
done
say done
