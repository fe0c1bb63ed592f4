#!/usr/bin/env bash
# gpu_s15i.sh — session 15, call 9 (nvidia-h200, ~1 min): the latency
# floor of a phase. 28 tiny layers (~1.4 MB each: QKV 1024 x 256, Wo 256 x
# 256, gate|up 1024 x 256, down 256 x 512), so a chain's time is its 112
# phases' latency: the lab's kernels (0 / 24 ring + barriers, 32 warp-owned
# stages, 64 / 65 direct loads with / without the L2 prefetcher, 68 with
# no barrier wait) and the engine's kernels graphed, us a phase / GEMV.
#   bash scripts/gpu_snap.sh i test_cuda_mk
#   run carry [".gpu-snap-i"] "cd .gpu-snap-i && OUT=$OUT bash scripts/gpu_s15i.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s15i
gpu_bin
for m in 0 24 28 32 36 64 65 68; do
    gpu_test lat_$m 30 VLLM_MK_MODE=$m VLLM_MK_SPEED=latency VLLM_TEST_ONLY=test_mk_speed ./test_cuda_mk >/dev/null
    grep -E "speed: mk|mk3|ERROR|mk plan|mk run" $L/lat_$m.log | sed 's/ layers without attention//; s/the engine.s kernels, graphed/engine/' | cut -c1-260
done
say done
