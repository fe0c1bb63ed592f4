#!/usr/bin/env bash
# gpu_s13a.sh — prepared in session 12 for session 13 (nvidia-h200, ~2 min):
# Nsight Compute of the GGUF kernels where they fall short (docs/STATUS-HISTORY.md
# "After session 12", item 1). Prebuilt binaries as gpu_s12b.sh: build
# test_cuda_mmq here (build-cuda), strip it into a folder, `tar cJf
# bin.txz .` there, and carry a snapshot with scripts/, .deps (with
# libcmocka0) and bin.txz.
#   1. the dp4a GEMV (k_gemv_d4) at 1 row, f32 x (VLLM_TEST_MMQ_ONE
#      <type>,<shape>,4: its first launch is the 1-row call): 8B gate|up
#      Q4_K (1,2,4), down Q4_K (1,3,4), down Q6_K (2,3,4);
#   2. the bf16 tile kernel (k_mmq_bf) at 16 rows, gate|up Q4_K (1,2,0:
#      41 launches per row count, 16 rows is the fifth: skip 164).
# Sections: speed of light, memory workload, occupancy, scheduler and warp
# state statistics, source counters (the stall reasons by SASS line).
#   OUT=$OUT bash scripts/gpu_s13a.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s13a
gpu_bin
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
prof() { # name kernel-regex one skip
    (cd bin && VLLM_TEST_ONLY=test_mmq_speed VLLM_TEST_MMQ_ONE=$3 timeout 200 $NCU -k regex:$2 --launch-skip $4 \
        --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
        --section SchedulerStats --section WarpStateStats --section SourceCounters ./test_cuda_mmq) >$L/ncu_$1.log 2>&1
    echo "ncu $1 exit $?"
    grep -E "void k_|Duration|DRAM Throughput|Memory Throughput|Executed Ipc A|Registers Per|Achieved Active Warps|Issued Warp|Eligible Warps|Dynamic Shared|Stall|stall" \
        $L/ncu_$1.log | cut -c1-160 | head -40
}
say "d4 at 1 row"
prof d4_q4k_gate_up k_gemv_d4 1,2,4 0
prof d4_q4k_down k_gemv_d4 1,3,4 0
prof d4_q6k_down k_gemv_d4 2,3,4 0
say "bf16 tile kernel at 16 rows"
prof bf_q4k_gate_up_16 k_mmq_bf 1,2,0 164
say done
