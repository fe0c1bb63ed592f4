#!/usr/bin/env bash
# gpu_s9d.sh — session 9, device call 5 (nvidia-h200-x2, ~10 min): where the
# decode attention's time goes outside the kernel (Nsight Compute gave the
# tensor-core kernel 293 us at 256 rows x 1024 keys, eager calls 550 us),
# then issue 6's "memcheck clean over the test suite".
#   1. build (the memcheck set, test_cuda_attn_mixed);
#   2. GPU 0: test_cuda_attn_mixed with VLLM_TEST_DEC_ROWS=256 / 64 (eager
#      time, host enqueue time, a graph of 20 calls, blocks in order), and
#      at 256 again with VLLM_CUDA_PDL=0;
#   3. scripts/gpu_memcheck_all.sh (both GPUs).
set -u -o pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-$PWD/gpu-out}; mkdir -p "$FINAL"
L=/tmp/s9d; mkdir -p $L
t0=$(date +%s); say() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
source scripts/gpu_deps.sh >/dev/null || exit 1
B=build-gpu
say build
cmake -S . -B $B -DVLLM_CUDA=ON -DCMAKE_BUILD_TYPE=Release >$L/configure.log 2>&1 || { tail -20 $L/configure.log; exit 1; }
cmake --build $B -j"$(nproc)" --target test_cuda_attn_mixed >$L/build.log 2>&1 || { grep -E "error" $L/build.log | head; exit 1; }
say "decode forms (GPU 0)"
for spec in "256 1" "64 1" "256 0"; do
    set -- $spec
    (cd $B && CUDA_VISIBLE_DEVICES=0 VLLM_CUDA_PDL=$2 VLLM_TEST_DEC_ROWS=$1 timeout 90 ./test_cuda_attn_mixed) >$L/forms_$1_$2.log 2>&1
    echo "rows $1 PDL $2 exit $?"; grep -E "speed: dec" $L/forms_$1_$2.log
done
tar czf "$FINAL/s9d_forms.tgz" -C $L . 2>/dev/null
say memcheck
OUT=$FINAL bash scripts/gpu_memcheck_all.sh
say done
