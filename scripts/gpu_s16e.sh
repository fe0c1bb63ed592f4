#!/usr/bin/env bash
# gpu_s16e.sh — session 16, call 5 (nvidia-h200, ~2 min): where the 0.6B
# prefill's row kernels stall, per SASS instruction (as gpu_s16c.sh did
# for k_flash_fa3): Nsight Compute --set full with source counters of one
# launch each of k_qk_rope_store_pf, k_norm_vec (ADD_RMSNORM) and k_glu in
# the engine (2048-token prompt, L2 warm), each report's source page
# summarised by tools/ncu_sass_top.py.
#   bash scripts/gpu_snap.sh e vllm
#   run carry [".gpu-snap-e"] "cd .gpu-snap-e && OUT=$OUT bash scripts/gpu_s16e.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s16e
gpu_bin
M6=/tmp/rand-qwen3-0.6b
[ -f $M6/config.json ] || $PY scripts/gpu_hf.py make --shape qwen3-0.6b --out $M6 >$L/make6.log 2>&1
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for k in k_qk_rope_store_pf:40 k_norm_vec:90 k_glu:40; do
    name=${k%:*} skip=${k#*:}
    say "ncu --set full $name (launch $((skip + 1)))"
    timeout 150 $NCU -k regex:"$name" --launch-skip $skip --launch-count 1 --cache-control none --set full \
        -o $L/$name -f ./bin/vllm bench --device cuda --model $M6 --num-prompts 3 --input-len 2048 --output-len 1 \
        --concurrency 1 --max-num-seqs 1 --max-num-batched-tokens 8192 >$L/ncu_run_$name.txt 2>&1
    echo "ncu exit $?"
    $NCU --import $L/$name.ncu-rep --page details --section SpeedOfLight --section LaunchStats --section Occupancy \
        --section WarpStateStats >$L/$name.txt 2>&1
    grep -E "^  [a-z_]+|Duration|DRAM Throughput|Memory Throughput|Issued Warp|Eligible|Achieved Occupancy|Registers Per|Block Size|Grid Size|Waves Per SM|Warp Cycles Per Issued" \
        $L/$name.txt | cut -c1-120 | head -14
    $NCU --import $L/$name.ncu-rep --page source --csv --print-source sass >$L/${name}_sass.csv 2>/dev/null
    $PY tools/ncu_sass_top.py $L/${name}_sass.csv 22
    cp $L/${name}_sass.csv $FINAL/ 2>/dev/null
done
say done
