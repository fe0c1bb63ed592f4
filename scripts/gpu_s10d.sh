#!/usr/bin/env bash
# gpu_s10d.sh — session 10, fourth device call (nvidia-h200, ~3 min): the
# GEMV / cuBLAS rule by x bytes (act_dtype: the GEMV while n x hidden f32
# values fit 16 KB: 8B 1 token, 0.6B up to 4).
#   1. build; test_cuda_gemm (act_dtype), test_cuda_model, test_engine;
#   2. `vllm bench` 1024-in / 512-out, one wave of c requests, two rounds:
#      0.6B at c = 2 3 4 5 8 with the rule (default) and VLLM_CUDA_GEMV_MAX_N
#      = 1 and 8; 8B at c = 2 4 8 with the rule and 8.
#   OUT=$OUT bash scripts/gpu_s10d.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-$PWD/gpu-out}; mkdir -p "$FINAL"
L=/tmp/s10d; mkdir -p $L
t0=$(date +%s); say() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
trap 'tar czf "$FINAL/s10d_logs.tgz" -C $L . 2>/dev/null' EXIT
source scripts/gpu_deps.sh >/dev/null || exit 1
PY=${PYTHON:-python3}
( for s in qwen3-0.6b llama-8b; do [ -f /tmp/rand-$s/config.json ] ||
    $PY scripts/gpu_hf.py make --shape $s --out /tmp/rand-$s >$L/make_$s.log 2>&1; done ) &
MK=$!
B=build-gpu
T=(test_cuda_gemm test_cuda_model test_engine)
say build
cmake -S . -B $B -DVLLM_CUDA=ON -DCMAKE_BUILD_TYPE=Release >$L/configure.log 2>&1 || { tail -20 $L/configure.log; exit 1; }
cmake --build $B -j"$(nproc)" --target vllm "${T[@]}" >$L/build.log 2>&1 || { grep -E "error" $L/build.log | head -20; exit 1; }
for t in "${T[@]}"; do
    (cd $B && VLLM_CUDA_SPEED=0 VLLM_TEST_DEVICE=cuda timeout 200 ./$t) >$L/$t.log 2>&1
    echo "$t exit $? $(grep -E 'PASSED|FAILED' $L/$t.log | head -2 | tr '\n' ' ')"
done
grep -h "act_dtype" $L/test_cuda_gemm.log
wait $MK
say "TPOT sweep"
for r in 1 2; do
    for s in qwen3-0.6b llama-8b; do
        cs="2 3 4 5 8"; gs="rule 1 8"; [ $s = llama-8b ] && { cs="2 4 8"; gs="rule 8"; }
        for c in $cs; do
            line="round $r $s conc $c:"
            for g in $gs; do
                gv=$g; [ $g = rule ] && gv=
                VLLM_CUDA_GEMV_MAX_N=$gv ./$B/vllm bench --device cuda --model /tmp/rand-$s --num-prompts $c --input-len 1024 \
                    --output-len 512 --concurrency $c --max-num-seqs $c --max-num-batched-tokens 16384 \
                    --gpu-memory-utilization 0.9 >$L/tpot_${s}_c${c}_$g.log 2>&1
                line="$line $g $(sed -n 's/Output token throughput (tok\/s): *\([0-9.]*\)/\1/p' $L/tpot_${s}_c${c}_$g.log) tok/s $(sed -n 's/Mean TPOT *(ms): *\([0-9.]*\)/\1/p' $L/tpot_${s}_c${c}_$g.log) ms;"
            done
            echo "$line"
        done
    done
done
say done
