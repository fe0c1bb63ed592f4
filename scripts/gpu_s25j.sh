#!/usr/bin/env bash
# gpu_s25j.sh — session 25, call 10 (nvidia-h200, ~2.5 min): why the bf16
# residual slowed serving's mixed steps (call 9: concurrency 64 -8%, TTFT
# 75-82 vs 49 ms) while a 2048-token prefill got faster: warm TTFT of one
# prompt of 4096 and 8190 tokens with and without (size alone), then ncu
# per-kernel time of one 8190-token prefill both ways (which kernels).
#   run carry [".gpu-snap-s25h"] "cd .gpu-snap-s25h && OUT=$OUT bash scripts/gpu_s25j.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s25j
gpu_bin
( [ -f $M6/config.json ] || $PY scripts/gpu_hf.py make --shape qwen3-0.6b --out $M6; echo "exit $?" ) >$L/make6.log 2>&1
for n in 4096 8190; do
    a=$(gpu_pf vllm $M6 $L/pf16_$n.log --input-len $n; gpu_med $L/pf16_$n.log)
    b=$(VLLM_BF16_RESIDUAL=0 gpu_pf vllm $M6 $L/pf32_$n.log --input-len $n; gpu_med $L/pf32_$n.log)
    echo "$n tokens: TTFT bf16 residual $a ms, f32 $b ms"
done
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
ids=$($PY -c "import random; random.seed(1); print(','.join(str(random.randrange(1519, 100000)) for _ in range(8190)))")
for v in 1 0; do
    VLLM_BF16_RESIDUAL=$v timeout 100 $NCU --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
        --clock-control none --csv --print-units base --launch-count 400 \
        ./bin/vllm run --device cuda --model $M6 --prompt-ids "$ids" --max-tokens 1 --ignore-eos --temperature 0 >$L/ncu8k_$v.csv 2>$L/ncu8k_$v.err
    echo "ncu VLLM_BF16_RESIDUAL=$v exit $?"
    $PY tools/ncu_summary.py $L/ncu8k_$v.csv 2>/dev/null | sed -n '1,16p'
    gzip -f $L/ncu8k_$v.csv; cp $L/ncu8k_$v.csv.gz $FINAL/
done
say done
