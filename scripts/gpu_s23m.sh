#!/usr/bin/env bash
# gpu_s23m.sh — session 23, call 13 (nvidia-h200, ~1.5 min; branch
# s23-warm): call 12 (gpu_s23l.sh) traced the host held 14-17 ms by the
# LM head's first call at each new row count of concurrency 64's mixed
# steps (and VLLM_LAST_ROWS=any's last-layer matmuls likewise). The
# warm-up now runs steps of 1 .. max_num_seqs sequences; VLLM_WARMUP_ROWS=0
# the old warm-up. Concurrency 64, default / any, with and without.
#   bash scripts/gpu_snap.sh s23m vllm
#   run carry [".gpu-snap-s23m"] "cd .gpu-snap-s23m && OUT=$OUT bash scripts/gpu_s23m.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s23m
gpu_bin
gpu_models
gpu_model_wait 6
for r in 1 2; do
    echo "c64 round $r default, rows warmed: $(gpu_c64 $L/c64_dw_$r.log)"
    echo "c64 round $r default, VLLM_WARMUP_ROWS=0: $(VLLM_WARMUP_ROWS=0 gpu_c64 $L/c64_d0_$r.log)"
    echo "c64 round $r any, rows warmed: $(VLLM_LAST_ROWS=any gpu_c64 $L/c64_aw_$r.log)"
    echo "c64 round $r any, VLLM_WARMUP_ROWS=0: $(VLLM_LAST_ROWS=any VLLM_WARMUP_ROWS=0 gpu_c64 $L/c64_a0_$r.log)"
done
grep -h "warm-up" $L/c64_dw_1.log $L/c64_d0_1.log
echo "any, rows warmed, traced: $(VLLM_STEP_TRACE=1 VLLM_LAST_ROWS=any gpu_c64 $FINAL/c64_trace_aw.log)"
grep -E "^step trace: 8192" $FINAL/c64_trace_aw.log | head -9 | cut -c1-200
gpu_pf vllm $M6 $L/pf.log
echo "2048 TTFT: $(gpu_med $L/pf.log) ms"
say done
