#!/usr/bin/env bash
# gpu_s8e.sh — session 8's last device call (nvidia-h200-x2, ~9 min) on
# the final main (TP=2 defaults = the symmetric-memory configuration; the
# FA3-style flash variant the default at hd 128):
#   1. build;
#   2. gpu_tp.sh: TP=1 / TP=2 greedy 2048 + 128 (HF near-tie check when
#      they differ), the 8,000-token prefill and decode scaling;
#   3. gpu_bench.sh: issue 6's scorecard (both shapes, HF side by side).
# Key lines on stdout, logs in $OUT/s8e_logs.tgz.
set -u -o pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-$PWD/gpu-out}; mkdir -p "$FINAL"
L=/tmp/s8e; mkdir -p $L
t0=$(date +%s); say() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
pack() { tar czf "$FINAL/s8e_logs.tgz" -C "$L" . 2>/dev/null; }
trap pack EXIT
( python3 scripts/gpu_hf.py make --shape llama-8b --out /tmp/rand-llama-8b >$L/make.log 2>&1
  python3 scripts/gpu_hf.py make --shape qwen3-0.6b --out /tmp/rand-qwen3-0.6b >>$L/make.log 2>&1 ) &
MK=$!
say "1. build"
source scripts/gpu_deps.sh >/dev/null
cmake -S . -B build-gpu -DVLLM_CUDA=ON -DCMAKE_BUILD_TYPE=Release >$L/cfg.log 2>&1
cmake --build build-gpu -j"$(nproc)" --target vllm test_cuda_comm tp_probe test_engine_async_64 >$L/build.log 2>&1 ||
  { grep -E "error" $L/build.log | head -20; exit 1; }
wait $MK
say "2. gpu_tp.sh (final defaults)"
OUT=$L/tp VLLM_TP_SKIP_COMM=1 VLLM_TP_SIZES="1 2" VLLM_TP_PROMPT_LEN=2048 timeout 170 bash scripts/gpu_tp.sh >$L/tp.txt 2>&1
echo "gpu_tp rc=$?"
grep -E "prefill 8000|TP=[0-9g]+|greedy|check|HF" $L/tp.txt | grep -v "^== \[" | cut -c1-300 | head -20
pack
say "3. gpu_bench.sh (issue 6 scorecard)"
OUT=$L/bench timeout 320 bash scripts/gpu_bench.sh >$L/bench.txt 2>&1
echo "gpu_bench rc=$?"
grep -v "^== \[" $L/bench.txt | tail -45 | cut -c1-220
say done
