#!/usr/bin/env bash
# gpu_s13d.sh — session 13, second run of cuda_gemv_xr.cu (nvidia-h200,
# ~2 min; prebuilt test_cuda_gemv_xr in bin.txz as gpu_s12b.sh): x now
# quantized by the block into shared memory (one L2 round trip), loads
# through L1 as an option ("l").
#   1. test_cuda_gemv_xr: cases (R 2 / 4 / 2l vs exact and vs d4) and the
#      speed table (R2, R4, R2l, R4l, d4);
#   2. Nsight Compute of k_gemv_xr: Q4_K gate|up R4, Q4_K wo R4, Q6_K head
#      R2 (stall reasons by SASS line).
#   OUT=$OUT bash scripts/gpu_s13d.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s13d
gpu_bin
say tests
(cd bin && timeout 300 ./test_cuda_gemv_xr) >$L/test_cuda_gemv_xr.log 2>&1
echo "test_cuda_gemv_xr exit $? $(grep -E 'PASSED|FAILED' $L/test_cuda_gemv_xr.log | head -2 | tr '\n' ' ')"
grep -E "^xr|ERROR|LINE|did not run|Failure|speed: xr" $L/test_cuda_gemv_xr.log | cut -c1-220 | head -60
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
prof() { # name one
    (cd bin && VLLM_TEST_ONLY=test_xr_speed VLLM_TEST_XR_ONE=$2 timeout 200 $NCU -k regex:k_gemv_xr --launch-skip 20 \
        --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
        --section SchedulerStats --section WarpStateStats --section SourceCounters --section LaunchStats ./test_cuda_gemv_xr) >$L/ncu_$1.log 2>&1
    echo "ncu $1 exit $?"
    grep -E "void k_|Duration|DRAM Throughput|L1/TEX Cache|L2 Cache Throughput|Executed Ipc A|Registers Per|Achieved Active Warps|Issued Warp|Eligible Warps|Stall|stall|Grid Size|Waves" \
        $L/ncu_$1.log | cut -c1-160 | head -30
}
say ncu
prof q4k_gate_up_r4 0,2,1
prof q4k_wo_r4 0,1,1
prof q6k_head_r2 2,4,0
say done
