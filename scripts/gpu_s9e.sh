#!/usr/bin/env bash
# gpu_s9e.sh — session 9, device call 6 (nvidia-h200-x2, ~6 min): the
# tensor-core decode kernel with split-K for small batches.
#   GPU 0: test_cuda_attn_mixed (the kernel vs the CPU op with splits as
#     chosen / none / 3; mixed steps; the speed table at 1..256 rows, warm-up
#     drained before the clock now); then 8B `vllm run` batch-1 decode and
#     `vllm bench` 1024 / 128 at concurrency 16 with the kernel's minimum
#     (VLLM_CUDA_FLASH_DEC_MIN) at 256 (main's rule) and at 8 row x kv-head
#     pairs, and concurrency 64 at the default.
#   GPU 1 meanwhile: memcheck of test_cuda_attn_mixed and of
#     test_async_engine (--target-processes application-only: its system()
#     children are not CUDA programs).
#   Both GPUs at the end: test_cuda_comm plain, then under memcheck with
#     NCCL_PROTO=Simple, NCCL_P2P_DISABLE=1, NCCL_CUMEM_ENABLE=0.
set -u -o pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-$PWD/gpu-out}; mkdir -p "$FINAL"
L=/tmp/s9e; mkdir -p $L
t0=$(date +%s); say() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
trap 'tar czf "$FINAL/s9e_logs.tgz" -C $L . 2>/dev/null' EXIT
source scripts/gpu_deps.sh >/dev/null || exit 1
PY=${PYTHON:-python3}
M8=/tmp/rand-llama-8b
( [ -f $M8/config.json ] || $PY scripts/gpu_hf.py make --shape llama-8b --out $M8 >$L/make.log 2>&1 ) &
MK=$!
B=build-gpu
say build
cmake -S . -B $B -DVLLM_CUDA=ON -DCMAKE_BUILD_TYPE=Release >$L/configure.log 2>&1 || { tail -20 $L/configure.log; exit 1; }
cmake --build $B -j"$(nproc)" --target vllm test_cuda_attn_mixed test_async_engine test_cuda_comm >$L/build.log 2>&1 ||
    { grep -E "error" $L/build.log | head -20; exit 1; }
MC="compute-sanitizer --tool memcheck --target-processes application-only --error-exitcode 9"
say "GPU 1: memcheck; GPU 0: tests and speed"
( cd $B
  CUDA_VISIBLE_DEVICES=1 VLLM_CUDA_SPEED=0 timeout 200 $MC ./test_cuda_attn_mixed >$L/mc_mixed.log 2>&1
  echo "memcheck test_cuda_attn_mixed exit $? $(grep 'ERROR SUMMARY' $L/mc_mixed.log | tail -1)"
  CUDA_VISIBLE_DEVICES=1 VLLM_TEST_DEVICE=cuda timeout 200 $MC ./test_async_engine >$L/mc_async.log 2>&1
  echo "memcheck test_async_engine exit $? $(grep 'ERROR SUMMARY' $L/mc_async.log | tail -1) $(grep -E 'PASSED|FAILED' $L/mc_async.log | head -1)"
) >$L/gpu1.txt 2>&1 &
G1=$!
(cd $B && CUDA_VISIBLE_DEVICES=0 ./test_cuda_attn_mixed) >$L/mixed.log 2>&1
echo "test_cuda_attn_mixed exit $?"; grep -E "speed: |FAIL|error|did not" $L/mixed.log | head -30
wait $MK
V=./$B/vllm
$PY -c "import random; random.seed(0); print(','.join(str(random.randrange(1282, 100000)) for _ in range(512)))" >$L/p512.ids
for mn in 256 1 256 1; do
    CUDA_VISIBLE_DEVICES=0 VLLM_CUDA_FLASH_DEC_MIN=$mn $V run --device cuda --model $M8 --prompt-ids "$(cat $L/p512.ids)" \
        --max-tokens 256 --ignore-eos --temperature 0 --print-ids >$L/run_$mn.ids 2>$L/run_$mn.err
    echo "8B batch-1 FLASH_DEC_MIN=$mn: $(grep -oE 'decode: [^|]*' $L/run_$mn.err)"
done
cmp -s $L/run_256.ids $L/run_1.ids && echo "greedy ids equal" || echo "greedy ids differ (first: $(cmp $L/run_256.ids $L/run_1.ids | head -1))"
for spec in "16 256" "16 8" "16 256" "16 8" "64 256"; do
    set -- $spec; c=$1 mn=$2
    CUDA_VISIBLE_DEVICES=0 VLLM_CUDA_FLASH_DEC_MIN=$mn $V bench --device cuda --model $M8 --num-prompts $((2 * c)) --input-len 1024 \
        --output-len 128 --concurrency $c --max-num-seqs $c --max-num-batched-tokens 8192 --gpu-memory-utilization 0.9 \
        >$L/bench_c${c}_$mn.log 2>&1
    echo "8B conc $c FLASH_DEC_MIN=$mn: $(grep -E 'Output token throughput|Mean TTFT|Mean TPOT' $L/bench_c${c}_$mn.log | sed 's/  */ /g' | tr '\n' ';')"
done
wait $G1; cat $L/gpu1.txt
say "test_cuda_comm (both GPUs)"
(cd $B && timeout 120 ./test_cuda_comm) >$L/comm.log 2>&1; echo "test_cuda_comm exit $? $(grep -E 'PASSED|FAILED' $L/comm.log | head -1)"
for v in NCCL_PROTO=Simple NCCL_P2P_DISABLE=1 NCCL_CUMEM_ENABLE=0; do
    (cd $B && env $v timeout 150 compute-sanitizer --tool memcheck --target-processes application-only --error-exitcode 9 \
        --report-api-errors no ./test_cuda_comm) >$L/mc_comm_$v.log 2>&1
    echo "memcheck test_cuda_comm $v exit $? $(grep 'ERROR SUMMARY' $L/mc_comm_$v.log | tail -1) $(grep -E 'PASSED|FAILED' $L/mc_comm_$v.log | head -2 | tr '\n' ' ')"
done
say done
