#!/usr/bin/env bash
# gpu_s16h.sh — session 16, call 8 (nvidia-h200, ~6 min): issue 6's
# scorecard on session 16's final main (scripts/gpu_s14b.sh: gpu_bench.sh
# prebuilt for the 8B and 0.6B bf16 rows, HF side by side and the HF
# oracle, async == sync; the 8B Q4_K_M row), then Nsight Compute with
# source counters of k_flash_fa3 and k_qk_rope_store_pf in the 0.6B engine
# as they are now (tools/ncu_sass_top.py), for the next session's plan.
#   bash scripts/gpu_snap.sh h vllm test_engine_async_64 quantize
#   run carry [".gpu-snap-h"] "cd .gpu-snap-h && OUT=$OUT bash scripts/gpu_s16h.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out} timeout 420 bash scripts/gpu_s14b.sh
source scripts/gpu_common.sh s16h
M6=/tmp/rand-qwen3-0.6b
[ -f $M6/config.json ] || { say "no $M6"; exit 0; }
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for k in k_flash_fa3:40 k_qk_rope_store_pf:40; do
    name=${k%:*} skip=${k#*:}
    say "ncu --set full $name (launch $((skip + 1)))"
    timeout 100 $NCU -k regex:"$name" --launch-skip $skip --launch-count 1 --cache-control none --set full \
        -o $L/$name -f ./bin/vllm bench --device cuda --model $M6 --num-prompts 3 --input-len 2048 --output-len 1 \
        --concurrency 1 --max-num-seqs 1 --max-num-batched-tokens 8192 >$L/ncu_run_$name.txt 2>&1
    echo "ncu exit $?"
    $NCU --import $L/$name.ncu-rep --page details --section SpeedOfLight --section Occupancy --section WarpStateStats \
        >$L/$name.txt 2>&1
    grep -E "Duration|DRAM Throughput|Issued Warp|Eligible|Achieved Occupancy|Warp Cycles Per Issued" $L/$name.txt | cut -c1-100 | head -8
    $NCU --import $L/$name.ncu-rep --page source --csv --print-source sass >$L/${name}_sass.csv 2>/dev/null
    $PY tools/ncu_sass_top.py $L/${name}_sass.csv 16
    cp $L/${name}_sass.csv $FINAL/ 2>/dev/null
done
say done
