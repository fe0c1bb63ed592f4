#!/usr/bin/env bash
# gpu_s25i.sh — session 25, call 9 (nvidia-h200, ~2 min): call 8's
# scorecard had concurrency 64 / 256 below session 24's (0.6B 12,835 /
# 15,373 vs 13,850 / 17,300 tok/s; TTFT 85.5 ms at 64): the bf16 residual
# also runs in serving's mixed steps. Serving A/B on the same binary,
# VLLM_BF16_RESIDUAL unset / 0, 0.6B, sync, 1024-in / 128-out: concurrency
# 64 (128 prompts) three rounds, 256 (256 prompts) two.
#   run carry [".gpu-snap-s25h"] "cd .gpu-snap-s25h && OUT=$OUT bash scripts/gpu_s25i.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s25i
gpu_bin
( [ -f $M6/config.json ] || $PY scripts/gpu_hf.py make --shape qwen3-0.6b --out $M6; echo "exit $?" ) >$L/make6.log 2>&1
tail -1 $L/make6.log
for r in 1 2 3; do
    echo "round $r c64 bf16 residual: $(gpu_c64 $L/c64_16_$r.log)"
    echo "round $r c64 f32:           $(VLLM_BF16_RESIDUAL=0 gpu_c64 $L/c64_32_$r.log)"
done
for r in 1 2; do
    echo "round $r c256 bf16 residual: $(gpu_c64 $L/c256_16_$r.log --num-prompts 256 --concurrency 256 --max-num-seqs 256)"
    echo "round $r c256 f32:           $(VLLM_BF16_RESIDUAL=0 gpu_c64 $L/c256_32_$r.log --num-prompts 256 --concurrency 256 --max-num-seqs 256)"
done
say done
