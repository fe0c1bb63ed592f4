#!/usr/bin/env bash
# gpu_s22s.sh — prepared in session 21 for the next session's first call
# (nvidia-h200, ~9 min): test_matmul_rope_store with its speed lines (the
# new "L2 dirty" ones: a 32 MB copy before each call, its time
# subtracted; compiled, never run), then issue 6's full scorecard on main
# with the fused QKV + RoPE + KV-store kernel (session 21) by default:
# scripts/gpu_s14b.sh (gpu_bench.sh prebuilt: 8B and 0.6B bf16 decode /
# prefill vs the same-run ceilings, concurrency 1 / 16 / 64 / 256, HF side
# by side, the HF oracle, async == sync; the 8B Q4_K_M row).
#   bash scripts/gpu_snap.sh s22s vllm test_engine_async_64 quantize test_cuda_gemm
#   run carry [".gpu-snap-s22s"] "cd .gpu-snap-s22s && OUT=$OUT bash scripts/gpu_s22s.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s22s
gpu_bin
say "test_matmul_rope_store (speed lines)"
gpu_test tq 150 VLLM_TEST_ONLY=test_matmul_rope_store ./test_cuda_gemm
grep -E "speed|ERROR|Failure" $L/tq.log | head -32
OUT=${OUT:-$PWD/gpu-out} timeout 500 bash scripts/gpu_s14b.sh
say done
