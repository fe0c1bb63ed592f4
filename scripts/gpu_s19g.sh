#!/usr/bin/env bash
# gpu_s19g.sh — session 19, call 7 (nvidia-h200, ~5 s): how far cuBLAS's
# default GEMM choice (cublasGemmEx, CUBLAS_GEMM_DEFAULT, cuda_gemm.cu) is
# from the best cublasLt heuristic candidate for the 0.6B and 8B prefill
# shapes at 2048 tokens (scripts/lt_probe.cu; timing only, random values).
# Build here (nvcc, no GPU needed), then snapshot and run:
#   /usr/local/cuda/bin/nvcc -O2 -std=c++17 -arch=sm_90a -o lt_probe scripts/lt_probe.cu -lcublasLt -lcublas
#   VLLM_SNAP_NOBUILD=1 bash scripts/gpu_snap.sh s19g vllm && cp lt_probe .gpu-snap-s19g/
#   run carry [".gpu-snap-s19g"], "cd .gpu-snap-s19g && bash scripts/gpu_s19g.sh"
set -u
cd "$(dirname "$0")/.."
source scripts/gpu_deps.sh >/dev/null
timeout 200 ./lt_probe
