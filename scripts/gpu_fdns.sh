#!/usr/bin/env bash
# gpu_fdns.sh — one device call (nvidia-h200, ~4 min): the tensor-core
# decode kernel's split rule (branch s10-fdns: the most splits that keep
# one wave of warps, vs the first rule, the fewest that fill it:
# VLLM_CUDA_FLASH_DEC_NSRULE=ceil).
#   1. build vllm and test_cuda_attn_mixed (the 8B checkpoint meanwhile);
#   2. test_cuda_attn_mixed: correctness (splits as chosen / none / 3) and
#      the "speed: dec" table, which now prints both rules per row count;
#   3. `vllm bench` 8B 1024 / 128 at concurrency 8, 16, 32: the first rule
#      then the new, two rounds.
# Merge if the tests pass and the new rule is not slower in the table at
# 8-64 rows nor in situ.
set -u -o pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-$PWD/gpu-out}; mkdir -p "$FINAL"
L=/tmp/fdns; mkdir -p $L
t0=$(date +%s); say() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
trap 'tar czf "$FINAL/fdns_logs.tgz" -C $L . 2>/dev/null' EXIT
source scripts/gpu_deps.sh >/dev/null || exit 1
PY=${PYTHON:-python3}
M8=/tmp/rand-llama-8b
( [ -f $M8/config.json ] || $PY scripts/gpu_hf.py make --shape llama-8b --out $M8 >$L/make.log 2>&1 ) &
MK=$!
B=build-gpu
say build
[ "${NO_BUILD:-0}" = 1 ] || {
cmake -S . -B $B -DVLLM_CUDA=ON -DCMAKE_BUILD_TYPE=Release >$L/configure.log 2>&1 || { tail -20 $L/configure.log; exit 1; }
cmake --build $B -j"$(nproc)" --target vllm test_cuda_attn_mixed >$L/build.log 2>&1 ||
    { grep -E "error" $L/build.log | head -20; exit 1; }
}
say tests
(cd $B && ./test_cuda_attn_mixed) >$L/mixed.log 2>&1
echo "test_cuda_attn_mixed exit $?"; grep -E "speed: dec|FAIL|error|did not" $L/mixed.log | head -20
wait $MK
say bench
for r in 1 2; do
    for c in 8 16 32; do
        for rule in ceil fill; do
            VLLM_CUDA_FLASH_DEC_NSRULE=$rule ./$B/vllm bench --device cuda --model $M8 --num-prompts $((2 * c)) \
                --input-len 1024 --output-len 128 --concurrency $c --max-num-seqs $c --max-num-batched-tokens 8192 \
                --gpu-memory-utilization 0.9 >$L/bench_r${r}_c${c}_$rule.log 2>&1
            echo "round $r conc $c rule $rule: $(grep -E 'Output token throughput|Mean TPOT' $L/bench_r${r}_c${c}_$rule.log | sed 's/  */ /g' | tr '\n' ';')"
        done
    done
done
say done
