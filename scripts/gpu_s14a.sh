#!/usr/bin/env bash
# gpu_s14a.sh — prepared in session 13 on branch s13-xr2 (nvidia-h200,
# ~6 min; prebuilt vllm, quantize, test_cuda_gemv_xr, test_cuda_ops,
# test_cuda_mmq of the branch in bin.txz as gpu_s12b.sh; .wheels for gguf):
# cuda_gemv_xr.cu for calls of two x rows (VLLM_CUDA_GEMV_XR=b; batched
# decode at 2 requests, which d4 took at ~2x the one-row step: 8B Q4_K_M
# `vllm bench` c = 2 365 tok/s, TPOT 5.25 ms vs c = 1's 2.69).
#   1. test_cuda_gemv_xr (the one-row cases as merged, the two-row cases
#      "ab" vs exact and vs d4; the speed table with n = 2 columns),
#      test_cuda_ops and test_cuda_mmq (VLLM_CUDA_SPEED=0), memcheck of
#      test_xr (VLLM_TEST_XR_QUICK: default and two rows);
#   2. 8B Q4_K_M: batch-1 decode (the NB template changed the one-row SASS:
#      compare with session 13's 372 tok/s and d4's 284 in the same run;
#      also "d": R 2 with two register sets, the next step's W in flight,
#      and "q": MATMUL3, q and k (Q4_K) in one launch with v (Q6_K) in
#      another where the GGUF types differ, 16 of the 32 layers),
#      then `vllm bench` 512-in / 128-out at c = 2 with and without "b",
#      two rounds;
#   3. Nsight Compute of the merged kernel (Q4_K gate|up, R 4, through L1):
#      stall reasons by SASS line, for the next step past 3.16 TB/s.
# Make "b" the default (xr_mode) only if the cases pass and c = 2 is faster
# in both rounds, "d" (per format, from the table's double-buffered column)
# only where it wins the table and the decode, "q" if it wins the decode
# in both rounds; merge the branch only if the one-row decode did not get
# slower. The branch also adds the MATMUL3 op (runtime, model: CPU tests
# pass through its three-MATMUL fallback).
#   OUT=$OUT bash scripts/gpu_s14a.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s14a
G=$L/rand-llama-8b
( $PY tools/make_random_gguf.py --shape llama-8b --qtype f16 --out $G-f16.gguf >$L/make.log 2>&1; echo "exit $?" >>$L/make.log ) &
gpu_bin
say tests
(cd bin && timeout 300 ./test_cuda_gemv_xr) >$L/test_cuda_gemv_xr.log 2>&1
echo "test_cuda_gemv_xr exit $? $(grep -E 'PASSED|FAILED' $L/test_cuda_gemv_xr.log | head -2 | tr '\n' ' ')"
grep -E "^xr|ERROR|LINE|did not run|Failure|speed: xr" $L/test_cuda_gemv_xr.log | cut -c1-240 | head -70
for t in test_cuda_ops test_cuda_mmq; do
    (cd bin && VLLM_CUDA_SPEED=0 timeout 240 ./$t) >$L/$t.log 2>&1
    echo "$t exit $? $(grep -E 'PASSED|FAILED' $L/$t.log | head -2 | tr '\n' ' ')"
done
say memcheck
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
(cd bin && VLLM_TEST_ONLY=test_xr VLLM_TEST_XR_QUICK=1 timeout 300 $SAN --tool memcheck ./test_cuda_gemv_xr) >$L/memcheck.log 2>&1
echo "memcheck test_cuda_gemv_xr exit $? $(grep -E 'ERROR SUMMARY' $L/memcheck.log | tail -1)"
say "ncu: xr through L1 (Q4_K gate|up R4, the merged default), what limits it now"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
(cd bin && VLLM_TEST_ONLY=test_xr_speed VLLM_TEST_XR_ONE=0,2,3 timeout 200 $NCU -k regex:k_gemv_xr --launch-skip 20 \
    --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section SchedulerStats \
    --section WarpStateStats --section SourceCounters ./test_cuda_gemv_xr) >$L/ncu_xr.log 2>&1
echo "ncu exit $?"
grep -E "void k_|Duration|DRAM Throughput|L1/TEX Cache|L2 Cache Throughput|Registers Per|Achieved Active Warps|Issued Warp|Eligible Warps|Stall|stall" \
    $L/ncu_xr.log | cut -c1-160 | head -24
say "8B Q4_K_M"
while ! grep -q exit $L/make.log 2>/dev/null; do sleep 1; done; tail -1 $L/make.log
./bin/quantize $G-f16.gguf $G-q4_K_M.gguf q4_K_M --threads "$(nproc)" >$L/quant.log 2>&1 || { tail -3 $L/quant.log; exit 1; }
rm -f $G-f16.gguf
M=$G-q4_K_M.gguf
V=$($PY -c "import gguf; r = gguf.GGUFReader('$M'); print(len(r.fields['tokenizer.ggml.tokens'].data))")
ids=$($PY -c "import random; random.seed(0); print(','.join(str(random.randrange($V // 100, $V)) for _ in range(512)))")
for k in xr d4 d q xr d4 d q; do
    env $(case $k in d4) echo VLLM_CUDA_GEMV_XR=0;; d) echo VLLM_CUDA_GEMV_XR=d;; q) echo VLLM_CUDA_GEMV_XR=q;; *) echo X=1;; esac) ./bin/vllm run --device cuda --model $M --prompt-ids "$ids" \
        --max-tokens 256 --ignore-eos --temperature 0 >$L/run_$k.out 2>$L/run_$k.err
    echo "8B Q4_K_M batch-1 decode $k: $(rate decode <$L/run_$k.err) tok/s"
done
for k in d4 d q; do cmp -s $L/run_xr.out $L/run_$k.out && echo "greedy text xr == $k" || echo "greedy text xr != $k"; done
for r in 1 2; do
    for k in b dflt; do
        env $([ $k = b ] && echo VLLM_CUDA_GEMV_XR=b || echo X=1) ./bin/vllm bench --device cuda --model $M --num-prompts 8 \
            --input-len 512 --output-len 128 --concurrency 2 --max-num-seqs 2 >$L/b_c2_${k}_$r.log 2>&1
    done
    echo "8B Q4_K_M bench c=2 round $r: xr two rows $(tp $L/b_c2_b_$r.log); d4 $(tp $L/b_c2_dflt_$r.log)"
done
say done
