#!/usr/bin/env bash
# gpu_s12d.sh — session 12: cuda_mmq_bf.cu with one-row-per-thread W copies
# (mq_load_w), fixed token/vector x copies, the wave-filling split rule,
# Q8_0 on the int8 kernel, 2-stage 32-token tiles: test_cuda_mmq
# (correctness on both kernels, graph replay, the speed table with the
# tile / stage alternatives), memcheck of its correctness tests, and
# Nsight Compute of the bf16 kernel on gate|up Q4_0 at 16 and 64 rows.
# Prebuilt binaries (bin.txz) as gpu_s12b.sh.
#   OUT=$OUT bash scripts/gpu_s12d.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s12d
mkdir -p bin && tar xJf bin.txz -C bin
[ -f /opt/deps/usr/lib/x86_64-linux-gnu/libcmocka.so.0 ] || for f in .deps/libcmocka0*.deb; do dpkg -x "$f" /opt/deps; done
say tests
(cd bin && timeout 300 ./test_cuda_mmq) >$L/test_cuda_mmq.log 2>&1
echo "test_cuda_mmq exit $? $(grep -E 'PASSED|FAILED' $L/test_cuda_mmq.log | head -2 | tr '\n' ' ')"
grep -E "ERROR|LINE|did not run|wrong kernel" $L/test_cuda_mmq.log | head
grep -E "^mmq" $L/test_cuda_mmq.log | sort -t: -k2 -g | tail -2
grep "speed: mmq" $L/test_cuda_mmq.log | sed 's/ us ( *[0-9]* GB\/s)//g' | cut -c1-420
say memcheck
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
(cd bin && VLLM_CUDA_SPEED=0 timeout 200 $SAN --tool memcheck ./test_cuda_mmq) >$L/memcheck.log 2>&1
echo "memcheck test_cuda_mmq exit $? $(grep -E 'ERROR SUMMARY' $L/memcheck.log | tail -1)"
say ncu
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for skip in 0 82; do
    (cd bin && VLLM_TEST_ONLY=test_mmq_speed VLLM_TEST_MMQ_ONE=0,2 timeout 200 $NCU -k regex:k_mmq --launch-skip $skip \
        --launch-count 1 --section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats \
        --section WarpStateStats ./test_cuda_mmq) >$L/ncu_$skip.log 2>&1
    echo "ncu skip $skip exit $?"
    grep -E "void k_mmq|Duration|DRAM Throughput|Executed Ipc A|Registers Per|Achieved Active Warps|Issued Warp|Eligible Warps|Dynamic Shared" $L/ncu_$skip.log | cut -c1-140 | head -20
done
say done
