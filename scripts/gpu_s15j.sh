#!/usr/bin/env bash
# gpu_s15j.sh — session 15, call 10 (nvidia-h200, ~1.5 min): the merged
# tree's lab and rope tests: test_cuda_mk under the default mode (its
# attention phase is now a non-inlined function) and under 64 / 66, with
# memcheck of 0 and 64 (call 5's memcheck of 64 hung with the prefetcher
# bug); test_cuda_rope_pf (the shared-angles default).
#   bash scripts/gpu_snap.sh j test_cuda_mk test_cuda_rope_pf
#   run carry [".gpu-snap-j"] "cd .gpu-snap-j && OUT=$OUT bash scripts/gpu_s15j.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s15j
gpu_bin
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for m in 0 64 66; do
    gpu_test test_mk_$m 60 VLLM_MK_MODE=$m VLLM_CUDA_SPEED=0 ./test_cuda_mk
    grep -E "mk attention|mk3|LINE|ERROR|Failure" $L/test_mk_$m.log | cut -c1-200 | head -4
done
for m in 0 64; do
    (cd bin && VLLM_MK_MODE=$m VLLM_CUDA_SPEED=0 timeout 100 $SAN --tool memcheck ./test_cuda_mk) >$L/memcheck_$m.log 2>&1
    echo "memcheck mode $m exit $? $(grep -E 'ERROR SUMMARY' $L/memcheck_$m.log | tail -1)"
done
gpu_test test_rope_pf 60 ./test_cuda_rope_pf
grep -E "qk_rope_store|differs|LINE" $L/test_rope_pf.log | cut -c1-200 | head -3
say done
