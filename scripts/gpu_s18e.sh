#!/usr/bin/env bash
# gpu_s18e.sh — session 18, call 5 (nvidia-h200, ~3 min): branch s18-n256.
#   1. test_gemm_glu_fused speed: the cluster variant's grid as the
#      occupancy query sizes it (printed), then 66 clusters (132 CTAs,
#      VLLM_CUDA_GG_CLUSTERS=66);
#   2. ncu (durations only, clocks and caches untouched) of one 0.6B
#      2048-token prefill with VLLM_CUDA_GEMM_GLU=0 and =2, per kernel name
#      (tools/ncu_summary.py): where the fused kernel's in-engine loss is.
# Make (from /work/main on s18-n256, clean):
#   bash scripts/gpu_snap.sh s18e vllm test_cuda_gemm
#   run carry [".gpu-snap-s18e"] "cd .gpu-snap-s18e && OUT=$OUT bash scripts/gpu_s18e.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s18e
gpu_bin
gpu_models
say "test_gemm_glu_fused speed"
gpu_test gg 90 VLLM_TEST_ONLY=test_gemm_glu_fused ./test_cuda_gemm
grep -E "LINE|Failure|FAILED|speed:" $L/gg.log | cut -c1-160 | head -30
gpu_test gg66 90 VLLM_CUDA_GG_CLUSTERS=66 VLLM_TEST_ONLY=test_gemm_glu_fused ./test_cuda_gemm
echo "with 66 clusters:"; grep -E "LINE|Failure|FAILED|speed:.*clusters" $L/gg66.log | cut -c1-160 | head -30
gpu_model_wait 6
ids=$($PY -c "import json, random; random.seed(1); V = json.load(open('$M6/config.json'))['vocab_size'];
print(','.join(str(random.randrange(V // 100, min(V, 100000))) for _ in range(2048)))")
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for m in 0 2; do
    say "ncu 0.6B prefill, VLLM_CUDA_GEMM_GLU=$m"
    VLLM_CUDA_GEMM_GLU=$m timeout 200 "$NCU" --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
        --clock-control none --cache-control none --csv --print-units base --launch-count 1000 \
        ./bin/vllm run --device cuda --model $M6 --prompt-ids "$ids" --max-tokens 1 --ignore-eos \
        --temperature 0 >$L/ncu_$m.csv 2>$L/ncu_$m.err
    echo "ncu exit $?"
    $PY tools/ncu_summary.py $L/ncu_$m.csv | head -30
done
say done
