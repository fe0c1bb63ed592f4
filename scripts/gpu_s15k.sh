#!/usr/bin/env bash
# gpu_s15k.sh — session 15, call 11 (nvidia-h200, ~3 min): `vllm run`
# greedy decoding with the device a step ahead (branch s15-pipe,
# VLLM_RUN_PIPELINE: step k + 1 queued with its input spliced on the device
# from step k's argmax before the host collects step k) against the
# synchronous loop (=0): test_model_mirror on the CUDA backend, then the
# scorecard's batch-1 decode (512-token prompt + 256 greedy tokens) on
# random Qwen3-0.6B and Llama-3.1-8B bf16 checkpoints, two rounds
# alternated, greedy ids compared.
#   git checkout s15-pipe && bash scripts/gpu_snap.sh k vllm test_model_mirror
#   run carry [".gpu-snap-k"] "cd .gpu-snap-k && OUT=$OUT bash scripts/gpu_s15k.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s15k
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
    VLLM_RUN_PIPELINE=$2 timeout 120 ./bin/vllm run --device cuda --model $1 --prompt-ids "$(cat $L/p512_$(basename $1).ids)" \
        --max-tokens 256 --ignore-eos --temperature 0 --print-ids >$L/ids_$(basename $1)_$2_$3.txt 2>$L/run_$(basename $1)_$2_$3.err
    echo -n " pipe=$2 $(rate decode <$L/run_$(basename $1)_$2_$3.err)"
}
for M in $M6 $M8; do
    f=make6; [ $M = $M8 ] && f=make8
    while ! grep -q "^exit" $L/$f.log 2>/dev/null; do sleep 1; [ $(( $(date +%s) - t0 )) -gt 250 ] && break; done
    grep -q "^exit 0" $L/$f.log || { say "$M: no checkpoint ($(tail -2 $L/$f.log | tr '\n' ' '))"; continue; }
    rand_ids 512 0 $M >$L/p512_$(basename $M).ids
    say "$(basename $M): batch-1 greedy decode tok/s (512 + 256)"
    for r in 1 2; do echo "round $r:$(dec $M 0 $r)$(dec $M 1 $r)"; done
    for r in 1 2; do
        cmp -s $L/ids_$(basename $M)_0_$r.txt $L/ids_$(basename $M)_1_$r.txt && echo "round $r: ids equal" || echo "round $r: ids DIFFER"
    done
    tail -1 $L/run_$(basename $M)_1_1.err
done
say done
