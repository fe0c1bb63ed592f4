#!/usr/bin/env bash
# gpu_s18i.sh — session 18, call 9 (nvidia-h200, ~2 min): why k_gemm_glu
# stays at ~630 TFLOP/s on the 8B's gate|up (2048 x 4096 -> 2 x 14336)
# where cuBLAS's nvjet kernel + k_glu runs at ~740 (the GEMM alone ~820):
# Nsight Compute (--set full, clocks left to the driver, caches untouched)
# of one k_gemm_glu launch (mode 3: wait 0) and of the nvjet kernels of one
# layer, in the 8B engine's prefill; the throughput breakdowns side by side
# (tensor pipe, shared memory, L2, DRAM, issue, stall reasons).
# Make (from /work/main on s18-n256, clean):
#   bash scripts/gpu_snap.sh s18i vllm
#   run carry [".gpu-snap-s18i"] "cd .gpu-snap-s18i && OUT=$OUT bash scripts/gpu_s18i.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s18i
gpu_bin
gpu_models
gpu_model_wait 8
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
ids=$($PY -c "import json, random; random.seed(1); V = json.load(open('$M8/config.json'))['vocab_size'];
print(','.join(str(random.randrange(V // 100, min(V, 100000))) for _ in range(2048)))")
prof() { # NAME MODE REGEX SKIP COUNT
    say "ncu $1"
    VLLM_CUDA_GEMM_GLU=$2 timeout 200 $NCU --kernel-name-base demangled -k regex:"$3" --launch-skip $4 --launch-count $5 \
        --cache-control none --clock-control none --set full -o $L/$1 -f ./bin/vllm run --device cuda --model $M8 \
        --prompt-ids "$ids" --max-tokens 1 --ignore-eos --temperature 0 >$L/ncu_run_$1.txt 2>&1
    echo "ncu exit $?"
    $NCU --import $L/$1.ncu-rep --page details >$L/$1.txt 2>&1
    grep -E "^  [a-zA-Z_]+|Duration|Throughput|Pipe|Issue Slots|Issued Ipc|Warp Cycles Per Issued|L1/TEX Hit|L2 Hit|Shared Memory|Bank|Eligible|Active Warps|No Eligible|Registers|Block Limit|Mem Busy|Max Bandwidth|Mem Pipes" $L/$1.txt | cut -c1-150 | head -60
    $NCU --import $L/$1.ncu-rep --page raw --csv 2>/dev/null | $PY -c "
import csv, sys
r = list(csv.reader(sys.stdin))
h, u = r[0], r[1]
want = ('sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active', 'sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_active',
        'sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_active', 'l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed',
        'lts__t_sectors.avg.pct_of_peak_sustained_elapsed', 'lts__throughput.avg.pct_of_peak_sustained_elapsed', 'sm__throughput.avg.pct_of_peak_sustained_elapsed',
        'smsp__cycles_active.avg.pct_of_peak_sustained_elapsed', 'sm__cycles_active.avg', 'gpc__cycles_elapsed.max', 'sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active',
        'gpu__time_duration.sum', 'l1tex__m_xbar2l1tex_read_bytes.sum.per_second', 'lts__t_bytes.sum.per_second', 'dram__bytes.sum.per_second')
for row in r[2:]:
    print('--', row[h.index('Kernel Name')][:70] if 'Kernel Name' in h else '')
    for k in h:
        if k in want or 'gmma' in k and 'pct' in k:
            print('   ', k, row[h.index(k)], u[h.index(k)])
" | head -60
}
prof ggw0 3 "k_gemm_glu" 5 1
prof nvjet 0 "nvjet" 12 4
say done
