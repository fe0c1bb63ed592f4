#!/usr/bin/env bash
# gpu_s25g.sh — session 25, call 7 (nvidia-h200, ~3 min): branch s24-x16's
# bf16 residual stream in prefill steps, A/B in situ with more rounds than
# call 1 (two were within the noise): four rounds of the graphed cuBLAS
# ceiling (gpu_hf.py roof) and the warm 2048-token TTFT with the bf16
# residual (default) and without (VLLM_BF16_RESIDUAL=0), each round's gate
# ratio (model FLOPs) for both.
#   (call 1's snapshot: bash scripts/gpu_snap.sh s24j vllm test_cuda_ops test_model_last_rows test_capi on s24-x16)
#   run carry [".gpu-snap-s24j"] "cd .gpu-snap-s24j && OUT=$OUT bash scripts/gpu_s25g.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s25g
gpu_bin
( [ -f $M6/config.json ] || $PY scripts/gpu_hf.py make --shape qwen3-0.6b --out $M6; echo "exit $?" ) >$L/make6.log 2>&1
tail -1 $L/make6.log
for r in 1 2 3 4; do
    $PY scripts/gpu_hf.py roof --model $M6 --tokens 2048 >$L/roof_$r.json 2>$L/roof_$r.err || tail -3 $L/roof_$r.err
    gpu_pf vllm $M6 $L/pf16_$r.log
    VLLM_BF16_RESIDUAL=0 gpu_pf vllm $M6 $L/pf32_$r.log
    $PY - "$L/roof_$r.json" "$(gpu_med $L/pf16_$r.log)" "$(gpu_med $L/pf32_$r.log)" "$r" <<'PY'
import json, sys
roof = json.load(open(sys.argv[1]))
g = roof["prefill_gemm_graph_ms"] / 1e3
mf = 1 + roof["prefill_attn_flops"] / roof["prefill_matmul_flops"]
a, b = float(sys.argv[2]) / 1e3, float(sys.argv[3]) / 1e3
print(f"round {sys.argv[4]}: graphed cuBLAS {g * 1e3:.3f} ms; TTFT bf16 residual {a * 1e3:.2f} ms ({g / a * mf:.3f}), "
      f"f32 {b * 1e3:.2f} ms ({g / b * mf:.3f})")
PY
done
say done
