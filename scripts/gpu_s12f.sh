#!/usr/bin/env bash
# gpu_s12f.sh — session 12: test_cuda_mmq with its speed table from 1 row
# (the bf16 kernel's 8-token tile vs the decode GEMVs over f32 rows, on the
# 8B's shapes) and memcheck of its correctness tests. Prebuilt binaries
# (bin.txz) as gpu_s12b.sh.
#   OUT=$OUT bash scripts/gpu_s12f.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s12f
mkdir -p bin && tar xJf bin.txz -C bin
[ -f /opt/deps/usr/lib/x86_64-linux-gnu/libcmocka.so.0 ] || for f in .deps/libcmocka0*.deb; do dpkg -x "$f" /opt/deps; done
say tests
(cd bin && timeout 300 ./test_cuda_mmq) >$L/test_cuda_mmq.log 2>&1
echo "test_cuda_mmq exit $? $(grep -E 'PASSED|FAILED' $L/test_cuda_mmq.log | head -2 | tr '\n' ' ')"
grep -E "ERROR|LINE|did not run|wrong kernel" $L/test_cuda_mmq.log | head
grep -E "^mmq" $L/test_cuda_mmq.log | sort -t: -k2 -g | tail -2
grep "speed: mmq" $L/test_cuda_mmq.log | sed 's/ us ( *[0-9]* GB\/s)//g' | cut -c1-460
say memcheck
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
(cd bin && VLLM_CUDA_SPEED=0 timeout 200 $SAN --tool memcheck ./test_cuda_mmq) >$L/memcheck.log 2>&1
echo "memcheck test_cuda_mmq exit $? $(grep -E 'ERROR SUMMARY' $L/memcheck.log | tail -1)"
say done
