#!/usr/bin/env bash
# gpu_s22f.sh — session 22, call 7 (nvidia-h200, ~1.5 min): gpu_s22e.sh
# again after the fix (m->last_rows reset by the decode-graph step, which
# runs the forward itself: call 6 aborted on a stale value); logs as s22f.
#   bash scripts/gpu_snap.sh s22f vllm test_engine_async_64
#   run carry [".gpu-snap-s22f"] "cd .gpu-snap-s22f && OUT=$OUT bash scripts/gpu_s22f.sh"
GPU_S22E_NAME=s22f exec bash "$(dirname "$0")/gpu_s22e.sh"
