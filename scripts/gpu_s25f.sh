#!/usr/bin/env bash
# gpu_s25f.sh — session 25, call 6 (nvidia-h200, ~3 min): the 0.6B
# prefill gate's spread on the final main — four rounds of the pair the
# scorecard takes one of: the graphed cuBLAS ceiling of the model's
# matmuls at 2048 tokens (scripts/gpu_hf.py roof) and our warm 2048-token
# TTFT (gpu_pf: median of 8, sync), each round's ratio counting the
# attention products as gpu_bench.sh does (model FLOPs).
#   bash scripts/gpu_snap.sh s25f vllm
#   run carry [".gpu-snap-s25f"] "cd .gpu-snap-s25f && OUT=$OUT bash scripts/gpu_s25f.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s25f
gpu_bin
( [ -f $M6/config.json ] || $PY scripts/gpu_hf.py make --shape qwen3-0.6b --out $M6; echo "exit $?" ) >$L/make6.log 2>&1
tail -1 $L/make6.log
for r in 1 2 3 4; do
    $PY scripts/gpu_hf.py roof --model $M6 --tokens 2048 >$L/roof_$r.json 2>$L/roof_$r.err || tail -3 $L/roof_$r.err
    gpu_pf vllm $M6 $L/pf_$r.log
    $PY - "$L/roof_$r.json" "$(gpu_med $L/pf_$r.log)" "$r" <<'PY'
import json, sys
roof = json.load(open(sys.argv[1])); t = float(sys.argv[2]) / 1e3
g = roof["prefill_gemm_graph_ms"] / 1e3
mf = 1 + roof["prefill_attn_flops"] / roof["prefill_matmul_flops"]
print(f"round {sys.argv[3]}: TTFT {t * 1e3:.2f} ms, graphed cuBLAS {g * 1e3:.3f} ms -> matmul {g / t:.3f}, model FLOPs {g / t * mf:.3f}")
PY
done
say done
