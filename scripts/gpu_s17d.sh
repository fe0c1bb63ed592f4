#!/usr/bin/env bash
# gpu_s17d.sh — session 17, call 4 (nvidia-h200, ~6 min): the
# warp-per-row norm kernel (k_norm_warp: many rows of <= 1024 values, one
# warp a row, no block barrier) with and without MATMUL_ADD. One binary;
# A = VLLM_CUDA_MATMUL_ADD, W = VLLM_CUDA_NORM_WARP (main: A=0 W=0):
#   1. test_cuda_ops (test_rmsnorm: new shapes, both kernels;
#      test_matmul_add) and test_cuda_fused (test_add_rmsnorm with W = 0 / 1),
#      memcheck of the norm tests;
#   2. greedy ids 2048 + 32 of the 0.6B and 8B at A1 W1 vs A0 W0;
#   3. warm 2048-token TTFT (median of 8) of the 0.6B at A0W0 / A1W0 / A0W1 /
#      A1W1, three rounds; the 8B at A0 / A1 (W does not apply: d = 4096),
#      two rounds;
#   4. ncu durations of one 0.6B layer's norms (and GEMMs) in all four.
# Result: k_norm_warp no faster than the block kernel (ncu 8.5-9.3 vs 9.2
# us; 7.9-8.1 vs 7.8 after MATMUL_ADD); dropped, its code not kept (this
# script is the record; VLLM_CUDA_NORM_WARP is a no-op on main).
# Make: bash scripts/gpu_snap.sh s17d vllm test_cuda_ops test_cuda_fused;
#   run carry [".gpu-snap-s17d"] "cd .gpu-snap-s17d && OUT=$OUT bash scripts/gpu_s17d.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s17d
gpu_bin
gpu_models
say "tests"
gpu_test ops 300 VLLM_CUDA_SPEED=0 ./test_cuda_ops
grep -E "LINE|Failure|FAILED|cuda vs cpu: (rmsnorm|matmul_add)" $L/ops.log | cut -c1-200 | head -12
gpu_test fused 200 VLLM_TEST_ONLY=test_add_rmsnorm ./test_cuda_fused
grep -E "LINE|Failure|FAILED|x 1024|x 896|x 128 " $L/fused.log | cut -c1-200 | sort | uniq -c | sort -rn | head -8
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for t in ops:test_rmsnorm fused:test_add_rmsnorm; do
    (cd bin && VLLM_TEST_ONLY=${t#*:} timeout 150 $SAN --tool memcheck ./test_cuda_${t%%:*}) >$L/mc_${t#*:}.log 2>&1
    echo "memcheck ${t#*:} exit $? $(grep -E 'ERROR SUMMARY|PASSED|FAILED' $L/mc_${t#*:}.log | tr '\n' ' ')"
done
for m in 6 8; do
    M=/tmp/rand-$([ $m = 6 ] && echo qwen3-0.6b || echo llama-8b)
    gpu_model_wait $m
    VLLM_CUDA_MATMUL_ADD=0 VLLM_CUDA_NORM_WARP=0 gpu_greedy vllm $M $L/ids_${m}_00.txt
    gpu_greedy vllm $M $L/ids_${m}_11.txt
    cmp -s $L/ids_${m}_00.txt $L/ids_${m}_11.txt && echo "$m: greedy ids A1W1 == A0W0" || echo "$m: greedy ids A1W1 != A0W0: $(head -c 300 $L/ids_${m}_00.txt) | $(head -c 300 $L/ids_${m}_11.txt)"
done
say "prefill 2048 TTFT, 0.6B: A0W0 / A1W0 / A0W1 / A1W1"
for r in 1 2 3; do
    line="0.6B round $r:"
    for aw in 00 10 01 11; do
        VLLM_CUDA_MATMUL_ADD=${aw:0:1} VLLM_CUDA_NORM_WARP=${aw:1:1} gpu_pf vllm $M6 $L/pf6_${aw}_$r.log
        line="$line $aw $(gpu_med $L/pf6_${aw}_$r.log)"
    done
    echo "$line ms"
done
say "prefill 2048 TTFT, 8B: A0 / A1"
for r in 1 2; do
    line="8B round $r:"
    for a in 0 1; do VLLM_CUDA_MATMUL_ADD=$a gpu_pf vllm $M8 $L/pf8_${a}_$r.log; line="$line A$a $(gpu_med $L/pf8_${a}_$r.log)"; done
    echo "$line ms"
done
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
ids6=$($PY -c "import random; random.seed(1); print(','.join(str(random.randrange(1000, 100000)) for _ in range(2048)))")
say "ncu: one 0.6B layer's GEMMs and norms"
for aw in 00 10 01 11; do
    VLLM_CUDA_MATMUL_ADD=${aw:0:1} VLLM_CUDA_NORM_WARP=${aw:1:1} timeout 150 $NCU -k regex:"nvjet|k_norm" --launch-skip 40 \
        --launch-count 12 --cache-control none --section SpeedOfLight ./bin/vllm run --device cuda --model $M6 \
        --prompt-ids $ids6 --max-tokens 2 --ignore-eos --temperature 0 >$L/ncu_l_$aw.txt 2>&1
    echo "A${aw:0:1}W${aw:1:1}: $(awk '/^  [a-zA-Z_]/{n=$1; if (n=="void") n=$2; sub(/\(.*/,"",n); sub(/<.*/,"",n)} /^ *Duration/{printf "%s %s; ", substr(n,1,24), $3}' $L/ncu_l_$aw.txt)"
done
say done
