#!/usr/bin/env bash
# gpu_s20i.sh — session 20, call 10 (nvidia-h200, ~2 min): where a 0.6B
# 2048-token prefill goes now (the ping-pong GEMM-GLU by default): ncu
# (durations only, clocks and caches untouched) of one `vllm run` prefill,
# per kernel name (tools/ncu_summary.py), default and
# VLLM_CUDA_GEMM_GLU=0, for the next session's plan.
#   bash scripts/gpu_snap.sh s20i vllm
#   run carry [".gpu-snap-s20i"] "cd .gpu-snap-s20i && OUT=$OUT bash scripts/gpu_s20i.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s20i
gpu_bin
gpu_models
gpu_model_wait 6
ids=$($PY -c "import json, random; random.seed(1); V = json.load(open('$M6/config.json'))['vocab_size'];
print(','.join(str(random.randrange(V // 100, min(V, 100000))) for _ in range(2048)))")
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for m in d 0; do
    say "ncu 0.6B prefill, $([ $m = d ] && echo default || echo VLLM_CUDA_GEMM_GLU=0)"
    env $([ $m = 0 ] && echo VLLM_CUDA_GEMM_GLU=0) timeout 200 "$NCU" --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
        --clock-control none --cache-control none --csv --print-units base --launch-count 1000 \
        ./bin/vllm run --device cuda --model $M6 --prompt-ids "$ids" --max-tokens 1 --ignore-eos \
        --temperature 0 >$L/ncu_$m.csv 2>$L/ncu_$m.err
    echo "ncu exit $?"
    $PY tools/ncu_summary.py $L/ncu_$m.csv | head -30
done
say done
