#!/usr/bin/env bash
# gpu_s14g.sh — session 14, call 7 (nvidia-h200, ~2 min; the main
# snapshot of call 6: `bash scripts/gpu_snap.sh b vllm test_engine_async_64
# quantize`, run carry [".gpu-snap-b"] "cd .gpu-snap-b && OUT=$OUT bash
# scripts/gpu_s14g.sh"). Where the warm 0.6B prefill goes, for the next
# session's prefill work: Nsight Compute over `vllm run` (2048-token
# prompt, 2 tokens), duration and DRAM bytes per kernel, with the L2 left
# as the engine leaves it (--cache-control none: session 13's ncu flushed
# it before every kernel, which charges the rope / norm kernels for reading
# the GEMM output from DRAM) and clocks left to the driver; then
# tools/ncu_summary.py (the prefill's kernels by name).
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s14g
M=/tmp/rand-qwen3-0.6b
[ -f $M/config.json ] || $PY scripts/gpu_hf.py make --shape qwen3-0.6b --out $M >$L/make.log 2>&1
gpu_bin
ids=$($PY -c "import json, random; random.seed(1); V = json.load(open('$M/config.json'))['vocab_size'];
print(','.join(str(random.randrange(V // 100, min(V, 100000))) for _ in range(2048)))")
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
say "ncu, cache control none"
timeout 170 $NCU --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum --cache-control none \
    --clock-control none --graph-profiling node --csv --print-units base --launch-count 4000 \
    ./bin/vllm run --device cuda --model $M --prompt-ids "$ids" --max-tokens 2 --ignore-eos --temperature 0 \
    >$L/ncu.csv 2>$L/ncu.err
echo "ncu exit $?"
grep -vE '^"' $L/ncu.csv | tail -3
$PY tools/ncu_summary.py $L/ncu.csv | head -60
gzip -f $L/ncu.csv
say done
