#!/usr/bin/env bash
# gpu_s17e.sh — session 17, call 7 (nvidia-h200, ~3 min): where the 0.6B
# prefill's TTFT goes outside its kernels.
#   1. `vllm bench` 2048-in / 1-out (gpu_pf: 8 prompts one at a time) with
#      VLLM_STEP_TRACE=1: per step the host's schedule / execute / outputs
#      times and, inside execute, forward queued / ids queued / waited;
#   2. the kernels of one 2048-token prefill (`vllm run`, VLLM_WARMUP=0, 1
#      token) under Nsight Compute with clocks and caches left alone, summed
#      per kernel by tools/ncu_summary.py: GPU time in kernels vs the TTFT.
# Make: bash scripts/gpu_snap.sh s17e vllm; run carry [".gpu-snap-s17e"]
#   "cd .gpu-snap-s17e && OUT=$OUT bash scripts/gpu_s17e.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s17e
gpu_bin
gpu_models
gpu_model_wait 6
say "0.6B: bench 2048 / 1 with VLLM_STEP_TRACE=1 (twice), then without"
for r in 1 2; do
    VLLM_STEP_TRACE=1 gpu_pf vllm $M6 $L/pf_trace_$r.log
    echo "round $r: median TTFT $(gpu_med $L/pf_trace_$r.log) ms, mean $(sed -n 's/^Mean TTFT (ms): *\([0-9.]*\).*/\1/p' $L/pf_trace_$r.log)"
    grep -E "step trace" $L/pf_trace_$r.log | tail -6
done
gpu_pf vllm $M6 $L/pf_plain.log
echo "no trace: median TTFT $(gpu_med $L/pf_plain.log) ms"
say "0.6B: ncu of one prefill's kernels (clocks and caches left alone)"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
ids=$($PY -c "import json, random; random.seed(1); V = json.load(open('$M6/config.json'))['vocab_size'];
print(','.join(str(random.randrange(V // 100, min(V, 100000))) for _ in range(2048)))")
VLLM_WARMUP=0 timeout 300 $NCU --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
    --clock-control none --cache-control none --csv --print-units base --launch-count 600 \
    ./bin/vllm run --device cuda --model $M6 --prompt-ids "$ids" --max-tokens 1 --ignore-eos --temperature 0 \
    >$L/ncu.csv 2>$L/ncu.err
echo "ncu exit $?"
$PY tools/ncu_summary.py $L/ncu.csv | head -40
say done
