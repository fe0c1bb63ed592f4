#!/usr/bin/env bash
# gpu_fa3.sh — one device call (nvidia-h200-x2) validating the
# warp-specialised wgmma flash prefill variants (VLLM_CUDA_FLASH_WG=2: TMA
# producer warp + mbarrier ring; 3: + consumer ping-pong; branch h9-fa3):
# build, test_cuda_flash (every case on every variant, then the speed
# sweep) on GPU 0; compute-sanitizer memcheck of variants 2 and 3
# (VLLM_TEST_FLASH_ONLY) on GPU 1 meanwhile; then the in-situ prefill TTFT
# A/B (VLLM_CUDA_FLASH_WG=1/2/3, 2048-token prompts, two rounds) on random
# Qwen3-0.6B- and Llama-3.1-8B-shaped checkpoints. Key lines on stdout,
# logs in $OUT/fa3_logs.tgz.
set -u -o pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-$PWD/gpu-out}; mkdir -p "$FINAL"
L=/tmp/fa3; mkdir -p $L
t0=$(date +%s); say() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
pack() { tar czf "$FINAL/fa3_logs.tgz" -C "$L" . 2>/dev/null; }
trap pack EXIT
( python3 scripts/gpu_hf.py make --shape qwen3-0.6b --out /tmp/rand-qwen3-0.6b >$L/make.log 2>&1
  python3 scripts/gpu_hf.py make --shape llama-8b --out /tmp/rand-llama-8b >>$L/make.log 2>&1 ) &
MK=$!
say "1. build"
source scripts/gpu_deps.sh >/dev/null
cmake -S . -B build-gpu -DVLLM_CUDA=ON -DCMAKE_BUILD_TYPE=Release >$L/cfg.log 2>&1
cmake --build build-gpu -j"$(nproc)" --target test_cuda_flash vllm >$L/build.log 2>&1 || { grep -E "error" $L/build.log | head -20; exit 1; }
say "2. memcheck of variants fa3, fa3pp (GPU 1, background) | test_cuda_flash (GPU 0)"
( export CUDA_VISIBLE_DEVICES=1
  for v in fa3 fa3pp; do for t in test_flash_gqa test_flash_block_sizes test_flash_long; do
    (cd build-gpu && VLLM_TEST_FLASH_ONLY=$v VLLM_TEST_FILTER=$t timeout 150 \
      compute-sanitizer --tool memcheck --error-exitcode 9 ./test_cuda_flash >$L/mc_${v}_$t.log 2>&1)
    echo "memcheck $v $t exit $? $(grep -h 'ERROR SUMMARY' $L/mc_${v}_$t.log | tail -1)"
  done; done >$L/mc.txt ) &
MC=$!
(cd build-gpu && CUDA_VISIBLE_DEVICES=0 timeout 200 ./test_cuda_flash >$L/test_cuda_flash.log 2>&1); echo "test_cuda_flash exit $?"
grep -E "tile fa3|FAILED|Assert|error:" $L/test_cuda_flash.log | head -40
grep -E "^\[  (PASSED|FAILED) \]|max normalised|speed:" $L/test_cuda_flash.log
wait $MK; tail -2 $L/make.log
say "3. in-situ prefill TTFT A/B (GPU 0)"
for r in 1 2; do for s in qwen3-0.6b llama-8b; do for v in 1 2 3; do
  CUDA_VISIBLE_DEVICES=0 VLLM_CUDA_FLASH_WG=$v timeout 90 build-gpu/vllm bench --device cuda --model /tmp/rand-$s \
    --num-prompts 8 --input-len 2048 --output-len 1 --concurrency 1 --max-num-seqs 1 --max-num-batched-tokens 8192 \
    >$L/ttft_${s}_${v}_$r.log 2>&1
  echo "prefill 2048 $s VLLM_CUDA_FLASH_WG=$v round $r: exit $? median TTFT $(sed -n 's/^Median TTFT (ms): *\([0-9.]*\).*/\1/p' $L/ttft_${s}_${v}_$r.log | head -1) ms"
done; done; done
wait $MC; cat $L/mc.txt
say done
