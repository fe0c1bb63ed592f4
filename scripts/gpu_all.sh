#!/usr/bin/env bash
# gpu_all.sh — one device call that validates and measures a whole tree on
# an H200 machine (2 GPUs for the TP part; with one GPU the TP rows skip):
#   1. scripts/gpu_run.sh: build, every CUDA op test, the engine gates with
#      VLLM_TEST_DEVICE=cuda (no memcheck here: step 4);
#   2. scripts/gpu_tp.sh: NCCL tests, tp_probe, greedy TP=1 vs TP=2, the
#      8,000-token prefill and decode scaling (export its VLLM_TP_*
#      variables, e.g. VLLM_TP_SIZES, VLLM_TP_AB, VLLM_TP_GREEDY_ENV);
#   3. scripts/gpu_bench.sh: issue 6's scorecard (both shapes, HF side by
#      side, oracle check, async == sync);
#   4. compute-sanitizer memcheck of GPU_ALL_MEMCHECK (default
#      test_cuda_paged_fd), each with VLLM_TEST_FILTER from
#      GPU_ALL_MEMCHECK_FILTER if set.
# GPU_ALL_FALLBACK="test:NAME=VALUE[,NAME=VALUE] ...": when step 1 reports
# that test's exit as non-zero, steps 2-4 run with that environment (the
# switch that restores the previous kernel), so one failing new kernel does
# not spoil the measurements of the rest.
# Each step has its own time limit (GPU_ALL_T_RUN/_TP/_BENCH/_MC seconds),
# so one hang costs that step only. The key lines go to stdout; every log
# comes back as one archive, $OUT/gpu_all_logs.tgz (the device tool returns
# at most 8 files).
set -u -o pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-$PWD/gpu-out}
mkdir -p "$FINAL"
L=$(mktemp -d /tmp/gpu_all.XXXXXX)
t0=$(date +%s)
say() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
pack() { tar czf "$FINAL/gpu_all_logs.tgz" -C "$L" . 2>/dev/null; }
trap pack EXIT

say "1. gpu_run.sh (build, CUDA op tests, engine gates)"
OUT=$L/run VLLM_GPU_SANITIZE=0 timeout "${GPU_ALL_T_RUN:-240}" bash scripts/gpu_run.sh >"$L/run.txt" 2>&1
echo "gpu_run rc=$?"
grep -E "^[a-z_0-9]+ exit [0-9]+" "$L/run.txt" | tr '\n' ';'
echo
grep -E "^== \[|error:|FAILED|Assertion" "$L/run.txt" | grep -v "^== \[" | head -20

for fb in ${GPU_ALL_FALLBACK:-}; do
    t=${fb%%:*} e=${fb#*:}
    if ! grep -qE "^$t exit 0$" "$L/run.txt"; then
        echo "FALLBACK: $t did not pass: steps 2-4 run with $e"
        for kv in ${e//,/ }; do export "$kv"; done
    fi
done
pack # after every step: a call killed at its limit still returns the earlier logs
say "2. gpu_tp.sh"
OUT=$L/tp timeout "${GPU_ALL_T_TP:-240}" bash scripts/gpu_tp.sh >"$L/tp.txt" 2>&1
echo "gpu_tp rc=$?"
grep -E "GPU\(s\)|test_cuda_comm exit|prefill 8000|TP=[0-9g]+|greedy|tensor parallel|check|all-reduce|reduce-scatter|all-gather|all-to-all|all_|reduce_scatter|symmetric|gemm|GEMM" \
    "$L/tp.txt" | grep -v "^== \[" | cut -c1-400 | head -60

pack
say "3. gpu_bench.sh"
OUT=$L/bench timeout "${GPU_ALL_T_BENCH:-300}" bash scripts/gpu_bench.sh >"$L/bench.txt" 2>&1
echo "gpu_bench rc=$?"
grep -v '^{' "$L/bench.txt" | cut -c1-300 | tail -70

pack
say "4. memcheck"
source scripts/gpu_deps.sh || exit 1 # the test binaries need the unpacked libraries (cmocka)
for t in ${GPU_ALL_MEMCHECK:-test_cuda_paged_fd}; do
    (cd build-gpu && env VLLM_CUDA_SPEED=0 ${GPU_ALL_MEMCHECK_FILTER:+VLLM_TEST_FILTER=$GPU_ALL_MEMCHECK_FILTER} \
        timeout "${GPU_ALL_T_MC:-90}" compute-sanitizer --tool memcheck --error-exitcode 9 ./"$t") \
        >"$L/memcheck_$t.log" 2>&1
    r=$?
    echo "memcheck $t exit $r$([ $r = 124 ] && echo ' (time limit: not finished)'): $(grep -E 'ERROR SUMMARY' "$L/memcheck_$t.log" | tail -1)"
done
say "done"
