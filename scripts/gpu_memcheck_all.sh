#!/usr/bin/env bash
# gpu_memcheck_all.sh — issue 6's "compute-sanitizer memcheck clean over the
# test suite" in one device call (nvidia-h200-x2, ~3 min with the build; session 9: 99 s): builds every
# CUDA test and the engine gates that run on the device, then runs each
# under `compute-sanitizer --tool memcheck --error-exitcode 9` with the
# speed sweeps off (VLLM_CUDA_SPEED=0), the tests split over the two GPUs
# (one queue per GPU; test_cuda_comm, which needs both, runs alone at the
# end, its symmetric-memory test skipped: NCCL's symmetric kernels die under
# the sanitizer alone). Each test has its own time limit (VLLM_MC_T, default 200 s): a
# test cut off by it is reported as "time limit", not as clean.
#   OUT=$OUT bash scripts/gpu_memcheck_all.sh
# One line per test on stdout ("memcheck <test> exit <rc> <ERROR SUMMARY>"),
# the logs in $OUT/memcheck_logs.tgz.
set -u -o pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-$PWD/gpu-out}; mkdir -p "$FINAL"
L=/tmp/memcheck_all; mkdir -p $L
t0=$(date +%s); say() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
pack() { tar czf "$FINAL/memcheck_logs.tgz" -C "$L" . 2>/dev/null; }
trap pack EXIT
source scripts/gpu_deps.sh >/dev/null || exit 1
B=build-gpu
OPS=(test_cuda_ops test_cuda_fused test_cuda_model test_cuda_sample test_cuda_flash test_cuda_bf16_attn test_cuda_attn_mixed
    test_cuda_combine test_cuda_gemm test_cuda_paged_fd)
DEV=(test_model_mirror test_engine test_engine_async test_engine_devsample test_engine_async_64
    test_engine_mirror test_engine_warmup test_model_attn_split)
say "build"
cmake -S . -B $B -DVLLM_CUDA=ON -DCMAKE_BUILD_TYPE=Release >$L/configure.log 2>&1 || { tail -20 $L/configure.log; exit 1; }
cmake --build $B -j"$(nproc)" --target "${OPS[@]}" "${DEV[@]}" test_cuda_comm >$L/build.log 2>&1 ||
    { grep -E "error" $L/build.log | head -20; exit 1; }
one() { # gpu test [VLLM_TEST_DEVICE]
    local g=$1 t=$2 dev=${3:-}
    (cd $B && env CUDA_VISIBLE_DEVICES=$g VLLM_CUDA_SPEED=0 ${dev:+VLLM_TEST_DEVICE=$dev} timeout -k 5 "${VLLM_MC_T:-200}" \
        compute-sanitizer --tool memcheck --target-processes application-only --error-exitcode 9 ${MC_ARGS:-} ./$t) >$L/mc_$t.log 2>&1
    local rc=$?
    echo "memcheck $t exit $rc$([ $rc = 124 ] && echo ' (time limit)') $(grep -h 'ERROR SUMMARY' $L/mc_$t.log | tail -1)"
}
say "memcheck, two queues"
ALL=("${OPS[@]}" "${DEV[@]}")
( for ((i = 0; i < ${#ALL[@]}; i += 2)); do t=${ALL[$i]}; case " ${DEV[*]} " in *" $t "*) one 0 $t cuda ;; *) one 0 $t ;; esac; done ) >$L/q0.txt &
Q0=$!
( for ((i = 1; i < ${#ALL[@]}; i += 2)); do t=${ALL[$i]}; case " ${DEV[*]} " in *" $t "*) one 1 $t cuda ;; *) one 1 $t ;; esac; done ) >$L/q1.txt &
Q1=$!
wait $Q0 $Q1
cat $L/q0.txt $L/q1.txt
say "memcheck test_cuda_comm (both GPUs)"
export VLLM_TEST_SKIP_SYM=1 # NCCL symmetric-memory kernels under the sanitizer: see test_cuda_comm.c
# API errors off for this one: NCCL's init raises and handles its own
# (peer access already enabled, no kernel image for probed variants) and the
# test asks for a device that does not exist on purpose; access errors count
MC_ARGS="--report-api-errors no"
one 0,1 test_cuda_comm
say done
