#!/usr/bin/env bash
# gpu_s15m.sh — session 15, call 13 (nvidia-h200, ~3 min): `vllm run` at
# temperature 1 (its default) with the sampled tokens drawn on the device a
# step ahead (branch s15-devsample; VLLM_RUN_PIPELINE default) against the
# synchronous loop with the host sampler (=0: the vocabulary's logits back
# to the host every step): test_model_mirror on the CUDA backend, then
# decode tok/s (512-token prompt + 256 tokens, --seed 1) on random
# Qwen3-0.6B and Llama-3.1-8B bf16 checkpoints, two rounds alternated, and
# how many leading tokens of the two agree (same logits, same uniforms;
# the device's softmax sums in another order).
#   git checkout s15-devsample && bash scripts/gpu_snap.sh m vllm test_model_mirror
#   run carry [".gpu-snap-m"] "cd .gpu-snap-m && OUT=$OUT bash scripts/gpu_s15m.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s15m
M6=/tmp/rand-qwen3-0.6b M8=/tmp/rand-llama-8b
( $PY scripts/gpu_hf.py make --shape qwen3-0.6b --out $M6 >$L/make6.log 2>&1; echo "exit $?" >>$L/make6.log
  $PY scripts/gpu_hf.py make --shape llama-8b --out $M8 >$L/make8.log 2>&1; echo "exit $?" >>$L/make8.log ) &
gpu_bin
say "test_model_mirror on cuda"
gpu_test mirror 60 VLLM_TEST_DEVICE=cuda ./test_model_mirror
grep -E "LINE|ERROR|differ" $L/mirror.log | head -4
rand_ids() { $PY -c "import json, random; random.seed($2); V = json.load(open('$3/config.json'))['vocab_size'];
print(','.join(str(random.randrange(V // 100, min(V, 100000))) for _ in range($1)))"; }
dec() { # model pipe round
    local b=$(basename $1)
    VLLM_RUN_PIPELINE=$2 timeout 100 ./bin/vllm run --device cuda --model $1 --prompt-ids "$(cat $L/p512_$b.ids)" \
        --max-tokens 256 --ignore-eos --temperature 1.0 --seed 1 --print-ids >$L/ids_${b}_$2_$3.txt 2>$L/run_${b}_$2_$3.err
    echo -n " pipe=$2 $(rate decode <$L/run_${b}_$2_$3.err)"
}
same() { $PY -c "
a = open('$1').read().split(); b = open('$2').read().split(); n = 0
while n < min(len(a), len(b)) and a[n] == b[n]: n += 1
print(f'{n} of {len(a)} / {len(b)} leading tokens equal')"; }
for M in $M6 $M8; do
    f=make6; [ $M = $M8 ] && f=make8
    while ! grep -q "^exit" $L/$f.log 2>/dev/null; do sleep 1; [ $(( $(date +%s) - t0 )) -gt 150 ] && break; done
    grep -q "^exit 0" $L/$f.log || { say "$M: no checkpoint ($(tail -2 $L/$f.log | tr '\n' ' '))"; continue; }
    rand_ids 512 0 $M >$L/p512_$(basename $M).ids
    say "$(basename $M): decode tok/s at temperature 1 (512 + 256, seed 1)"
    for r in 1 2; do echo "round $r:$(dec $M 0 $r)$(dec $M 1 $r)"; done
    b=$(basename $M)
    echo "host vs device sampler: $(same $L/ids_${b}_0_1.txt $L/ids_${b}_1_1.txt); device runs: $(same $L/ids_${b}_1_1.txt $L/ids_${b}_1_2.txt); host runs: $(same $L/ids_${b}_0_1.txt $L/ids_${b}_0_2.txt)"
done
say done
