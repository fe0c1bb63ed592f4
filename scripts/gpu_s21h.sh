#!/usr/bin/env bash
# gpu_s21h.sh — session 21, call 8 (branch s20-qkvr): where the fused QKV
# kernel's time goes in the engine: 0.6B warm TTFT (2048 tokens) fused in
# clusters of 2 with its epilogue / without (VLLM_CUDA_QKV_DBG=1: q, k, v
# not written, for timing only) / stores only (=2) / unfused, four rounds
# alternated.
#   bash scripts/gpu_snap.sh s21h vllm
#   run carry [".gpu-snap-s21h"] "cd .gpu-snap-s21h && OUT=$OUT bash scripts/gpu_s21h.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s21h
gpu_bin
gpu_models
gpu_model_wait 6
for r in 1 2 3 4; do
    VLLM_CUDA_QKV_CL=2 gpu_pf vllm $M6 $L/pf_f_$r.log
    VLLM_CUDA_QKV_CL=2 VLLM_CUDA_QKV_DBG=1 gpu_pf vllm $M6 $L/pf_1_$r.log
    VLLM_CUDA_QKV_CL=2 VLLM_CUDA_QKV_DBG=2 gpu_pf vllm $M6 $L/pf_2_$r.log
    VLLM_CUDA_QKV_ROPE=0 gpu_pf vllm $M6 $L/pf_0_$r.log
    echo "round $r: fused CL2 $(gpu_med $L/pf_f_$r.log) / no epilogue $(gpu_med $L/pf_1_$r.log) / stores only $(gpu_med $L/pf_2_$r.log) / unfused $(gpu_med $L/pf_0_$r.log) ms"
done
say done
