#!/usr/bin/env bash
# gpu_s17g.sh — session 17, call 9 (nvidia-h200, ~1 min): call 8's ncu
# step again (it profiled every GEMV and ran out of time): the 0.6B LM
# head's GEMV alone in `vllm run` decode, VLLM_CUDA_GEMV_ROWS=0
# (k_gemv_half_u, KS 2) vs 1 (k_gemv_half_rows), clocks and caches left alone.
# Make: bash scripts/gpu_snap.sh s17g vllm; run carry [".gpu-snap-s17g"]
#   "cd .gpu-snap-s17g && OUT=$OUT bash scripts/gpu_s17g.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s17g
gpu_bin
gpu_models
gpu_model_wait 6
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
ids=$($PY -c "import random; random.seed(0); print(','.join(str(random.randrange(1000, 100000)) for _ in range(512)))")
for v in 0 1; do
    re=$([ $v = 0 ] && echo 'k_gemv_half_u<.*\(int\)2, \(int\)2, \(bool\)0' || echo 'k_gemv_half_rows')
    VLLM_CUDA_GEMV_ROWS=$v timeout 60 $NCU --kernel-name-base demangled -k regex:"$re" --launch-skip 2 --launch-count 3 \
        --clock-control none --cache-control none --section SpeedOfLight ./bin/vllm run --device cuda --model $M6 \
        --prompt-ids "$ids" --max-tokens 8 --ignore-eos --temperature 0 >$L/ncu_$v.txt 2>&1
    echo "GEMV_ROWS=$v exit $?:"
    grep -E "^  [a-zA-Z_]|Duration|DRAM Throughput" $L/ncu_$v.txt | sed 's/(const char[^)]*) //' | cut -c1-110 | head -6
done
