#!/usr/bin/env bash
# gpu_s23j.sh — session 23, call 10 (nvidia-h200, ~1 min): call 9 (gpu_s23i.sh)
# showed every GPU path of the tiny Gemma 3 within 3e-3 to 4e-3 of the
# CPU (all rows too): the 0.28 was the per-logit metric on logits near
# zero; the GPU bound is now 1e-2 of the largest logit. Call 8 found
# test_model_last_rows failing on the GPU for the tiny Gemma 3 (step 0,
# VLLM_LAST_ROWS=any: 0.28 relative against all rows; the tiny Llama
# within 2e-3). The test now also compares each GPU load with the CPU's
# all rows and reports every step: which GPU path is off.
#   bash scripts/gpu_snap.sh s23j test_model_last_rows
#   run carry [".gpu-snap-s23j"] "cd .gpu-snap-s23j && OUT=$OUT bash scripts/gpu_s23j.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s23j
gpu_bin
[ -d /work/main/tests/fixtures/models ] || { mkdir -p /work/main/tests && ln -sfn "$(cd .. && pwd)/tests/fixtures" /work/main/tests/fixtures; }
gpu_test lr 120 VLLM_TEST_DEVICE=cuda ./test_model_last_rows
grep -E "ERROR|differ|vs the CPU|comparisons" $L/lr.log | head -40
gpu_test lr_ng 120 VLLM_CUDA_GRAPHS=0 VLLM_CUDA_PDL=0 VLLM_TEST_DEVICE=cuda ./test_model_last_rows
grep -E "differ|vs the CPU|comparisons" $L/lr_ng.log | head -20
say done
