#!/usr/bin/env bash
# gpu_s12c.sh — session 12: cuda_mmq.cu after its first run (signed-nibble
# bit trick instead of __vsub4, the unit loop unrolled by 2): test_cuda_mmq
# (correctness, then the speed table), and Nsight Compute of k_mmq_bf (bf16 x) on the
# 8B's gate|up in Q4_0 at 16 and 64 rows (VLLM_TEST_MMQ_ONE=0,2: 41
# launches per row count in the speed test, so 16 rows = launch 0, 64 =
# launch 82). Prebuilt binaries (bin.txz) as gpu_s12b.sh.
#   OUT=$OUT bash scripts/gpu_s12c.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s12c
mkdir -p bin && tar xJf bin.txz -C bin
[ -f /opt/deps/usr/lib/x86_64-linux-gnu/libcmocka.so.0 ] || for f in .deps/libcmocka0*.deb; do dpkg -x "$f" /opt/deps; done
say tests
(cd bin && timeout 240 ./test_cuda_mmq) >$L/test_cuda_mmq.log 2>&1
echo "test_cuda_mmq exit $? $(grep -E 'PASSED|FAILED' $L/test_cuda_mmq.log | head -2 | tr '\n' ' ')"
grep -E "ERROR|LINE|did not run" $L/test_cuda_mmq.log | head
grep -E "^mmq" $L/test_cuda_mmq.log | sort -t: -k2 -g | tail -2
grep "speed: mmq" $L/test_cuda_mmq.log | sed 's/ us ( *[0-9]* GB\/s)//g' | cut -c1-300
say ncu
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for skip in 0 82; do
    (cd bin && VLLM_TEST_ONLY=test_mmq_speed VLLM_TEST_MMQ_ONE=0,2 timeout 200 $NCU -k regex:k_mmq --launch-skip $skip \
        --launch-count 1 --section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats \
        --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis ./test_cuda_mmq) \
        >$L/ncu_$skip.log 2>&1
    echo "ncu skip $skip exit $?"
    grep -E "k_mmq|Duration|Throughput|Registers|Achieved Occupancy|Theoretical Occupancy|Block Limit|Issued Warp|No Eligible|Active Warps|Eligible Warps|Warp Cycles Per Issued|Executed Ipc|Stall|Dynamic Shared|Waves" $L/ncu_$skip.log | head -60
done
say done
