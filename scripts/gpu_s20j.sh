#!/usr/bin/env bash
# gpu_s20j.sh — session 20, call 11 (nvidia-h200, ~2 min): the ping-pong
# GEMM-GLU prefetching its W tiles into L2 an item ahead (and the first
# item's before the PDL wait); call 10: 43.1 us in the engine vs 38.0
# alone, W from DRAM there.
#   0. test_gemm_glu_fused (every kernel and shape; speed at the 0.6B's and
#      the 8B's 2048 rows, VLLM_CUDA_SPEED=2);
#   1. 0.6B warm 2048-token TTFT: default (prefetch) / VLLM_CUDA_GEMM_GLU_PF=0,
#      three rounds;
#   2. ncu durations of one 0.6B prefill, default and PF=0 (k_gemm_glu_pp's
#      time in the engine).
#   bash scripts/gpu_snap.sh s20j vllm test_cuda_gemm
#   run carry [".gpu-snap-s20j"] "cd .gpu-snap-s20j && OUT=$OUT bash scripts/gpu_s20j.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s20j
gpu_bin
gpu_models
gpu_test tg 200 VLLM_TEST_ONLY=test_gemm_glu_fused VLLM_CUDA_SPEED=2 ./test_cuda_gemm
grep -E "speed: matmul_glu|ERROR|Failure" $L/tg.log
gpu_model_wait 6
for r in 1 2 3; do
    gpu_pf vllm $M6 $L/pf_d_$r.log
    VLLM_CUDA_GEMM_GLU_PF=0 gpu_pf vllm $M6 $L/pf_0_$r.log
    echo "round $r: prefetch $(gpu_med $L/pf_d_$r.log) / none $(gpu_med $L/pf_0_$r.log) ms"
done
ids=$($PY -c "import json, random; random.seed(1); V = json.load(open('$M6/config.json'))['vocab_size'];
print(','.join(str(random.randrange(V // 100, min(V, 100000))) for _ in range(2048)))")
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for m in d 0; do
    env $([ $m = 0 ] && echo VLLM_CUDA_GEMM_GLU_PF=0) timeout 200 "$NCU" --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
        --clock-control none --cache-control none --csv --print-units base --launch-count 1000 \
        ./bin/vllm run --device cuda --model $M6 --prompt-ids "$ids" --max-tokens 1 --ignore-eos \
        --temperature 0 >$L/ncu_$m.csv 2>$L/ncu_$m.err
    echo "ncu $m exit $?: $($PY tools/ncu_summary.py $L/ncu_$m.csv | grep -E 'forwards|k_gemm_glu_pp' | head -2 | tr -s ' ' | tr '\n' ';')"
done
say done
