#!/usr/bin/env bash
# gpu_s19k.sh — session 19, call 11 (nvidia-h200, ~2 min): the attention
# tests on main after the sliding-window and hd-256 changes (calls 8 and 10
# ran parts): test_cuda_flash (all cases, all variants), test_cuda_attn_mixed
# and test_cuda_paged_fd (decode and mixed steps: the decode flash kernel's
# new hd check), test_cuda_bf16_attn.
#   bash scripts/gpu_snap.sh s19k test_cuda_flash test_cuda_attn_mixed test_cuda_paged_fd test_cuda_bf16_attn
#   run carry [".gpu-snap-s19k"], "cd .gpu-snap-s19k && OUT=$OUT bash scripts/gpu_s19k.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s19k
gpu_bin
gpu_test fl 120 ./test_cuda_flash
grep -E "speed:" $L/fl.log | head -12
gpu_test am 60 ./test_cuda_attn_mixed
gpu_test pf 60 ./test_cuda_paged_fd
gpu_test ba 40 ./test_cuda_bf16_attn
say done
