#!/usr/bin/env bash
# gpu_s13f.sh — session 13, cuda_gemv_xr.cu with its final defaults (R by
# format, loads through L1, Q8_0 left to d4) on the H200 (nvidia-h200,
# ~6 min; prebuilt vllm, quantize, test_cuda_gemv_xr, test_cuda_ops,
# test_cuda_mmq in bin.txz as gpu_s12b.sh; .wheels for gguf):
#   1. test_cuda_gemv_xr (all cases and the speed table), test_cuda_ops and
#      test_cuda_mmq (VLLM_CUDA_SPEED=0), memcheck of test_xr (default R);
#   2. the d2d copy rate (torch) for the roofline;
#   3. random Llama-3.1-8B Q4_K_M GGUF: batch-1 greedy decode (512-token
#      prompt + 256), xr vs d4 (VLLM_CUDA_GEMV_XR=0), two rounds, greedy
#      text compared; `vllm bench` 512-in / 128-out at c = 1 and 2;
#   4. Nsight Compute per-kernel time of its graphed decode steps (16-token
#      prompt, 3 tokens; tools/ncu_summary.py): where the rest of a GGUF
#      step goes.
#   OUT=$OUT bash scripts/gpu_s13f.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s13f
G=$L/rand-llama-8b
( $PY tools/make_random_gguf.py --shape llama-8b --qtype f16 --out $G-f16.gguf >$L/make.log 2>&1; echo "exit $?" >>$L/make.log ) &
gpu_bin
say tests
(cd bin && timeout 300 ./test_cuda_gemv_xr) >$L/test_cuda_gemv_xr.log 2>&1
echo "test_cuda_gemv_xr exit $? $(grep -E 'PASSED|FAILED' $L/test_cuda_gemv_xr.log | head -2 | tr '\n' ' ')"
grep -E "^xr|ERROR|LINE|did not run|Failure|speed: xr" $L/test_cuda_gemv_xr.log | cut -c1-220 | head -60
for t in test_cuda_ops test_cuda_mmq; do
    (cd bin && VLLM_CUDA_SPEED=0 timeout 240 ./$t) >$L/$t.log 2>&1
    echo "$t exit $? $(grep -E 'PASSED|FAILED' $L/$t.log | head -2 | tr '\n' ' ')"
done
grep -E "ERROR|LINE|FAILED" $L/test_cuda_ops.log $L/test_cuda_mmq.log | head
say memcheck
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
(cd bin && VLLM_TEST_ONLY=test_xr VLLM_TEST_XR_QUICK=1 timeout 300 $SAN --tool memcheck ./test_cuda_gemv_xr) >$L/memcheck.log 2>&1
echo "memcheck test_cuda_gemv_xr exit $? $(grep -E 'ERROR SUMMARY' $L/memcheck.log | tail -1)"
say d2d
d2d=$(gpu_d2d)
echo "d2d $d2d GB/s"
say "8B Q4_K_M"
while ! grep -q exit $L/make.log 2>/dev/null; do sleep 1; done; tail -1 $L/make.log
./bin/quantize $G-f16.gguf $G-q4_K_M.gguf q4_K_M --threads "$(nproc)" >$L/quant.log 2>&1 || { tail -3 $L/quant.log; exit 1; }
rm -f $G-f16.gguf
M=$G-q4_K_M.gguf
V=$($PY -c "import gguf; r = gguf.GGUFReader('$M'); print(len(r.fields['tokenizer.ggml.tokens'].data))")
ids=$($PY -c "import random; random.seed(0); print(','.join(str(random.randrange($V // 100, $V)) for _ in range(512)))")
bytes=$($PY scripts/gguf_step_bytes.py $M)
for r in 1 2; do
    for k in xr d4; do
        env $([ $k = d4 ] && echo VLLM_CUDA_GEMV_XR=0 || echo X=1) ./bin/vllm run --device cuda --model $M --prompt-ids "$ids" \
            --max-tokens 256 --ignore-eos --temperature 0 >$L/run_${k}_$r.out 2>$L/run_${k}_$r.err
        dec=$(rate decode <$L/run_${k}_$r.err)
        $PY -c "d, b, c = float('${dec:-0}'), $bytes, float('${d2d:-0}' or 0); r = c * 1e9 / b if c else 0
print(f'8B Q4_K_M round $r $k: batch-1 decode {d:.1f} tok/s; {b / 1e9:.3f} GB/step; d2d {c:.0f} GB/s -> roofline {r:.1f}; fraction {d / r if r else 0:.3f}')"
    done
done
cmp -s $L/run_xr_1.out $L/run_d4_1.out && echo "greedy text xr == d4" || echo "greedy text xr != d4"
for c in 1 2; do
    for k in xr d4; do
        env $([ $k = d4 ] && echo VLLM_CUDA_GEMV_XR=0 || echo X=1) ./bin/vllm bench --device cuda --model $M --num-prompts $((4 * c)) \
            --input-len 512 --output-len 128 --concurrency $c --max-num-seqs $c >$L/b_c${c}_$k.log 2>&1
    done
    echo "8B Q4_K_M bench c=$c: xr $(tp $L/b_c${c}_xr.log); d4 $(tp $L/b_c${c}_d4.log)"
done
say "ncu of the GGUF decode step"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
ids16=$(echo "$ids" | cut -d, -f1-16)
timeout 200 $NCU --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum --clock-control none \
    --graph-profiling node --csv --print-units base --launch-count 3000 ./bin/vllm run --device cuda --model $M \
    --prompt-ids "$ids16" --max-tokens 3 --ignore-eos --temperature 0 >$L/ncu.csv 2>$L/ncu.err
echo "ncu exit $?"
$PY tools/ncu_summary.py $L/ncu.csv | head -40
gzip -f $L/ncu.csv
say done
