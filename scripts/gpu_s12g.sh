#!/usr/bin/env bash
# gpu_s12g.sh — session 12, last call: GGUF decode steps of 3+ rows on the
# tensor-core kernels (cuda_gemv_rows: bf16 rows from 3 over GGUF weights,
# VLLM_CUDA_MMQ_MIN_N; before: the dp4a GEMV to 8 rows). Prebuilt binaries
# (bin.txz) as gpu_s12b.sh:
#   1. test_cuda_gemm (act_dtype's new rule), test_cuda_ops, test_cuda_mmq,
#      test_cuda_model (VLLM_CUDA_SPEED=0);
#   2. a random Llama-3.1-8B-shaped GGUF (Q4_K_M by our quantize): `vllm
#      bench` 512-in / 128-out, one wave at c = 1, 2, 4, 8, 16, new rule vs
#      VLLM_CUDA_MMQ_MIN_N=9 (the GEMV to 8 rows, as before).
#   OUT=$OUT bash scripts/gpu_s12g.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s12g
G=$L/rand-llama-8b
( $PY tools/make_random_gguf.py --shape llama-8b --qtype f16 --out $G-f16.gguf >$L/make.log 2>&1; echo "exit $?" >>$L/make.log ) &
mkdir -p bin && tar xJf bin.txz -C bin
[ -f /opt/deps/usr/lib/x86_64-linux-gnu/libcmocka.so.0 ] || for f in .deps/libcmocka0*.deb; do dpkg -x "$f" /opt/deps; done
# the test binaries look for tests/fixtures under the source path they were built in
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
say tests
for t in test_cuda_gemm test_cuda_ops test_cuda_mmq test_cuda_model; do
    (cd bin && VLLM_CUDA_SPEED=0 timeout 200 ./$t) >$L/$t.log 2>&1
    echo "$t exit $? $(grep -E 'PASSED|FAILED' $L/$t.log | head -2 | tr '\n' ' ')"
done
grep -E "ERROR|LINE|did not run|wrong kernel" $L/*.log | head
say "gguf 8B Q4_K_M"
while ! grep -q exit $L/make.log 2>/dev/null; do sleep 1; done; tail -1 $L/make.log
./bin/quantize $G-f16.gguf $G-q4_K_M.gguf q4_K_M --threads "$(nproc)" >$L/quant.log 2>&1 || { tail -3 $L/quant.log; exit 1; }
rm -f $G-f16.gguf
for c in 1 2 4 8 16; do
    for k in new old; do
        env $([ $k = old ] && echo VLLM_CUDA_MMQ_MIN_N=9 || echo X=1) ./bin/vllm bench --device cuda --model $G-q4_K_M.gguf \
            --num-prompts $c --input-len 512 --output-len 128 --concurrency $c --max-num-seqs $c \
            --max-num-batched-tokens 16384 >$L/b_c${c}_$k.log 2>&1
    done
    echo "8B Q4_K_M conc $c: new $(tp $L/b_c${c}_new.log); old $(tp $L/b_c${c}_old.log)"
done
say done
