#!/usr/bin/env bash
# gpu_s9c.sh — session 9, device call 4 (nvidia-h200, ~5 min): the
# tensor-core decode kernel's configurations (keys per tile, stages, warps
# per CTA: VLLM_CUDA_FLASH_DEC_CFG).
#   1. build vllm and the tests (the 8B checkpoint made meanwhile);
#   2. test_cuda_attn_mixed (every configuration against the CPU op, the
#      speed table "speed: dec ..." with all of them), test_cuda_paged_fd
#      (k_fd's tests, now with the decode kernel off) without its sweep;
#   3. Nsight Compute over one launch of the default configuration at 256
#      rows x 1024 keys (throughput, memory, warp states, occupancy);
#   4. the configuration fastest at 64 + 256 rows in the table against the
#      default: `vllm bench` 8B 1024-in / 128-out at concurrency 64 and 256.
set -u -o pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-$PWD/gpu-out}; mkdir -p "$FINAL"
L=/tmp/s9c; mkdir -p $L
t0=$(date +%s); say() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
trap 'tar czf "$FINAL/s9c_logs.tgz" -C $L . 2>/dev/null' EXIT
source scripts/gpu_deps.sh >/dev/null || exit 1
PY=${PYTHON:-python3}
M8=/tmp/rand-llama-8b
( [ -f $M8/config.json ] || $PY scripts/gpu_hf.py make --shape llama-8b --out $M8 >$L/make.log 2>&1 ) &
MK=$!
B=build-gpu
say build
cmake -S . -B $B -DVLLM_CUDA=ON -DCMAKE_BUILD_TYPE=Release >$L/configure.log 2>&1 || { tail -20 $L/configure.log; exit 1; }
cmake --build $B -j"$(nproc)" --target vllm test_cuda_attn_mixed test_cuda_paged_fd >$L/build.log 2>&1 ||
    { grep -E "error" $L/build.log | head -20; exit 1; }
say tests
(cd $B && ./test_cuda_attn_mixed) >$L/mixed.log 2>&1
echo "test_cuda_attn_mixed exit $?"; grep -E "speed: |FAIL|error|did not" $L/mixed.log | head -30
(cd $B && VLLM_CUDA_SPEED=0 timeout 120 ./test_cuda_paged_fd) >$L/pfd.log 2>&1; echo "test_cuda_paged_fd exit $? $(grep -E 'PASSED|FAILED' $L/pfd.log | head -2 | tr '\n' ' ')"
say ncu
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
(cd $B && VLLM_TEST_DEC_ROWS=256 timeout 120 $NCU -k regex:k_flash_dec --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
    --section LaunchStats --section SchedulerStats ./test_cuda_attn_mixed) >$L/ncu.txt 2>&1
echo "ncu exit $?"; grep -vE "^\[|^==PROF==|^ *$|----" $L/ncu.txt | grep -E "Throughput|Duration|Stall|Occupancy|Warp Cycles|Issued|Eligible|Active Warps|Registers|Shared Memory|Block Limit|L1|L2|DRAM|Mem|One or More|No Eligible" | head -60
wait $MK
best=$(grep -E "speed: dec llama-8b +(64|256) rows" $L/mixed.log | $PY -c '
import re, sys
tot = {}
for line in sys.stdin:
    for cfg, us in re.findall(r" (\d+,\d+,\d+) +([0-9.]+) us", line):
        tot[cfg] = tot.get(cfg, 0.0) + float(us)
print(min(tot, key=tot.get) if tot else "32,3,4")')
say "bench: best configuration $best vs the default 32,3,4"
if [ "$best" != "32,3,4" ]; then
    for c in 64 256; do
        np=$(( c < 256 ? 2 * c : c ))
        for cfg in 32,3,4 $best 32,3,4 $best; do
            VLLM_CUDA_FLASH_DEC_CFG=$cfg ./$B/vllm bench --device cuda --model $M8 --num-prompts $np --input-len 1024 \
                --output-len 128 --concurrency $c --max-num-seqs $c --max-num-batched-tokens 8192 --gpu-memory-utilization 0.9 \
                >$L/bench_c${c}_$cfg.log 2>&1
            echo "conc $c cfg $cfg: $(grep -E 'Output token throughput|Mean TPOT' $L/bench_c${c}_$cfg.log | sed 's/  */ /g' | tr '\n' ';')"
        done
    done
fi
say done
