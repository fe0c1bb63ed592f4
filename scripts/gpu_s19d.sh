#!/usr/bin/env bash
# gpu_s19d.sh — session 19, call 4 (nvidia-h200, ~8 min): issue 6's full
# scorecard on main (session 18's last one was reduced: no concurrency 64 /
# 256 rows, no GGUF row): scripts/gpu_s14b.sh (gpu_bench.sh prebuilt: 8B
# and 0.6B bf16 decode / prefill vs the same-run ceilings, concurrency 1 /
# 16 / 64 / 256, HF side by side, the HF oracle, async == sync; the 8B
# Q4_K_M row); then the 8B prefill at 6144 and 8192 tokens with the fused
# GEMM-GLU (default) vs VLLM_CUDA_GEMM_GLU=0 (call 1: ~0.4% slower in
# concurrency-64 serving, whose steps hold up to 8192 rows; call 2: faster
# at 4096).
#   bash scripts/gpu_snap.sh s19d vllm test_engine_async_64 quantize
#   run carry [".gpu-snap-s19d"], "cd .gpu-snap-s19d && OUT=$OUT bash scripts/gpu_s19d.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out} timeout 470 bash scripts/gpu_s14b.sh
source scripts/gpu_common.sh s19d
gpu_bin
[ -f $M8/config.json ] || { say "no $M8"; exit 0; }
say "8B TTFT 6144 / 8192: GEMM-GLU default / =0"
for len in 8192 6144; do
    for r in 1 2; do
        timeout 60 ./bin/vllm bench --device cuda --model $M8 --num-prompts 4 --input-len $len --output-len 1 \
            --concurrency 1 --max-num-seqs 1 --max-num-batched-tokens 8192 >$L/g_d_${len}_$r.log 2>&1
        VLLM_CUDA_GEMM_GLU=0 timeout 60 ./bin/vllm bench --device cuda --model $M8 --num-prompts 4 --input-len $len \
            --output-len 1 --concurrency 1 --max-num-seqs 1 --max-num-batched-tokens 8192 >$L/g_0_${len}_$r.log 2>&1
        echo "input $len round $r: $(gpu_med $L/g_d_${len}_$r.log) / $(gpu_med $L/g_0_${len}_$r.log) ms"
    done
done
say done
