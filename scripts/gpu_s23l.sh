#!/usr/bin/env bash
# gpu_s23l.sh — session 23, call 12 (nvidia-h200, ~1 min; main + the step
# trace's host time per op): call 11 (gpu_s23k.sh) found mdl_forward_step
# holding the host for the whole GPU time of concurrency 64's mixed
# 8,192-token steps (forward queued 16-18 ms, waited ~0.1). The step
# trace now names the op kinds of most host time and the longest call.
#   bash scripts/gpu_snap.sh s23l vllm
#   run carry [".gpu-snap-s23l"] "cd .gpu-snap-s23l && OUT=$OUT bash scripts/gpu_s23l.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s23l
gpu_bin
gpu_models
gpu_model_wait 6
echo "c64 default: $(VLLM_STEP_TRACE=1 gpu_c64 $FINAL/c64_trace_d.log)"
grep -E "^step trace: 8192" $FINAL/c64_trace_d.log | head -12
echo "c64 any: $(VLLM_STEP_TRACE=1 VLLM_LAST_ROWS=any gpu_c64 $FINAL/c64_trace_a.log)"
grep -E "^step trace: 8192" $FINAL/c64_trace_a.log | head -12
VLLM_STEP_TRACE=1 gpu_pf vllm $M6 $FINAL/pf_trace.log
grep -E "^step trace: 2048" $FINAL/pf_trace.log | tail -3
say done
