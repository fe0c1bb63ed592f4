#!/usr/bin/env bash
# gpu_s25l.sh — session 25, call 12 (nvidia-h200, ~2.5 min): main with
# the bf16 residual and its fix (bf16_residual wrote its bf16 view before
# knowing it would be taken; the warm-up's 12-row step then failed and the
# whole warm-up was skipped: call 11's trace). test_engine_warmup and
# async == sync (test_engine_async_64) on the GPU, the warm-up's log line,
# then serving A/B (VLLM_BF16_RESIDUAL unset / 0; 0.6B, sync, 1024 / 128)
# at concurrency 64 (two rounds) and 256 (one), and the 2048-token prefill
# gate (graphed cuBLAS + warm TTFT both ways, two rounds).
#   bash scripts/gpu_snap.sh s25l vllm test_engine_warmup test_engine_async_64
#   run carry [".gpu-snap-s25l"] "cd .gpu-snap-s25l && OUT=$OUT bash scripts/gpu_s25l.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s25l
gpu_bin
gpu_fixtures
( [ -f $M6/config.json ] || $PY scripts/gpu_hf.py make --shape qwen3-0.6b --out $M6; echo "exit $?" ) >$L/make6.log 2>&1
tail -1 $L/make6.log
gpu_test warm 120 VLLM_TEST_DEVICE=cuda ./test_engine_warmup
gpu_test async 200 VLLM_TEST_DEVICE=cuda VLLM_TEST_ASYNC_MODEL=$M6 ./test_engine_async_64
grep -E "async == sync|FAILED" $L/async.log | head -3
for r in 1 2; do
    echo "round $r c64 bf16 residual: $(gpu_c64 $L/c64_16_$r.log)"
    echo "round $r c64 f32:           $(VLLM_BF16_RESIDUAL=0 gpu_c64 $L/c64_32_$r.log)"
done
grep -E "warm" $L/c64_16_1.log | head -3
echo "c256 bf16 residual: $(gpu_c64 $L/c256_16.log --num-prompts 256 --concurrency 256 --max-num-seqs 256)"
echo "c256 f32:           $(VLLM_BF16_RESIDUAL=0 gpu_c64 $L/c256_32.log --num-prompts 256 --concurrency 256 --max-num-seqs 256)"
for r in 1 2; do
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
