#!/usr/bin/env bash
# gpu_s9f.sh — session 9, last device call (nvidia-h200-x2, ~4 min): the
# final defaults (tensor-core decode kernel from 32 rows x kv heads) and the
# rest of the memcheck.
#   GPU 0: test_cuda_ops, test_cuda_bf16_attn, test_cuda_attn_mixed (no
#     sweeps); 8B `vllm bench` 1024 / 128 at concurrency 16, 64, 256.
#   GPU 1 meanwhile: test_async_engine on CUDA (it ran on the CPU before),
#     plain and under memcheck.
#   Both GPUs: test_cuda_comm under memcheck (device blocks now rounded up
#     to 256 bytes: NCCL's LL protocol reads user buffers in 16-byte granules).
set -u -o pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-$PWD/gpu-out}; mkdir -p "$FINAL"
L=/tmp/s9f; mkdir -p $L
t0=$(date +%s); say() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
trap 'tar czf "$FINAL/s9f_logs.tgz" -C $L . 2>/dev/null' EXIT
source scripts/gpu_deps.sh >/dev/null || exit 1
PY=${PYTHON:-python3}
M8=/tmp/rand-llama-8b
( [ -f $M8/config.json ] || $PY scripts/gpu_hf.py make --shape llama-8b --out $M8 >$L/make.log 2>&1 ) &
MK=$!
B=build-gpu
say build
cmake -S . -B $B -DVLLM_CUDA=ON -DCMAKE_BUILD_TYPE=Release >$L/configure.log 2>&1 || { tail -20 $L/configure.log; exit 1; }
cmake --build $B -j"$(nproc)" --target vllm test_cuda_ops test_cuda_bf16_attn test_cuda_attn_mixed test_cuda_comm \
    test_async_engine >$L/build.log 2>&1 || { grep -E "error" $L/build.log | head -20; exit 1; }
MC="compute-sanitizer --tool memcheck --target-processes application-only --error-exitcode 9"
( cd $B
  CUDA_VISIBLE_DEVICES=1 VLLM_TEST_DEVICE=cuda timeout 100 ./test_async_engine >$L/async.log 2>&1
  echo "test_async_engine (cuda) exit $? $(grep -E 'PASSED|FAILED' $L/async.log | head -1)"
  CUDA_VISIBLE_DEVICES=1 VLLM_TEST_DEVICE=cuda timeout 200 $MC ./test_async_engine >$L/mc_async.log 2>&1
  echo "memcheck test_async_engine (cuda) exit $? $(grep 'ERROR SUMMARY' $L/mc_async.log | tail -1)"
) >$L/gpu1.txt 2>&1 &
G1=$!
say "GPU 0 tests"
for t in test_cuda_ops test_cuda_bf16_attn test_cuda_attn_mixed; do
    (cd $B && CUDA_VISIBLE_DEVICES=0 VLLM_CUDA_SPEED=0 timeout 120 ./$t) >$L/$t.log 2>&1
    echo "$t exit $? $(grep -E 'PASSED|FAILED' $L/$t.log | head -2 | tr '\n' ' ')"
done
wait $MK
say bench
for c in 16 64 256; do
    np=$(( c < 256 ? 2 * c : c ))
    CUDA_VISIBLE_DEVICES=0 ./$B/vllm bench --device cuda --model $M8 --num-prompts $np --input-len 1024 --output-len 128 \
        --concurrency $c --max-num-seqs $c --max-num-batched-tokens 8192 --gpu-memory-utilization 0.9 >$L/bench_c$c.log 2>&1
    echo "8B conc $c: $(grep -E 'Output token throughput|Mean TTFT|Mean TPOT' $L/bench_c$c.log | sed 's/  */ /g' | tr '\n' ';')"
done
wait $G1; cat $L/gpu1.txt
say "memcheck test_cuda_comm"
(cd $B && timeout 120 $MC ./test_cuda_comm) >$L/mc_comm.log 2>&1
echo "memcheck test_cuda_comm exit $? $(grep 'ERROR SUMMARY' $L/mc_comm.log | tail -1) $(grep -E 'PASSED|FAILED' $L/mc_comm.log | head -2 | tr '\n' ' ')"
grep -E "^========= (Invalid|Program hit)" $L/mc_comm.log | sed 's/ at .*//; s/0x[0-9a-f]*//g' | sort | uniq -c | sort -rn | head -5
say done
