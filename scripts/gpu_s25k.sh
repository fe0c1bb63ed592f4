#!/usr/bin/env bash
# gpu_s25k.sh — session 25, call 11 (nvidia-h200, ~30 s): concurrency 64
# with VLLM_STEP_TRACE=1 (host times of every step), bf16 residual and
# f32, for the step-time distributions (are all mixed steps slower, or a
# few first-use outliers?); the traces come back in the logs.
#   run carry [".gpu-snap-s25h"] "cd .gpu-snap-s25h && OUT=$OUT bash scripts/gpu_s25k.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s25k
gpu_bin
( [ -f $M6/config.json ] || $PY scripts/gpu_hf.py make --shape qwen3-0.6b --out $M6; echo "exit $?" ) >$L/make6.log 2>&1
echo "bf16: $(VLLM_STEP_TRACE=1 gpu_c64 $L/t16.log)"
echo "f32:  $(VLLM_BF16_RESIDUAL=0 VLLM_STEP_TRACE=1 gpu_c64 $L/t32.log)"
for v in 16 32; do
    $PY - $L/t$v.log $v <<'PY'
import re, sys
ex = [float(m.group(2)) for m in re.finditer(r"step trace: (\d+) requests: schedule [0-9.]+ ms, execute ([0-9.]+) ms", open(sys.argv[1]).read())]
s = sorted(ex)
print(f"residual {sys.argv[2]}: {len(ex)} steps, execute sum {sum(ex):.1f} ms; largest 12: {', '.join(f'{x:.2f}' for x in s[-12:])}; median {s[len(s)//2]:.2f}")
print("  first 24 steps:", ", ".join(f"{x:.1f}" for x in ex[:24]))
PY
done
say done
