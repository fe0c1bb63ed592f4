#!/usr/bin/env bash
# gpu_s10c.sh — session 10, third device call (nvidia-h200-x2, ~6 min):
# batched decode on cuBLAS from 2 tokens (VLLM_CUDA_GEMV_MAX_N, default 1:
# the f32-row GEMV took 3-4x longer per matmul at 2-8 rows than at 1).
#   1. one build of vllm and the tests;
#   2. GPU 0: the scorecard (scripts/gpu_bench.sh, logs under $OUT/bench);
#   3. GPU 1 meanwhile: test_cuda_gemm (act_dtype), test_cuda_model,
#      test_engine, test_engine_async_64, test_engine_devsample, then
#      `vllm bench` 1024 / 128 TPOT by concurrency (one wave of c requests)
#      with VLLM_CUDA_GEMV_MAX_N = 1 (new default), 2, 8 (session 9's rule),
#      8B at c = 1 2 4 8 16 and 0.6B at c = 2 4 8.
#   OUT=$OUT bash scripts/gpu_s10c.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-$PWD/gpu-out}; mkdir -p "$FINAL/bench"
L=/tmp/s10c; mkdir -p $L
t0=$(date +%s); say() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
trap 'tar czf "$FINAL/s10c_logs.tgz" -C $L . 2>/dev/null' EXIT
source scripts/gpu_deps.sh >/dev/null || exit 1
PY=${PYTHON:-python3}
( for s in llama-8b qwen3-0.6b; do [ -f /tmp/rand-$s/config.json ] ||
    $PY scripts/gpu_hf.py make --shape $s --out /tmp/rand-$s >$L/make_$s.log 2>&1; done ) &
MK=$!
B=build-gpu
T=(test_cuda_gemm test_cuda_model test_engine test_engine_async_64 test_engine_devsample)
say build
cmake -S . -B $B -DVLLM_CUDA=ON -DCMAKE_BUILD_TYPE=Release >$L/configure.log 2>&1 || { tail -20 $L/configure.log; exit 1; }
cmake --build $B -j"$(nproc)" --target vllm "${T[@]}" >$L/build.log 2>&1 || { grep -E "error" $L/build.log | head -20; exit 1; }
wait $MK
say "scorecard (GPU 0) | tests + TPOT sweep (GPU 1)"
( CUDA_VISIBLE_DEVICES=0 OUT=$FINAL/bench timeout -k 5 420 bash scripts/gpu_bench.sh >$L/bench.txt 2>&1 ) &
P0=$!
(
    export CUDA_VISIBLE_DEVICES=1
    for t in "${T[@]}"; do
        (cd $B && VLLM_CUDA_SPEED=0 VLLM_TEST_DEVICE=cuda timeout 200 ./$t) >$L/$t.log 2>&1
        echo "$t exit $? $(grep -E 'PASSED|FAILED' $L/$t.log | head -2 | tr '\n' ' ')"
    done
    grep -h "act_dtype" $L/test_cuda_gemm.log
    for s in llama-8b qwen3-0.6b; do
        cs="1 2 4 8 16"; [ $s = qwen3-0.6b ] && cs="2 4 8"
        for c in $cs; do
            line="$s conc $c:"
            for g in 1 2 8; do
                VLLM_CUDA_GEMV_MAX_N=$g ./$B/vllm bench --device cuda --model /tmp/rand-$s --num-prompts $c --input-len 1024 \
                    --output-len 128 --concurrency $c --max-num-seqs $c --max-num-batched-tokens 16384 \
                    --gpu-memory-utilization 0.9 >$L/tpot_${s}_c${c}_g$g.log 2>&1
                line="$line g$g $(sed -n 's/Output token throughput (tok\/s): *\([0-9.]*\)/\1/p' $L/tpot_${s}_c${c}_g$g.log) tok/s $(sed -n 's/Mean TPOT (ms): *\([0-9.]*\)/\1/p' $L/tpot_${s}_c${c}_g$g.log) ms;"
            done
            echo "$line"
        done
    done
) >$L/side.txt 2>&1 &
P1=$!
wait $P1; echo "---- GPU 1"; cat $L/side.txt
wait $P0; echo "---- scorecard"; tail -60 $L/bench.txt
say done
