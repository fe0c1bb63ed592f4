#!/usr/bin/env bash
# gpu_s15h.sh — session 15, call 8 (nvidia-h200, ~1 min): k_mk_chain3's
# grid barrier polled with relaxed loads, short sleeps and one acquire
# fence after (MODE bit 2: 66 with prefetch, 67 without) vs acquire loads
# in a tight loop (64, 65; call 7: preloading a phase's first weights
# before the barrier made the no-prefetch 8B chain slower, 0.44 vs 0.78,
# and no barrier wait at all did not help the 0.6B chain: suspect the
# acquire polls). Probes, chains, whole layers.
#   bash scripts/gpu_snap.sh h test_cuda_mk
#   run carry [".gpu-snap-h"] "cd .gpu-snap-h && OUT=$OUT bash scripts/gpu_s15h.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s15h
gpu_bin
OKM=""
for m in 66 67; do
    say "probe mode $m"
    gpu_test probe_$m 20 VLLM_MK_MODE=$m VLLM_TEST_ONLY=test_mk ./test_cuda_mk
    grep -E "mk3|LINE|ERROR|Failure|mk plan|mk run" $L/probe_$m.log | cut -c1-200 | head -6
    grep -q "PASSED  \] 1" $L/probe_$m.log && OKM="$OKM $m"
done
echo "passed:$OKM"
for m in $OKM 64 65; do
    for w in 8 16; do
        gpu_test speed_${m}_$w 40 VLLM_MK_MODE=$m VLLM_MK_PF=$w VLLM_MK_SPEED=chain VLLM_TEST_ONLY=test_mk_speed ./test_cuda_mk >/dev/null
        grep -E "speed: mk|mk3|ERROR|mk plan|mk run" $L/speed_${m}_$w.log | sed "s/ layers without attention//; s/the engine.s kernels, graphed/engine/; s/stage 16384/window $w/" | cut -c1-230
        case $m in 65|67) break;; esac
    done
done
for m in $OKM; do
    gpu_test full_$m 40 VLLM_MK_MODE=$m VLLM_MK_PF=8 VLLM_TEST_ONLY=test_mk_speed ./test_cuda_mk >/dev/null
    grep -E "speed: mk.*whole|mk3|ERROR|mk run" $L/full_$m.log | cut -c1-220
done
say done
