#!/usr/bin/env bash
# gpu_s20h.sh — session 20, call 8 (nvidia-h200, ~4 min): the GEMM-GLU rule
# at K 2048-4095 (newly the cooperative kernel, by alone numbers only) in
# the engine: random Llama-3.2-1B-shaped (K 2048, ff 8192) and the
# qwen3-hd256 shape (K 2560, ff 6912) checkpoints (gpu_hf.py make): warm
# 2048-token TTFT (median of 8) default vs VLLM_CUDA_GEMM_GLU=0, three
# rounds; the HF oracle (2048 + 64 greedy) with the default.
#   bash scripts/gpu_snap.sh s20h vllm
#   run carry [".gpu-snap-s20h"] "cd .gpu-snap-s20h && OUT=$OUT bash scripts/gpu_s20h.sh"
#   (the first run stopped at the second model on a typo, MG for Mg; the
#   second ran S20H_MODELS=g: the qwen3-hd256 shape only)
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s20h
gpu_bin
M1=/tmp/rand-llama-1b Mg=/tmp/rand-qwen3-hd256
( [ -f $M1/config.json ] || $PY scripts/gpu_hf.py make --shape llama-1b --out $M1 >$L/make1.log 2>&1; echo "exit $?" >>$L/make1.log
  [ -f $Mg/config.json ] || $PY scripts/gpu_hf.py make --shape qwen3-hd256 --out $Mg >$L/makeg.log 2>&1; echo "exit $?" >>$L/makeg.log ) &
for x in ${S20H_MODELS:-1 g}; do
    while ! grep -q exit $L/make$x.log 2>/dev/null; do sleep 1; done; tail -1 $L/make$x.log
    eval M=\$M$x
    say "model $M: TTFT 2048, default (d) / VLLM_CUDA_GEMM_GLU=0 (0)"
    for r in 1 2 3; do
        gpu_pf vllm $M $L/pf${x}_d_$r.log
        VLLM_CUDA_GEMM_GLU=0 gpu_pf vllm $M $L/pf${x}_0_$r.log
        echo "round $r: $(gpu_med $L/pf${x}_d_$r.log) / $(gpu_med $L/pf${x}_0_$r.log) ms"
    done
    $PY -c "import json, random; random.seed(5); V = json.load(open('$M/config.json'))['vocab_size'];
print(' '.join(str(random.randrange(V // 100, min(V, 100000))) for _ in range(2048)))" >$L/p$x.ids
    timeout 120 ./bin/vllm run --device cuda --model $M --prompt-ids "$(tr ' ' ',' <$L/p$x.ids)" --max-tokens 64 \
        --ignore-eos --temperature 0 --print-ids >$L/ours_$x.ids 2>$L/ours_$x.err
    echo "run exit $?: $(wc -w <$L/ours_$x.ids) ids"
    timeout 200 $PY scripts/gpu_hf.py hf --model $M --prompt-ids $L/p$x.ids --ours $L/ours_$x.ids --max-tokens 64 \
        >$L/hf_$x.json 2>$L/hf_$x.err
    echo "gpu_hf.py hf exit $?: $(cat $L/hf_$x.json)"
    tail -3 $L/hf_$x.err | grep -iE "error|Traceback" || true
done
say done
