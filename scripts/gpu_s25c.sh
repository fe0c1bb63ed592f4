#!/usr/bin/env bash
# gpu_s25c.sh — session 25, call 3 (nvidia-h200, ~5 min): the decode GEMM
# (cuda_gemm_dec.cu: 17-64 bf16 rows over bf16 W, wgmma with K split over
# a cluster, GLU / residual add in the epilogue) — its tests against the
# CPU and cuBLAS (probed alone first, short limits: a new kernel may
# hang), its speed against cuBLAS on the 0.6B's and the 8B's decode
# shapes, test_cuda_gemm / test_cuda_ops whole, then serving A/B
# (VLLM_CUDA_GEMM_DEC=0 / 1) at concurrency 64 and 32, and ncu of the
# concurrency-64 decode step as call 2's.
#   bash scripts/gpu_snap.sh s25c vllm test_cuda_gemm test_cuda_ops
#   run carry [".gpu-snap-s25c"] "cd .gpu-snap-s25c && OUT=$OUT bash scripts/gpu_s25c.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s25c
gpu_bin
( [ -f $M6/config.json ] || $PY scripts/gpu_hf.py make --shape qwen3-0.6b --out $M6; echo "exit $?" ) >$L/make6.log 2>&1 &
gpu_fixtures
gpu_test dec 60 VLLM_TEST_ONLY=test_gemm_dec VLLM_CUDA_SPEED=0 ./test_cuda_gemm
grep -E "gemm_dec|FAIL|ERROR|rror" $L/dec.log | head -30
[ -n "$(grep -c PASSED $L/dec.log)" ] || true
gpu_test decsp 120 VLLM_TEST_ONLY=test_gemm_dec_speed ./test_cuda_gemm
grep -E "speed|FAIL|ERROR" $L/decsp.log | head -20
gpu_test gemm 300 VLLM_CUDA_SPEED=0 ./test_cuda_gemm
grep -E "FAILED|ERROR|rror" $L/gemm.log | head -5
gpu_test ops 90 VLLM_CUDA_SPEED=0 ./test_cuda_ops
grep -E "FAILED|ERROR" $L/ops.log | head -5
wait
tail -1 $L/make6.log
for r in 1 2; do
    for v in 0 1; do
        echo "round $r, c64, VLLM_CUDA_GEMM_DEC=$v: $(VLLM_CUDA_GEMM_DEC=$v gpu_c64 $L/c64_${v}_$r.log)"
    done
done
for v in 0 1; do
    echo "c32, VLLM_CUDA_GEMM_DEC=$v: $(VLLM_CUDA_GEMM_DEC=$v gpu_c64 $L/c32_$v.log --concurrency 32 --max-num-seqs 32)"
done
say "ncu over concurrency 64 (decode GEMM on), launches 3000-5999"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
B64="--device cuda --model $M6 --num-prompts 64 --input-len 1024 --output-len 16 --concurrency 64 --max-num-seqs 64 --max-num-batched-tokens 8192 --no-async-scheduling"
timeout 200 $NCU --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
    --clock-control none --graph-profiling node --csv --print-units base --launch-skip 3000 --launch-count 3000 \
    ./bin/vllm bench $B64 >$L/ncu_c64.csv 2>$L/ncu_c64.err
echo "ncu exit $?"
$PY tools/ncu_summary.py $L/ncu_c64.csv 2>/dev/null | sed -n '1,22p'
gzip -f $L/ncu_c64.csv; cp $L/ncu_c64.csv.gz $FINAL/
say done
