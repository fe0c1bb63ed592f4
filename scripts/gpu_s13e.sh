#!/usr/bin/env bash
# gpu_s13e.sh — session 13, cuda_gemv_xr.cu as the batch-1 GGUF GEMV
# (nvidia-h200, ~7 min; prebuilt vllm, quantize, test_cuda_gemv_xr,
# test_cuda_ops in bin.txz as gpu_s12b.sh; .wheels for gguf):
#   1. test_cuda_gemv_xr (six formats vs exact and vs d4; speed table),
#      test_cuda_ops (VLLM_CUDA_SPEED=0), memcheck of test_xr (default);
#   2. the d2d copy rate (torch) for the rooflines;
#   3. random Llama-3.1-8B Q4_K_M and Llama-1B-shaped Q8_0 / Q4_0 GGUFs:
#      batch-1 greedy decode (512-token prompt + 256), xr (default) vs d4
#      (VLLM_CUDA_GEMV_XR=0), two rounds, as fractions of the same-run
#      roofline; greedy text compared.
#   OUT=$OUT bash scripts/gpu_s13e.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s13e
G=$L/rand-llama-8b
( $PY tools/make_random_gguf.py --shape llama-8b --qtype f16 --out $G-f16.gguf >$L/make.log 2>&1; echo "exit $?" >>$L/make.log ) &
( for q in q8_0 q4_0; do $PY tools/make_random_gguf.py --shape llama-1b --qtype $q --out $L/rand-llama-1b-$q.gguf; done \
    >$L/make1b.log 2>&1; echo "exit $?" >>$L/make1b.log ) &
gpu_bin
say tests
(cd bin && timeout 300 ./test_cuda_gemv_xr) >$L/test_cuda_gemv_xr.log 2>&1
echo "test_cuda_gemv_xr exit $? $(grep -E 'PASSED|FAILED' $L/test_cuda_gemv_xr.log | head -2 | tr '\n' ' ')"
grep -E "^xr|ERROR|LINE|did not run|Failure|speed: xr" $L/test_cuda_gemv_xr.log | cut -c1-220 | head -60
(cd bin && VLLM_CUDA_SPEED=0 timeout 240 ./test_cuda_ops) >$L/test_cuda_ops.log 2>&1
echo "test_cuda_ops exit $? $(grep -E 'PASSED|FAILED' $L/test_cuda_ops.log | head -2 | tr '\n' ' ')"
grep -E "ERROR|LINE|FAILED" $L/test_cuda_ops.log | head
say memcheck
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
(cd bin && VLLM_TEST_ONLY=test_xr VLLM_TEST_XR_QUICK=1 timeout 300 $SAN --tool memcheck ./test_cuda_gemv_xr) >$L/memcheck.log 2>&1
echo "memcheck test_cuda_gemv_xr exit $? $(grep -E 'ERROR SUMMARY' $L/memcheck.log | tail -1)"
say d2d
d2d=$(gpu_d2d)
echo "d2d $d2d GB/s"
dec_ab() { # label model
    local M=$2 V ids bytes
    V=$($PY -c "import gguf; r = gguf.GGUFReader('$M'); print(len(r.fields['tokenizer.ggml.tokens'].data))")
    ids=$($PY -c "import random; random.seed(0); print(','.join(str(random.randrange($V // 100, $V)) for _ in range(512)))")
    bytes=$($PY scripts/gguf_step_bytes.py $M)
    for r in 1 2; do
        for k in d 0; do
            env $([ $k = 0 ] && echo VLLM_CUDA_GEMV_XR=0 || echo X=1) ./bin/vllm run --device cuda --model $M --prompt-ids "$ids" \
                --max-tokens 256 --ignore-eos --temperature 0 >$L/run_$1_${k}_$r.out 2>$L/run_$1_${k}_$r.err
            dec=$(rate decode <$L/run_$1_${k}_$r.err)
            $PY -c "d, b, c = float('${dec:-0}'), $bytes, float('${d2d:-0}' or 0); r = c * 1e9 / b if c else 0
print(f'$1 round $r $([ $k = 0 ] && echo d4 || echo xr): batch-1 decode {d:.1f} tok/s; {b / 1e9:.3f} GB/step; roofline {r:.1f}; fraction {d / r if r else 0:.3f}')"
        done
    done
    cmp -s $L/run_$1_d_1.out $L/run_$1_0_1.out && echo "$1 greedy text xr == d4" || echo "$1 greedy text xr != d4"
}
say "1B Q8_0 / Q4_0"
while ! grep -q exit $L/make1b.log 2>/dev/null; do sleep 1; done; tail -1 $L/make1b.log
for q in q8_0 q4_0; do dec_ab 1b-$q $L/rand-llama-1b-$q.gguf; done
say "8B Q4_K_M"
while ! grep -q exit $L/make.log 2>/dev/null; do sleep 1; done; tail -1 $L/make.log
./bin/quantize $G-f16.gguf $G-q4_K_M.gguf q4_K_M --threads "$(nproc)" >$L/quant.log 2>&1 || { tail -3 $L/quant.log; exit 1; }
rm -f $G-f16.gguf
dec_ab 8b-q4_K_M $G-q4_K_M.gguf
say done
