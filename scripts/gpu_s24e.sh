#!/usr/bin/env bash
# gpu_s24e.sh — session 24, call 5 (nvidia-h200, ~5 min): issue 6's
# "compute-sanitizer memcheck clean over the test suite" again on this
# main (last run over the whole suite in session 10; since then the
# warm-up's row steps and whole-budget forward, the decode graphs at start,
# the last layer on the logit rows with `any` by default, the fused QKV /
# GLU / fa3 kernels' later changes): gpu_memcheck_all.sh's lists on one
# GPU, prebuilt (test_cuda_comm needs two GPUs: not here), plus
# test_model_last_rows; the engine tests on the tiny fixtures
# (VLLM_TEST_DEVICE=cuda).
#   bash scripts/gpu_snap.sh s24e test_cuda_ops test_cuda_fused test_cuda_model test_cuda_sample \
#       test_cuda_flash test_cuda_bf16_attn test_cuda_attn_mixed test_cuda_combine test_cuda_gemm \
#       test_cuda_paged_fd test_model_mirror test_engine test_engine_async test_engine_devsample \
#       test_engine_async_64 test_engine_mirror test_engine_warmup test_model_attn_split test_model_last_rows
#   (bin.txz repacked with a 192 MiB xz dictionary: the binaries share the library)
#   run carry [".gpu-snap-s24e"] "cd .gpu-snap-s24e && OUT=$OUT bash scripts/gpu_s24e.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s24e
gpu_bin
gpu_fixtures
OPS=(test_cuda_ops test_cuda_fused test_cuda_model test_cuda_sample test_cuda_flash test_cuda_bf16_attn
    test_cuda_attn_mixed test_cuda_combine test_cuda_gemm test_cuda_paged_fd)
DEV=(test_model_mirror test_engine test_engine_async test_engine_devsample test_engine_async_64
    test_engine_mirror test_engine_warmup test_model_attn_split test_model_last_rows)
one() { # test [VLLM_TEST_DEVICE]
    local t=$1 dev=${2:-}
    (cd bin && env VLLM_CUDA_SPEED=0 ${dev:+VLLM_TEST_DEVICE=$dev} timeout -k 5 "${VLLM_MC_T:-200}" \
        compute-sanitizer --tool memcheck --target-processes application-only --error-exitcode 9 ./$t) \
        >$L/mc_$t.log 2>&1
    local rc=$?
    echo "memcheck $t exit $rc$([ $rc = 124 ] && echo ' (time limit)') $(grep -h 'ERROR SUMMARY' $L/mc_$t.log | tail -1)"
}
say "memcheck, two at a time on the one GPU"
( for ((i = 0; i < ${#OPS[@]}; i += 2)); do one ${OPS[$i]}; done
  for ((i = 0; i < ${#DEV[@]}; i += 2)); do one ${DEV[$i]} cuda; done ) >$L/q0.txt &
Q0=$!
( for ((i = 1; i < ${#OPS[@]}; i += 2)); do one ${OPS[$i]}; done
  for ((i = 1; i < ${#DEV[@]}; i += 2)); do one ${DEV[$i]} cuda; done ) >$L/q1.txt &
Q1=$!
wait $Q0 $Q1
cat $L/q0.txt $L/q1.txt
grep -h -B2 -A12 "Invalid\|ERROR SUMMARY: [1-9]" $L/mc_*.log | head -40
say done
