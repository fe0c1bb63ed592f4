#!/usr/bin/env bash
# gpu_s15c.sh — session 15, call 3 (nvidia-h200, ~2 min): the lab's chain
# with warp-owned stages (k_mk_chain2, VLLM_MK_MODE=32; call 2 showed the
# consumers, meeting at every 16 KB chunk, the limit: the 8B chain 0.39 of
# d2d with or without the copies, 0.92 with no arithmetic): test_mk and
# test_mk_attn under 32, memcheck, then the chains' speed at stages of 8,
# 16, 32 KB (33: no arithmetic, 36: no barrier wait, 37: neither) beside
# mode 24 (call 2's best), whole layers with attention.
#   bash scripts/gpu_snap.sh c test_cuda_mk
#   run carry [".gpu-snap-c"] "cd .gpu-snap-c && OUT=$OUT bash scripts/gpu_s15c.sh"
# (k_mk_chain2, modes 32-37, was removed after call 9: slower than k_mk_chain
# at 64 KB stages; this file records the call's numbers.)
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s15c
gpu_bin
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
say "test_mk, test_mk_attn under mode 32"
gpu_test test_mk_32 90 VLLM_MK_MODE=32 VLLM_CUDA_SPEED=0 ./test_cuda_mk
grep -E "^mk |LINE|Failure|mk plan" $L/test_mk_32.log | cut -c1-200 | head -16
(cd bin && VLLM_MK_MODE=32 VLLM_CUDA_SPEED=0 timeout 120 $SAN --tool memcheck ./test_cuda_mk) >$L/memcheck_32.log 2>&1
echo "memcheck mode 32 exit $? $(grep -E 'ERROR SUMMARY' $L/memcheck_32.log | tail -1)"
say "chains: mode x stage"
for cfg in 32:8192 32:16384 32:32768 33:16384 36:16384 37:16384 24:65536 32:12288 32:24576; do
    m=${cfg%:*} sb=${cfg#*:}
    gpu_test speed_${m}_$sb 60 VLLM_MK_MODE=$m VLLM_MK_SB=$sb VLLM_MK_SPEED=chain VLLM_TEST_ONLY=test_mk_speed ./test_cuda_mk >/dev/null
    grep -E "speed: mk|Failure|mk plan" $L/speed_${m}_$sb.log | sed 's/ layers without attention//; s/the engine.s kernels, graphed/engine/' | cut -c1-220
done
say "whole layers, mode 32 at 8 and 16 KB"
for sb in 8192 16384; do
    gpu_test full_$sb 60 VLLM_MK_MODE=32 VLLM_MK_SB=$sb VLLM_TEST_ONLY=test_mk_speed ./test_cuda_mk >/dev/null
    grep -E "speed: mk.*whole|Failure" $L/full_$sb.log | cut -c1-220
done
say done
