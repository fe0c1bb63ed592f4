#!/usr/bin/env bash
# gpu_s15b.sh — session 15, call 2 (nvidia-h200, ~2 min): why the
# megakernel lab streams at 0.24 (0.6B chain) / 0.38 (8B chain) of the
# d2d rate when the engine's separate kernels reach 0.44 / 0.88 (call 1,
# gpu_s15a.sh). The lab's MODE bits (k_mk_chain, VLLM_MK_MODE) and stage
# size (VLLM_MK_SB):
#   1 the consumers skip the arithmetic (the producer's stream alone),
#   2 the producer skips the copies (the consumers alone),
#   4 no wait at the grid barrier (the barriers' cost),
#   8 v in shared memory in two halves (no bank conflicts),
#   16 release / acquire barrier without sleeps or separate fences;
# correctness of 8, 16 and 24 (test_mk), then the chains' speed under
# each setting.
#   bash scripts/gpu_snap.sh b test_cuda_mk
#   run carry [".gpu-snap-b"] "cd .gpu-snap-b && OUT=$OUT bash scripts/gpu_s15b.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s15b
gpu_bin
say "test_mk under modes 8, 16, 24"
for m in 8 16 24; do
    gpu_test test_mk_m$m 60 VLLM_MK_MODE=$m VLLM_TEST_ONLY=test_mk ./test_cuda_mk
done
say "chains: mode x stage"
for cfg in 0:16384 1:16384 2:16384 4:16384 5:16384 8:16384 16:16384 24:16384 28:16384 0:8192 0:32768 1:32768 \
    2:32768 24:32768 24:65536 1:65536 2:65536; do
    m=${cfg%:*} sb=${cfg#*:}
    gpu_test speed_${m}_$sb 60 VLLM_MK_MODE=$m VLLM_MK_SB=$sb VLLM_MK_SPEED=chain VLLM_TEST_ONLY=test_mk_speed ./test_cuda_mk >/dev/null
    grep -E "speed: mk|Failure|mk plan" $L/speed_${m}_$sb.log | sed 's/ layers without attention//; s/the engine.s kernels, graphed/engine/' | cut -c1-220
done
say "whole layers, modes 0 / 24"
for m in 0 24; do
    gpu_test full_$m 60 VLLM_MK_MODE=$m VLLM_TEST_ONLY=test_mk_speed ./test_cuda_mk >/dev/null
    grep -E "speed: mk.*whole|Failure" $L/full_$m.log | cut -c1-220
done
say done
