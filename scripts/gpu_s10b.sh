#!/usr/bin/env bash
# (The L2 prefetch code, VLLM_L2_PREFETCH / VLLM_L2PF_CTA_KB, lives on branch s10-l2pf: measured
# slower in every configuration in session 10 and not merged; run this from that branch.)
# gpu_s10b.sh — session 10, second device call (nvidia-h200, ~5 min):
#   1. TPOT of the 8B shape by concurrency (1024-in / 128-out, one wave of
#      c requests, c = 1 2 4 6 8 9 12 16): call 1 saw 18.8 ms at 8 against
#      6.8 at 16;
#   2. the per-op GPU time (VLLM_CUDA_PROFILE, graphs and PDL off) of 8 and
#      16 requests, 64 tokens out;
#   3. the L2 prefetch hints, second kernel (a grid of one-warp CTAs of
#      VLLM_L2PF_CTA_KB each): test_cuda_ops, then 8B / 0.6B greedy decode
#      512 + 256 by configuration and CTA size.
#   OUT=$OUT bash scripts/gpu_s10b.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-$PWD/gpu-out}; mkdir -p "$FINAL"
L=/tmp/s10b; mkdir -p $L
t0=$(date +%s); say() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
trap 'tar czf "$FINAL/s10b_logs.tgz" -C $L . 2>/dev/null' EXIT
source scripts/gpu_deps.sh >/dev/null || exit 1
PY=${PYTHON:-python3}
( for s in llama-8b qwen3-0.6b; do [ -f /tmp/rand-$s/config.json ] ||
    $PY scripts/gpu_hf.py make --shape $s --out /tmp/rand-$s >$L/make_$s.log 2>&1; done ) &
MK=$!
B=build-gpu
say build
cmake -S . -B $B -DVLLM_CUDA=ON -DCMAKE_BUILD_TYPE=Release >$L/configure.log 2>&1 || { tail -20 $L/configure.log; exit 1; }
cmake --build $B -j"$(nproc)" --target vllm test_cuda_ops >$L/build.log 2>&1 || { grep -E "error" $L/build.log | head -20; exit 1; }
(cd $B && VLLM_CUDA_SPEED=0 ./test_cuda_ops) >$L/ops.log 2>&1
echo "test_cuda_ops exit $? $(grep -E 'PASSED|FAILED' $L/ops.log | head -2 | tr '\n' ' ')"
wait $MK
M8=/tmp/rand-llama-8b
bench() { # conc out extra-env...
    local c=$1 o=$2; shift 2
    env "$@" ./$B/vllm bench --device cuda --model $M8 --num-prompts $c --input-len 1024 --output-len $o --concurrency $c \
        --max-num-seqs $c --max-num-batched-tokens 16384 --gpu-memory-utilization 0.9
}
say "TPOT by concurrency"
for c in 1 2 4 6 8 9 12 16; do
    bench $c 128 X=1 >$L/tpot_c$c.log 2>&1
    echo "conc $c: $(grep -E 'Output token throughput|Mean TPOT' $L/tpot_c$c.log | sed 's/  */ /g' | tr '\n' ';')"
done
say "profile 8 / 16"
for c in 8 16; do
    bench $c 64 VLLM_CUDA_PROFILE=1 VLLM_CUDA_GRAPHS=0 VLLM_CUDA_PDL=0 >$L/prof_c$c.log 2>&1
    echo "-- conc $c"; grep -A40 "cuda profile" $L/prof_c$c.log | head -30
done
say "l2 prefetch A/B"
$PY -c "import random; random.seed(0); print(','.join(str(random.randrange(1519, 100000)) for _ in range(512)))" >$L/p512.ids
run() { # shape cfg kb
    VLLM_L2_PREFETCH=$2 VLLM_L2PF_CTA_KB=$3 ./$B/vllm run --device cuda --model /tmp/rand-$1 --prompt-ids "$(cat $L/p512.ids)" \
        --max-tokens 256 --ignore-eos --temperature 0 --print-ids >$L/ids_$1_$2_$3.txt 2>$L/err_$1_$2_$3.txt
    local tok=$(sed -n 's/.*decode: [0-9]* tokens, \([0-9.]*\) tok\/s.*/\1/p' $L/err_$1_$2_$3.txt | head -1)
    local same=$(cmp -s $L/ids_$1_$2_$3.txt $L/ids_$1_0_256.txt && echo same || echo DIFF)
    echo -n " $2@$3k ${tok:-fail} ($same)"
}
for s in llama-8b qwen3-0.6b; do
    echo -n "$s:"; run $s 0 256
    for kb in 64 256 1024; do for cfg in 32,0,0 16,8,8 48,24,24; do run $s $cfg $kb; done; done
    run $s 0 256; echo
done
say done
