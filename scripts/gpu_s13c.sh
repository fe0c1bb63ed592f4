#!/usr/bin/env bash
# gpu_s13c.sh — session 13: the first run of cuda_gemv_xr.cu (batch-1
# K-quant GEMV with x in registers) on the H200 (nvidia-h200; prebuilt
# vllm, quantize, test_cuda_gemv_xr, test_cuda_ops in bin.txz as
# gpu_s12b.sh):
#   1. test_cuda_gemv_xr (Q4_K / Q5_K / Q6_K vs a double reference and vs
#      d4, both R; then its speed table: 8B shapes at one row, R2 / R4 / d4
#      over distinct weight copies); test_cuda_ops (VLLM_CUDA_SPEED=0);
#      compute-sanitizer memcheck of test_xr;
#   2. the d2d copy rate (torch) for the roofline;
#   3. a random Llama-3.1-8B-shaped Q4_K_M GGUF: batch-1 greedy decode
#      (512-token prompt + 256), VLLM_CUDA_GEMV_XR = 2 / 4 / 0 (d4), two
#      rounds, as a fraction of the same-run roofline; greedy ids compared.
#   OUT=$OUT bash scripts/gpu_s13c.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s13c
G=$L/rand-llama-8b
( $PY tools/make_random_gguf.py --shape llama-8b --qtype f16 --out $G-f16.gguf >$L/make.log 2>&1; echo "exit $?" >>$L/make.log ) &
gpu_bin
say tests
(cd bin && timeout 300 ./test_cuda_gemv_xr) >$L/test_cuda_gemv_xr.log 2>&1
echo "test_cuda_gemv_xr exit $? $(grep -E 'PASSED|FAILED' $L/test_cuda_gemv_xr.log | head -2 | tr '\n' ' ')"
grep -E "^xr|ERROR|LINE|did not run|Failure|speed: xr" $L/test_cuda_gemv_xr.log | cut -c1-200 | head -60
(cd bin && VLLM_CUDA_SPEED=0 timeout 240 ./test_cuda_ops) >$L/test_cuda_ops.log 2>&1
echo "test_cuda_ops exit $? $(grep -E 'PASSED|FAILED' $L/test_cuda_ops.log | head -2 | tr '\n' ' ')"
grep -E "ERROR|LINE|FAILED" $L/test_cuda_ops.log | head
say memcheck
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
(cd bin && VLLM_TEST_ONLY=test_xr timeout 240 $SAN --tool memcheck ./test_cuda_gemv_xr) >$L/memcheck.log 2>&1
echo "memcheck test_cuda_gemv_xr exit $? $(grep -E 'ERROR SUMMARY' $L/memcheck.log | tail -1)"
say d2d
d2d=$(gpu_d2d)
echo "d2d $d2d GB/s"
say "gguf 8B Q4_K_M"
while ! grep -q exit $L/make.log 2>/dev/null; do sleep 1; done; tail -1 $L/make.log
./bin/quantize $G-f16.gguf $G-q4_K_M.gguf q4_K_M --threads "$(nproc)" >$L/quant.log 2>&1 || { tail -3 $L/quant.log; exit 1; }
rm -f $G-f16.gguf
V=$($PY -c "import gguf; r = gguf.GGUFReader('$G-q4_K_M.gguf'); print(len(r.fields['tokenizer.ggml.tokens'].data))")
ids=$($PY -c "import random; random.seed(0); print(','.join(str(random.randrange($V // 100, $V)) for _ in range(512)))")
bytes=$($PY scripts/gguf_step_bytes.py $G-q4_K_M.gguf)
for r in 1 2; do
    for k in 2 4 0; do
        VLLM_CUDA_GEMV_XR=$k ./bin/vllm run --device cuda --model $G-q4_K_M.gguf --prompt-ids "$ids" --max-tokens 256 \
            --ignore-eos --temperature 0 >$L/run_${k}_$r.out 2>$L/run_${k}_$r.err
        dec=$(rate decode <$L/run_${k}_$r.err)
        $PY -c "d, b, c = float('${dec:-0}'), $bytes, float('${d2d:-0}' or 0); r = c * 1e9 / b if c else 0
print(f'round $r XR=$k: 8B Q4_K_M batch-1 decode {d:.1f} tok/s; {b / 1e9:.3f} GB/step; roofline {r:.1f}; fraction {d / r if r else 0:.3f}')"
    done
done
for k in 4 0; do cmp -s $L/run_2_1.out $L/run_${k}_1.out && echo "greedy text XR=2 == XR=$k" || echo "greedy text XR=2 != XR=$k"; done
say done
