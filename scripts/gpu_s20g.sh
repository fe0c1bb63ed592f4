#!/usr/bin/env bash
# gpu_s20g.sh — session 20, call 7 (nvidia-h200, ~2 min): the CUDA tests
# that scripts/gpu_run.sh did not list (now added there): test_cuda_mmq,
# test_cuda_attn_mixed, test_cuda_rope_pf, test_cuda_mk; memcheck of
# test_cuda_mmq.
#   bash scripts/gpu_snap.sh s20g test_cuda_mmq test_cuda_attn_mixed test_cuda_rope_pf test_cuda_mk
#   run carry [".gpu-snap-s20g"] "cd .gpu-snap-s20g && OUT=$OUT bash scripts/gpu_s20g.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s20g
gpu_bin
for t in mmq attn_mixed rope_pf mk; do
    say "test_cuda_$t"
    gpu_test $t 200 ./test_cuda_$t
    grep -E "ERROR|error:" $L/$t.log | head -5
done
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
(cd bin && VLLM_CUDA_SPEED=0 timeout 150 $SAN --tool memcheck ./test_cuda_mmq) >$L/mc.log 2>&1
echo "memcheck mmq exit $? $(grep -E 'ERROR SUMMARY|PASSED|FAILED' $L/mc.log | tr '\n' ' ')"
say done
