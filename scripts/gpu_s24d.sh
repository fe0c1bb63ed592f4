#!/usr/bin/env bash
# gpu_s24d.sh — session 24, call 4 (nvidia-h200, right after call 3 on the
# same warm machine, whose /tmp keeps the GGUF files; ~4 min): round 2 of
# gpu_s24c.sh's vllm.c vs llama.cpp side-by-side (PART=2 skips the warm-up
# and serve sections; the files are made again on a fresh machine).
#   run carry [".gpu-snap-s24c"] "cd .gpu-snap-s24c && OUT=$OUT bash scripts/gpu_s24d.sh"
cd "$(dirname "$0")/.."
PART=2 ROUNDS=2 exec bash scripts/gpu_s24c.sh
