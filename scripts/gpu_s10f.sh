#!/usr/bin/env bash
# gpu_s10f.sh — session 10, last device call (nvidia-h200, ~4 min): the LM
# head of a batched decode on bf16 rows (model.c head_x: the f32-row GEMV
# took the head at 2-8 rows, 3-4x its one-row time).
#   1. build; test_cuda_model, test_engine, test_engine_async_64 on the 8B
#      and 0.6B checkpoints;
#   2. `vllm bench` 1024-in / 256-out, one wave of c requests (the command
#      of gpu_s10e.sh, skinny on): 8B and 0.6B at c = 1 2 4 8 16.
#   OUT=$OUT bash scripts/gpu_s10f.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-$PWD/gpu-out}; mkdir -p "$FINAL"
L=/tmp/s10f; mkdir -p $L
t0=$(date +%s); say() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
trap 'tar czf "$FINAL/s10f_logs.tgz" -C $L . 2>/dev/null' EXIT
source scripts/gpu_deps.sh >/dev/null || exit 1
PY=${PYTHON:-python3}
( for s in qwen3-0.6b llama-8b; do [ -f /tmp/rand-$s/config.json ] ||
    $PY scripts/gpu_hf.py make --shape $s --out /tmp/rand-$s >$L/make_$s.log 2>&1; done ) &
MK=$!
B=build-gpu
say build
cmake -S . -B $B -DVLLM_CUDA=ON -DCMAKE_BUILD_TYPE=Release >$L/configure.log 2>&1 || { tail -20 $L/configure.log; exit 1; }
cmake --build $B -j"$(nproc)" --target vllm test_cuda_model test_engine test_engine_async_64 >$L/build.log 2>&1 ||
    { grep -E "error" $L/build.log | head -20; exit 1; }
for t in test_cuda_model test_engine; do
    (cd $B && VLLM_CUDA_SPEED=0 VLLM_TEST_DEVICE=cuda timeout 120 ./$t) >$L/$t.log 2>&1
    echo "$t exit $? $(grep -E 'PASSED|FAILED' $L/$t.log | head -2 | tr '\n' ' ')"
done
wait $MK
for s in qwen3-0.6b llama-8b; do
    (cd $B && VLLM_TEST_DEVICE=cuda VLLM_TEST_ASYNC_MODEL=/tmp/rand-$s timeout 150 ./test_engine_async_64) >$L/async64_$s.log 2>&1
    echo "test_engine_async_64 $s exit $? $(grep -E 'async == sync|FAILED|request [0-9]+ ' $L/async64_$s.log | head -3)"
done
say bench
for s in llama-8b qwen3-0.6b; do
    for c in 1 2 4 8 16; do
        ./$B/vllm bench --device cuda --model /tmp/rand-$s --num-prompts $c --input-len 1024 --output-len 256 \
            --concurrency $c --max-num-seqs $c --max-num-batched-tokens 16384 --gpu-memory-utilization 0.9 >$L/b_${s}_c$c.log 2>&1
        echo "$s conc $c: $(sed -n 's/Output token throughput (tok\/s): *\([0-9.]*\)/\1/p' $L/b_${s}_c$c.log) tok/s $(sed -n 's/Mean TPOT *(ms): *\([0-9.]*\)/\1/p' $L/b_${s}_c$c.log) ms"
    done
done
say done
