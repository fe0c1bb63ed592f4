#!/usr/bin/env bash
# gpu_s10g.sh — session 10's last seconds of device time (nvidia-h200,
# ~1 min): test_cuda_gemm built here (CUDA 13, sm_90a) and carried as
# prebuilt/test_cuda_gemm: its correctness cases once more and its skinny
# speed table (test_skinny_speed: us and GB/s of the 8B / 0.6B decode
# matmuls at n = 2..16 by KS rule / forced KS / cuBLAS, next to the n = 1
# GEMV).
#   cd <snapshot with scripts/gpu_deps.sh, .deps, prebuilt/> && OUT=$OUT bash scripts/gpu_s10g.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_deps.sh >/dev/null || exit 1
timeout 120 ./prebuilt/test_cuda_gemm >"${OUT:-/tmp}/gemm_speed.log" 2>&1
echo "test_cuda_gemm exit $?"
grep -E "PASSED|FAILED|speed: skinny|matmul bf16 x, bf16 W, bf16|error" "${OUT:-/tmp}/gemm_speed.log" | head -60
