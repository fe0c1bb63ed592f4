#!/usr/bin/env bash
# (The L2 prefetch code, VLLM_L2_PREFETCH / VLLM_L2PF_CTA_KB, lives on branch s10-l2pf: measured
# slower in every configuration in session 10 and not merged; run this from that branch.)
# gpu_s10a.sh — session 10's first device call (nvidia-h200-x2, ~8 min) on
# branch s10-int (main + s10-l2pf + s10-fdns): one build for three jobs.
#   1. build every target the three scripts use; the 8B and 0.6B random
#      checkpoints are made meanwhile;
#   2. gpu_memcheck_all.sh (both GPUs: the suite under memcheck, including
#      test_cuda_ops' paged bounds and test_cuda_comm with its symmetric
#      test skipped);
#   3. at the same time, one per GPU: gpu_l2pf.sh (GPU 0: prefetch tests and
#      the decode A/B) and gpu_fdns.sh (GPU 1: split-rule table and bench).
#   OUT=$OUT bash scripts/gpu_s10a.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-$PWD/gpu-out}; mkdir -p "$FINAL"
L=/tmp/s10a; mkdir -p $L
t0=$(date +%s); say() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
source scripts/gpu_deps.sh >/dev/null || exit 1
PY=${PYTHON:-python3}
( for s in llama-8b qwen3-0.6b; do [ -f /tmp/rand-$s/config.json ] ||
    $PY scripts/gpu_hf.py make --shape $s --out /tmp/rand-$s >$L/make_$s.log 2>&1; done ) &
MK=$!
B=build-gpu
say build
cmake -S . -B $B -DVLLM_CUDA=ON -DCMAKE_BUILD_TYPE=Release >$L/configure.log 2>&1 || { tail -20 $L/configure.log; exit 1; }
cmake --build $B -j"$(nproc)" --target vllm test_cuda_ops test_cuda_fused test_cuda_model test_cuda_sample test_cuda_flash \
    test_cuda_bf16_attn test_cuda_attn_mixed test_cuda_combine test_cuda_gemm test_cuda_paged_fd test_model_mirror test_engine \
    test_engine_async test_engine_devsample test_engine_async_64 test_engine_mirror test_engine_warmup test_model_attn_split \
    test_cuda_comm test_model_prefetch >$L/build.log 2>&1 || { grep -E "error" $L/build.log | head -20; tar czf "$FINAL/s10a_logs.tgz" -C $L .; exit 1; }
say "memcheck over the suite"
timeout -k 5 240 bash scripts/gpu_memcheck_all.sh
wait $MK; ls /tmp/rand-llama-8b /tmp/rand-qwen3-0.6b >/dev/null || { cat $L/make_*.log | tail; exit 1; }
say "l2pf (GPU 0) | fdns (GPU 1)"
( CUDA_VISIBLE_DEVICES=0 NO_BUILD=1 MC_OPS=0 timeout -k 5 230 bash scripts/gpu_l2pf.sh >$L/l2pf.txt 2>&1 ) &
P0=$!
( CUDA_VISIBLE_DEVICES=1 NO_BUILD=1 timeout -k 5 230 bash scripts/gpu_fdns.sh >$L/fdns.txt 2>&1 ) &
P1=$!
wait $P0 $P1
echo "---- l2pf"; cat $L/l2pf.txt; echo "---- fdns"; cat $L/fdns.txt
tar czf "$FINAL/s10a_logs.tgz" -C $L .
say done
