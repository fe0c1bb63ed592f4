#!/usr/bin/env bash
# gpu_s10e.sh — session 10, fifth device call (nvidia-h200, ~5 min): the
# tensor-core skinny kernel (cuda_skinny.cu: MATMUL / MATMUL_GLU of 2..16
# bf16 rows over bf16 W; VLLM_CUDA_SKINNY=0 turns it off: cuBLAS).
#   1. build; test_cuda_gemm (its skinny cases against the CPU) plain and
#      under memcheck; test_cuda_model; test_engine_async_64 on the 8B and
#      0.6B checkpoints (async == sync at concurrency 16: 16-row steps);
#   2. `vllm bench` 1024-in / 256-out, one wave of c requests, skinny on /
#      off, two rounds: 8B and 0.6B at c = 2 4 8 16.
#   OUT=$OUT bash scripts/gpu_s10e.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-$PWD/gpu-out}; mkdir -p "$FINAL"
L=/tmp/s10e; mkdir -p $L
t0=$(date +%s); say() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
trap 'tar czf "$FINAL/s10e_logs.tgz" -C $L . 2>/dev/null' EXIT
source scripts/gpu_deps.sh >/dev/null || exit 1
PY=${PYTHON:-python3}
( for s in qwen3-0.6b llama-8b; do [ -f /tmp/rand-$s/config.json ] ||
    $PY scripts/gpu_hf.py make --shape $s --out /tmp/rand-$s >$L/make_$s.log 2>&1; done ) &
MK=$!
B=build-gpu
say build
cmake -S . -B $B -DVLLM_CUDA=ON -DCMAKE_BUILD_TYPE=Release >$L/configure.log 2>&1 || { tail -20 $L/configure.log; exit 1; }
cmake --build $B -j"$(nproc)" --target vllm test_cuda_gemm test_cuda_model test_engine_async_64 >$L/build.log 2>&1 ||
    { grep -E "error" $L/build.log | head -20; exit 1; }
(cd $B && VLLM_CUDA_SPEED=0 timeout 120 ./test_cuda_gemm) >$L/gemm.log 2>&1
echo "test_cuda_gemm exit $? $(grep -E 'PASSED|FAILED' $L/gemm.log | head -2 | tr '\n' ' ')"
grep -E "matmul bf16 x|glu" $L/gemm.log | head -30
(cd $B && VLLM_CUDA_SPEED=0 timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 ./test_cuda_gemm) >$L/mc_gemm.log 2>&1
echo "memcheck test_cuda_gemm exit $? $(grep 'ERROR SUMMARY' $L/mc_gemm.log | tail -1)"
(cd $B && VLLM_CUDA_SPEED=0 VLLM_TEST_DEVICE=cuda timeout 120 ./test_cuda_model) >$L/model.log 2>&1
echo "test_cuda_model exit $? $(grep -E 'PASSED|FAILED' $L/model.log | head -2 | tr '\n' ' ')"
wait $MK
for s in qwen3-0.6b llama-8b; do
    (cd $B && VLLM_TEST_DEVICE=cuda VLLM_TEST_ASYNC_MODEL=/tmp/rand-$s timeout 150 ./test_engine_async_64) >$L/async64_$s.log 2>&1
    echo "test_engine_async_64 $s exit $? $(grep -E 'async == sync|FAILED|request [0-9]+ ' $L/async64_$s.log | head -3)"
done
say "bench skinny on / off"
for r in 1 2; do
    for s in llama-8b qwen3-0.6b; do
        for c in 2 4 8 16; do
            line="round $r $s conc $c:"
            for k in on 0; do
                kv=$k; [ $k = on ] && kv=
                VLLM_CUDA_SKINNY=$kv ./$B/vllm bench --device cuda --model /tmp/rand-$s --num-prompts $c --input-len 1024 \
                    --output-len 256 --concurrency $c --max-num-seqs $c --max-num-batched-tokens 16384 \
                    --gpu-memory-utilization 0.9 >$L/b_${s}_c${c}_$k.log 2>&1
                line="$line $k $(sed -n 's/Output token throughput (tok\/s): *\([0-9.]*\)/\1/p' $L/b_${s}_c${c}_$k.log) tok/s $(sed -n 's/Mean TPOT *(ms): *\([0-9.]*\)/\1/p' $L/b_${s}_c${c}_$k.log) ms;"
            done
            echo "$line"
        done
    done
done
say done
