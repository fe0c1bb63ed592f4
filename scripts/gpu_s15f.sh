#!/usr/bin/env bash
# gpu_s15f.sh — session 15, call 6 (nvidia-h200, ~1-2 min): call 5 hung in
# k_mk_chain3's first test (no output in 90 s). Its spin loops now trap
# after ~2 s with a printf of the state. Probes first (25 s each: 65 no
# prefetch, 69 no prefetch / no barrier wait, 64), then the chains for the
# modes that passed.
#   bash scripts/gpu_snap.sh f test_cuda_mk
#   run carry [".gpu-snap-f"] "cd .gpu-snap-f && OUT=$OUT bash scripts/gpu_s15f.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s15f
gpu_bin
OKM=""
for m in 65 69 64; do
    say "probe mode $m"
    gpu_test probe_$m 25 VLLM_MK_MODE=$m VLLM_TEST_ONLY=test_mk ./test_cuda_mk
    grep -E "^mk |mk3|LINE|ERROR|Failure|mk plan|mk run" $L/probe_$m.log | cut -c1-200 | head -12
    grep -q "PASSED  \] 1" $L/probe_$m.log && OKM="$OKM $m"
done
echo "passed:$OKM"
for m in $OKM; do
    case $m in 64) cfgs="16384:16 16384:8 16384:32 16384:64 8192:32";; *) cfgs="16384:16";; esac
    for c in $cfgs; do
        sb=${c%:*} w=${c#*:}
        gpu_test speed_${m}_${sb}_$w 40 VLLM_MK_MODE=$m VLLM_MK_SB=$sb VLLM_MK_PF=$w VLLM_MK_SPEED=chain VLLM_TEST_ONLY=test_mk_speed ./test_cuda_mk >/dev/null
        grep -E "speed: mk|mk3|ERROR|mk plan|mk run" $L/speed_${m}_${sb}_$w.log | sed "s/ layers without attention//; s/the engine.s kernels, graphed/engine/; s/stage $sb/stage $sb window $w/" | cut -c1-230
    done
done
case "$OKM" in *64*)
    gpu_test attn_64 30 VLLM_MK_MODE=64 VLLM_TEST_ONLY=test_mk_attn ./test_cuda_mk
    grep -E "^mk |mk3|LINE|ERROR" $L/attn_64.log | cut -c1-200 | head -5
    gpu_test full_64 40 VLLM_MK_MODE=64 VLLM_MK_PF=32 VLLM_TEST_ONLY=test_mk_speed ./test_cuda_mk >/dev/null
    grep -E "speed: mk.*whole|mk3|ERROR|mk run" $L/full_64.log | cut -c1-220;;
esac
say done
