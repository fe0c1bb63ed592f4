#!/usr/bin/env bash
# gpu_s14c.sh — session 14, call 2 (nvidia-h200, ~5 min; prebuilt vllm,
# quantize, test_cuda_gemv_xr, test_cuda_ops of branch s13-xr2 after its
# rework: `bash scripts/gpu_snap.sh c vllm quantize test_cuda_gemv_xr
# test_cuda_ops`, run carry [".gpu-snap-c"] "cd .gpu-snap-c && OUT=$OUT
# bash scripts/gpu_s14c.sh"). Call 1 (gpu_s14a.sh) measured the branch as
# prepared: two x rows a win (8B Q4_K_M bench c = 2 470 vs 367 tok/s),
# MATMUL3 a win (371 vs 362 tok/s), the double-buffered R 2 a loss (336),
# but the one-row kernel 3% slower than session 13's (362 vs 372: the
# segment selects in every row address). Reworked: segments a template
# parameter (NS = 1 compiles to session 13's code but for register
# numbering), the double-buffered variant removed, two rows and MATMUL3
# on by default ("o" / "t" turn them off).
#   1. test_cuda_gemv_xr (cases; the speed table), test_cuda_ops,
#      memcheck of test_xr (VLLM_TEST_XR_QUICK);
#   2. 8B Q4_K_M batch-1 greedy decode 512 + 256, alternated twice:
#      default (MATMUL3), "t" (three launches: session 13's kernel),
#      "0" (d4); greedy text compared;
#   3. `vllm bench` 512-in / 128-out c = 2 default vs "o" (two rows on d4),
#      and c = 1, two rounds.
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s14c
G=$L/rand-llama-8b
( $PY tools/make_random_gguf.py --shape llama-8b --qtype f16 --out $G-f16.gguf >$L/make.log 2>&1; echo "exit $?" >>$L/make.log ) &
gpu_bin
say tests
(cd bin && timeout 300 ./test_cuda_gemv_xr) >$L/test_cuda_gemv_xr.log 2>&1
echo "test_cuda_gemv_xr exit $? $(grep -E 'PASSED|FAILED' $L/test_cuda_gemv_xr.log | head -2 | tr '\n' ' ')"
grep -E "ERROR|LINE|did not run|Failure|xr launches|speed: xr" $L/test_cuda_gemv_xr.log | cut -c1-220 | head -50
(cd bin && VLLM_CUDA_SPEED=0 timeout 240 ./test_cuda_ops) >$L/test_cuda_ops.log 2>&1
echo "test_cuda_ops exit $? $(grep -E 'PASSED|FAILED' $L/test_cuda_ops.log | head -2 | tr '\n' ' ')"
say memcheck
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
(cd bin && VLLM_TEST_ONLY=test_xr VLLM_TEST_XR_QUICK=1 timeout 300 $SAN --tool memcheck ./test_cuda_gemv_xr) >$L/memcheck.log 2>&1
echo "memcheck test_cuda_gemv_xr exit $? $(grep -E 'ERROR SUMMARY' $L/memcheck.log | tail -1)"
say "8B Q4_K_M"
while ! grep -q exit $L/make.log 2>/dev/null; do sleep 1; done; tail -1 $L/make.log
./bin/quantize $G-f16.gguf $G-q4_K_M.gguf q4_K_M --threads "$(nproc)" >$L/quant.log 2>&1 || { tail -3 $L/quant.log; exit 1; }
rm -f $G-f16.gguf
M=$G-q4_K_M.gguf
V=$($PY -c "import gguf; r = gguf.GGUFReader('$M'); print(len(r.fields['tokenizer.ggml.tokens'].data))")
ids=$($PY -c "import random; random.seed(0); print(','.join(str(random.randrange($V // 100, $V)) for _ in range(512)))")
for k in dflt t 0 dflt t 0; do
    VLLM_CUDA_GEMV_XR=$([ $k = dflt ] || echo $k) ./bin/vllm run --device cuda --model $M --prompt-ids "$ids" \
        --max-tokens 256 --ignore-eos --temperature 0 >$L/run_$k.out 2>$L/run_$k.err
    echo "8B Q4_K_M batch-1 decode $k: $(rate decode <$L/run_$k.err) tok/s"
done
for k in t 0; do cmp -s $L/run_dflt.out $L/run_$k.out && echo "greedy text dflt == $k" || echo "greedy text dflt != $k"; done
for r in 1 2; do
    for k in dflt o; do
        VLLM_CUDA_GEMV_XR=$([ $k = dflt ] || echo $k) ./bin/vllm bench --device cuda --model $M --num-prompts 8 \
            --input-len 512 --output-len 128 --concurrency 2 --max-num-seqs 2 >$L/b_c2_${k}_$r.log 2>&1
    done
    ./bin/vllm bench --device cuda --model $M --num-prompts 4 --input-len 512 --output-len 128 --concurrency 1 \
        --max-num-seqs 1 >$L/b_c1_$r.log 2>&1
    echo "8B Q4_K_M bench round $r: c=2 $(tp $L/b_c2_dflt_$r.log); c=2 two rows on d4 $(tp $L/b_c2_o_$r.log); c=1 $(tp $L/b_c1_$r.log)"
done
say done
