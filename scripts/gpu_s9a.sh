#!/usr/bin/env bash
# gpu_s9a.sh — session 9, device call 2 (nvidia-h200, ~6 min): the
# attention split of mixed steps (mdl_paged_attention, VLLM_ATTN_SPLIT).
#   1. build vllm, test_cuda_attn_mixed, test_model_attn_split (the 8B
#      checkpoint is made in the background meanwhile);
#   2. test_cuda_attn_mixed (one call and split vs the CPU op; the speed
#      table "speed: mixed ..."), its memcheck, test_model_attn_split on CUDA;
#   3. `vllm bench` 1024-in / 128-out on the Llama-3.1-8B shape at
#      concurrency 64 and 256 (then 16), VLLM_ATTN_SPLIT=0 then 1.
# Logs in $OUT (tarred).
set -u -o pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-$PWD/gpu-out}; mkdir -p "$FINAL"
L=/tmp/s9a; mkdir -p $L
t0=$(date +%s); say() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
trap 'tar czf "$FINAL/s9a_logs.tgz" -C $L . 2>/dev/null' EXIT
source scripts/gpu_deps.sh >/dev/null || exit 1
PY=${PYTHON:-python3}
M=/tmp/rand-llama-8b
( [ -f $M/config.json ] || $PY scripts/gpu_hf.py make --shape llama-8b --out $M >$L/make.log 2>&1 ) &
MK=$!
B=build-gpu
say build
cmake -S . -B $B -DVLLM_CUDA=ON -DCMAKE_BUILD_TYPE=Release >$L/configure.log 2>&1 || { tail -20 $L/configure.log; exit 1; }
cmake --build $B -j"$(nproc)" --target vllm test_cuda_attn_mixed test_model_attn_split >$L/build.log 2>&1 ||
    { grep -E "error" $L/build.log | head -20; exit 1; }
say tests
(cd $B && ./test_cuda_attn_mixed) >$L/mixed.log 2>&1
echo "test_cuda_attn_mixed exit $?"; grep -E "^mixed|speed: mixed|FAIL|error" $L/mixed.log | head -20
(cd $B && VLLM_TEST_DEVICE=cuda ./test_model_attn_split) >$L/model_split.log 2>&1
echo "test_model_attn_split (cuda) exit $?"; grep -E "FAIL|differ" $L/model_split.log | head -5
(cd $B && VLLM_CUDA_SPEED=0 timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 ./test_cuda_attn_mixed) >$L/mc.log 2>&1
echo "memcheck test_cuda_attn_mixed exit $? $(grep 'ERROR SUMMARY' $L/mc.log | tail -1)"
wait $MK; [ -f $M/config.json ] || { tail -5 $L/make.log; exit 1; }
say bench
for c in ${S9_CONC:-64 256 16}; do
    np=$(( c < 256 ? 2 * c : c ))
    for sp in 0 1; do
        VLLM_ATTN_SPLIT=$sp ./$B/vllm bench --device cuda --model $M --num-prompts $np --input-len 1024 --output-len 128 \
            --concurrency $c --max-num-seqs $c --max-num-batched-tokens 8192 --gpu-memory-utilization 0.9 \
            >$L/bench_c${c}_s$sp.log 2>&1
        echo "conc $c split $sp: $(grep -E 'Output token throughput|Mean TTFT|Mean TPOT' $L/bench_c${c}_s$sp.log | sed 's/  */ /g' | tr '\n' ';')"
    done
    say "conc $c done"
done
say done
