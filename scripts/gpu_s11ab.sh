#!/usr/bin/env bash
# gpu_s11ab.sh — session 11's first device call (nvidia-h200-x2): builds
# once, then gpu_s11a.sh on GPU 0 and gpu_s11b.sh on GPU 1 side by side
# (each script's numbers are its own GPU's; the host is shared).
#   OUT=$OUT bash scripts/gpu_s11ab.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-$PWD/gpu-out}; mkdir -p "$FINAL"
source scripts/gpu_deps.sh >/dev/null || exit 1
t0=$(date +%s)
# the random checkpoints gpu_s11a.sh benches: made during the build
( for s in qwen3-0.6b llama-8b; do [ -f /tmp/rand-$s/config.json ] ||
    python3 scripts/gpu_hf.py make --shape $s --out /tmp/rand-$s >/tmp/ab_make_$s.log 2>&1; done; touch /tmp/ab_models.done ) &
cmake -S . -B build-gpu -DVLLM_CUDA=ON -DCMAKE_BUILD_TYPE=Release >/tmp/ab_configure.log 2>&1 || { tail -20 /tmp/ab_configure.log; exit 1; }
cmake --build build-gpu -j"$(nproc)" --target vllm quantize test_cuda_gemm test_cuda_ops test_cuda_model test_cuda_fused \
    >/tmp/ab_build.log 2>&1 || { grep -E "error" /tmp/ab_build.log | head -20; exit 1; }
echo "== built in $(( $(date +%s) - t0 ))s"
export VLLM_GPU_PREBUILT=1
CUDA_VISIBLE_DEVICES=0 timeout ${AB_LIMIT:-540} bash scripts/gpu_s11a.sh >"$FINAL/s11a.txt" 2>&1 &
A=$!
CUDA_VISIBLE_DEVICES=1 timeout ${AB_LIMIT:-540} bash scripts/gpu_s11b.sh >"$FINAL/s11b.txt" 2>&1 &
wait $A; echo "s11a exit $?"; wait; echo "s11b done"
echo "== total $(( $(date +%s) - t0 ))s"
echo "----- s11a"; cat "$FINAL/s11a.txt"; echo "----- s11b"; cat "$FINAL/s11b.txt"
