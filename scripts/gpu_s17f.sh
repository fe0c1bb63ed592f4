#!/usr/bin/env bash
# gpu_s17f.sh — session 17, call 8 (nvidia-h200, ~3 min): k_gemv_half_rows
# (many short f16/bf16 rows: one wave of blocks, each warp walks whole rows
# with the next row's loads in flight) for the 0.6B's LM head (151,936 x
# 1,024; k_gemv_half_u at KS 2: 103 us = 3.0 TB/s in call 7's ncu). One
# binary, A/B by VLLM_CUDA_GEMV_ROWS=0 / 1 (default):
#   1. test_cuda_ops (test_gemv_rows: vs the CPU, the exact product and bit
#      for bit vs k_gemv_half_u at KS 1; every other op), memcheck of it;
#   2. greedy ids 2048 + 32 (0.6B) 0 vs 1;
#   3. batch-1 decode (vllm run 512 + 256, greedy), 0 / 1 alternated, three
#      rounds; warm 2048-token TTFT 0 / 1, two rounds;
#   4. ncu duration of the LM head GEMV in `vllm run` (decode), 0 vs 1.
# Make: bash scripts/gpu_snap.sh s17f vllm test_cuda_ops; run carry
#   [".gpu-snap-s17f"] "cd .gpu-snap-s17f && OUT=$OUT bash scripts/gpu_s17f.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s17f
gpu_bin
gpu_models
say "test_cuda_ops"
gpu_test ops 300 VLLM_CUDA_SPEED=0 ./test_cuda_ops
grep -E "LINE|Failure|FAILED|differs|cuda vs cpu: matmul " $L/ops.log | cut -c1-200 | head -8
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
(cd bin && VLLM_TEST_ONLY=test_gemv_rows timeout 150 $SAN --tool memcheck ./test_cuda_ops) >$L/mc.log 2>&1
echo "memcheck test_gemv_rows exit $? $(grep -E 'ERROR SUMMARY|PASSED|FAILED' $L/mc.log | tr '\n' ' ')"
gpu_model_wait 6
for v in 0 1; do VLLM_CUDA_GEMV_ROWS=$v gpu_greedy vllm $M6 $L/ids_$v.txt; done
cmp -s $L/ids_0.txt $L/ids_1.txt && echo "greedy ids 1 == 0" || echo "greedy ids 1 != 0: $(head -c 200 $L/ids_0.txt) | $(head -c 200 $L/ids_1.txt)"
ids=$($PY -c "import random; random.seed(0); print(','.join(str(random.randrange(1000, 100000)) for _ in range(512)))")
say "0.6B batch-1 decode 512 + 256: 0 / 1"
for r in 1 2 3; do
    line="round $r:"
    for v in 0 1; do
        VLLM_CUDA_GEMV_ROWS=$v ./bin/vllm run --device cuda --model $M6 --prompt-ids "$ids" --max-tokens 256 --ignore-eos \
            --temperature 0 >/dev/null 2>$L/dec_${v}_$r.err
        line="$line $v: $(rate decode <$L/dec_${v}_$r.err)"
    done
    echo "$line tok/s"
done
say "0.6B prefill 2048 TTFT: 0 / 1"
for r in 1 2; do
    line="round $r:"
    for v in 0 1; do VLLM_CUDA_GEMV_ROWS=$v gpu_pf vllm $M6 $L/pf_${v}_$r.log; line="$line $v: $(gpu_med $L/pf_${v}_$r.log)"; done
    echo "$line ms"
done
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
say "ncu: the LM head GEMV in decode, 0 vs 1"
for v in 0 1; do
    VLLM_CUDA_GEMV_ROWS=$v timeout 120 $NCU -k regex:"k_gemv_half" --launch-skip 200 --launch-count 400 --clock-control none \
        --cache-control none --section SpeedOfLight ./bin/vllm run --device cuda --model $M6 --prompt-ids "$ids" \
        --max-tokens 8 --ignore-eos --temperature 0 >$L/ncu_$v.txt 2>&1
    echo "GEMV_ROWS=$v (launches over 40 us: the LM head):"
    awk '/^  [a-zA-Z_]/{n=$0; sub(/\(const char.*\) \(/, "(", n)} /^ *Duration/{if ($3 + 0 > 40) print substr(n, 1, 90), $3}' $L/ncu_$v.txt | head -6
done
say done
