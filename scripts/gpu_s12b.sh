#!/usr/bin/env bash
# gpu_s12b.sh — session 12, the first run of cuda_mmq.cu (GGUF MATMUL on
# int8 tensor cores above 8 rows) on the H200 (nvidia-h200; no build
# there: vllm, quantize, test_cuda_mmq, test_cuda_gemm and test_cuda_ops
# built here in build-cuda, stripped, carried as bin.txz in a snapshot with
# scripts/, tools/make_random_gguf.py, .deps and .wheels):
#   1. test_cuda_mmq (every format against a double reference, three split
#      settings, graph replay after workspace growth, then the speed table
#      vs cuBLAS over the dequantized copy and vs bf16 W); test_cuda_gemm
#      and test_cuda_ops (VLLM_CUDA_SPEED=0: the workspace refactor, the
#      cuda_gemm hook); compute-sanitizer memcheck of test_cuda_mmq;
#   2. a random Llama-3.1-8B-shaped GGUF (make_random_gguf --shape llama-8b
#      f16, our quantize to Q4_K_M): `vllm bench` 512-in / 128-out, one wave
#      at c = 16, 32, 64, with mmq (default) and VLLM_CUDA_MMQ=0.
#   OUT=$OUT bash scripts/gpu_s12b.sh   (VLLM_S12B_GGUF=0: step 1 only)
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s12b
G=$L/rand-llama-8b
[ "${VLLM_S12B_GGUF:-1}" = 0 ] || ( $PY tools/make_random_gguf.py --shape llama-8b --qtype f16 --out $G-f16.gguf >$L/make.log 2>&1; echo "exit $?" >>$L/make.log ) &
mkdir -p bin && tar xJf bin.txz -C bin
# the test binaries link cmocka (.deps/libcmocka0*.deb; a warm machine may have unpacked .deps without it)
[ -f /opt/deps/usr/lib/x86_64-linux-gnu/libcmocka.so.0 ] || for f in .deps/libcmocka0*.deb; do dpkg -x "$f" /opt/deps; done
say tests
for t in test_cuda_mmq test_cuda_gemm test_cuda_ops; do
    (cd bin && VLLM_CUDA_SPEED=$([ $t = test_cuda_mmq ] && echo 1 || echo 0) timeout 240 ./$t) >$L/$t.log 2>&1
    echo "$t exit $? $(grep -E 'PASSED|FAILED' $L/$t.log | head -2 | tr '\n' ' ')"
done
grep -E "ERROR|LINE|did not run|FAILED" $L/*.log | head -20
grep -E "^mmq" $L/test_cuda_mmq.log | sort -t: -k2 -g | tail -4
grep "speed: mmq" $L/test_cuda_mmq.log | cut -c1-400
say memcheck
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
(cd bin && VLLM_CUDA_SPEED=0 timeout 200 $SAN --tool memcheck ./test_cuda_mmq) >$L/memcheck.log 2>&1
echo "memcheck test_cuda_mmq exit $? $(grep -E 'ERROR SUMMARY' $L/memcheck.log | tail -1)"
[ "${VLLM_S12B_GGUF:-1}" = 0 ] && { say done; exit 0; }
say "gguf 8B Q4_K_M"
while ! grep -q exit $L/make.log 2>/dev/null; do sleep 1; done; tail -1 $L/make.log
./bin/quantize $G-f16.gguf $G-q4_K_M.gguf q4_K_M --threads "$(nproc)" >$L/quant.log 2>&1 || { tail -3 $L/quant.log; exit 1; }
rm -f $G-f16.gguf
for c in 16 32 64; do
    for k in new old; do
        env $([ $k = old ] && echo VLLM_CUDA_MMQ=0 || echo X=1) ./bin/vllm bench --device cuda --model $G-q4_K_M.gguf \
            --num-prompts $c --input-len 512 --output-len 128 --concurrency $c --max-num-seqs $c \
            --max-num-batched-tokens 16384 >$L/b_c${c}_$k.log 2>&1
    done
    echo "8B Q4_K_M conc $c: mmq $(tp $L/b_c${c}_new.log); copy $(tp $L/b_c${c}_old.log)"
done
say done
