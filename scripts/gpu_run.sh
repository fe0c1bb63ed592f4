#!/usr/bin/env bash
# gpu_run.sh — the one script a device call runs on the H200 machine: build
# vllm.c with the CUDA backend and run the CUDA tests, logs into $OUT.
#
#   bash scripts/gpu_run.sh            # from the repository root
#
# The machine has no package registry: our Debian libraries (jansson, pcre2,
# utf8proc, cmocka) travel as .deb files in .deps/ (see
# ../shared/design/GPU-MACHINE.md) and are unpacked to /opt/deps here.
# Runs the CUDA op tests, then the engine/model gates with
# VLLM_TEST_DEVICE=cuda (DEV_TARGETS), then compute-sanitizer memcheck.
# Environment: OUT (log folder, default ./gpu-out), VLLM_GPU_SANITIZE=0 to
# skip memcheck, VLLM_GPU_MEMCHECK_TESTS (default test_cuda_ops) and
# VLLM_GPU_MEMCHECK_SECONDS (per test, default 240).
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
LOG="$OUT/gpu_run.log"
exec > >(tee -a "$LOG") 2>&1
t0=$(date +%s)
say() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }

say "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv || true
nvcc --version | tail -1 || true

say "unpack .deps"
source scripts/gpu_deps.sh || exit 1

say "configure"
BUILD=build-gpu
cmake -S . -B $BUILD -DVLLM_CUDA=ON -DCMAKE_BUILD_TYPE=Release >"$OUT/configure.log" 2>&1 ||
    { tail -40 "$OUT/configure.log"; exit 1; }

say "build"
TARGETS=(test_cuda_fused test_cuda_ops test_cuda_model test_cuda_comm test_cuda_sample test_cuda_flash test_cuda_bf16_attn test_cuda_combine
    test_cuda_gemm test_cuda_paged_fd test_cuda_gemv_xr test_cuda_mmq test_cuda_attn_mixed test_cuda_rope_pf test_cuda_mk)
# CPU-backend tests that also run on the device with VLLM_TEST_DEVICE=cuda
DEV_TARGETS=(test_model_mirror test_engine test_engine_async test_async_engine test_engine_devsample
    test_engine_async_64 test_engine_mirror test_engine_warmup)
cmake --build $BUILD -j"$(nproc)" --target "${TARGETS[@]}" "${DEV_TARGETS[@]}" >"$OUT/build.log" 2>&1 ||
    { grep -E "error|Error" "$OUT/build.log" | head -40; exit 1; }

rc=0
for t in "${TARGETS[@]}"; do
    say "run $t"
    (cd $BUILD && timeout 300 ./"$t") >"$OUT/$t.log" 2>&1
    r=$?
    tail -60 "$OUT/$t.log"
    echo "$t exit $r"
    [ $r -eq 0 ] || rc=1
done
for t in "${DEV_TARGETS[@]}"; do
    say "run $t (VLLM_TEST_DEVICE=cuda)"
    (cd $BUILD && VLLM_TEST_DEVICE=cuda timeout 120 ./"$t") >"$OUT/$t.log" 2>&1
    r=$?
    tail -30 "$OUT/$t.log"
    echo "$t exit $r"
    [ $r -eq 0 ] || rc=1
done

if [ "${VLLM_GPU_SANITIZE:-1}" != 0 ] && command -v compute-sanitizer >/dev/null; then
    for t in ${VLLM_GPU_MEMCHECK_TESTS:-test_cuda_ops}; do
        say "compute-sanitizer memcheck $t"
        (cd $BUILD && VLLM_CUDA_SPEED=0 timeout "${VLLM_GPU_MEMCHECK_SECONDS:-240}" compute-sanitizer --tool memcheck \
            --error-exitcode 9 ./$t) >"$OUT/memcheck_$t.log" 2>&1
        r=$?
        grep -E "ERROR SUMMARY|PASSED|FAILED|Invalid|error" "$OUT/memcheck_$t.log" | head -20
        echo "memcheck $t exit $r$([ $r = 124 ] && echo ' (time limit: not finished)')"
        [ $r -eq 0 ] || [ $r -eq 124 ] || rc=1
    done
fi

say "done (rc=$rc)"
exit $rc
