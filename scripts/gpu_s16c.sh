#!/usr/bin/env bash
# gpu_s16c.sh — session 16, call 3 (nvidia-h200, ~2 min): where k_flash_fa3's
# consumer warps stall, per SASS instruction. Nsight Compute --set full
# (with source counters) of one k_flash_fa3 launch in the 0.6B engine
# (2048-token prompt, block 16, L2 warm), saved as a report; then the
# source page as CSV (SASS with warp-stall samples) summarised by
# tools/ncu_sass_top.py: the instructions with the most stall samples and
# the stall reasons of each.
#   bash scripts/gpu_snap.sh c vllm
#   run carry [".gpu-snap-c"] "cd .gpu-snap-c && OUT=$OUT bash scripts/gpu_s16c.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s16c
gpu_bin
M6=/tmp/rand-qwen3-0.6b
[ -f $M6/config.json ] || $PY scripts/gpu_hf.py make --shape qwen3-0.6b --out $M6 >$L/make6.log 2>&1
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
$NCU --version | tail -1
say "ncu --set full k_flash_fa3 (launch 41)"
timeout 200 $NCU -k regex:k_flash_fa3 --launch-skip 40 --launch-count 1 --cache-control none --set full \
    --import-source yes -o $L/fa3 -f \
    ./bin/vllm bench --device cuda --model $M6 --num-prompts 3 --input-len 2048 --output-len 1 --concurrency 1 \
    --max-num-seqs 1 --max-num-batched-tokens 8192 >$L/ncu_run.txt 2>&1
echo "ncu exit $?"; tail -3 $L/ncu_run.txt
$NCU --import $L/fa3.ncu-rep --page source --csv --print-source sass >$L/fa3_sass.csv 2>$L/fa3_sass.err
echo "source page exit $? ($(wc -l <$L/fa3_sass.csv) lines)"; head -c 600 $L/fa3_sass.err
$PY tools/ncu_sass_top.py $L/fa3_sass.csv 45
$NCU --import $L/fa3.ncu-rep --page details --print-details all --section WarpStateStats --section InstructionStats \
    >$L/fa3_details.txt 2>&1
grep -iE "stall|warp cycles|executed|issued" $L/fa3_details.txt | cut -c1-160 | head -30
cp $L/fa3_sass.csv $FINAL/ 2>/dev/null
say done
