#!/usr/bin/env bash
# gpu_s21i.sh — session 21, call 9 (branch s20-qkvr): ncu durations of the
# fused QKV kernel (clusters of 2) in the engine with its epilogue, without
# (VLLM_CUDA_QKV_DBG=1) and stores only (=2), and of the alone test's
# calls (test_matmul_rope_store's speed loop: fused and unfused kernels)
# as a calibration of ncu against the graph timings (29.8 / 38.7 us).
#   bash scripts/gpu_snap.sh s21i vllm test_cuda_gemm
#   run carry [".gpu-snap-s21i"] "cd .gpu-snap-s21i && OUT=$OUT bash scripts/gpu_s21i.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s21i
gpu_bin
gpu_models
gpu_model_wait 6
ids=$($PY -c "import json, random; random.seed(1); V = json.load(open('$M6/config.json'))['vocab_size'];
print(','.join(str(random.randrange(V // 100, min(V, 100000))) for _ in range(2048)))")
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for d in 0 1 2; do
    VLLM_CUDA_QKV_CL=2 VLLM_CUDA_QKV_DBG=$d timeout 200 "$NCU" --metrics gpu__time_duration.sum \
        --clock-control none --cache-control none --csv --print-units base -k regex:"k_gemm_qkv_pp|k_gemm_glu_pp" \
        ./bin/vllm run --device cuda --model $M6 --prompt-ids "$ids" --max-tokens 1 --ignore-eos \
        --temperature 0 >$L/ncu_$d.csv 2>$L/ncu_$d.err
    echo "ncu engine DBG=$d exit $?"
    $PY tools/ncu_runs.py $L/ncu_$d.csv 0
done
(cd bin && VLLM_TEST_ONLY=test_matmul_rope_store timeout 200 "$NCU" --metrics gpu__time_duration.sum \
    --clock-control none --cache-control none --csv --print-units base --launch-skip 20 --launch-count 400 \
    ./test_cuda_gemm) >$L/ncu_t.csv 2>$L/ncu_t.err
echo "ncu test exit $?"
$PY tools/ncu_runs.py $L/ncu_t.csv 5
say done
