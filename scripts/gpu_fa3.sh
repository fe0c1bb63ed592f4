#!/usr/bin/env bash
# gpu_fa3.sh — one device call (nvidia-h200-x2) validating the
# warp-specialised wgmma flash prefill variants (VLLM_CUDA_FLASH_WG=2: TMA
# producer warp + mbarrier ring; 3: + consumer ping-pong; branch h9-fa3):
# build; a 60-second probe of each new variant (test_flash_gqa only) so
# that one that hangs is left out of everything after it; test_cuda_flash
# (every case on every variant, then the speed sweep) on GPU 0;
# compute-sanitizer memcheck of the new variants on GPU 1 meanwhile; then
# the in-situ prefill TTFT A/B (VLLM_CUDA_FLASH_WG=1/2/3, 2048-token
# prompts, two rounds) on random Qwen3-0.6B- and Llama-3.1-8B-shaped
# checkpoints. Key lines on stdout, logs in $OUT/fa3_logs.tgz.
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
say "2. probes (GPU 0 / GPU 1)"
NEW=""; WGS="1"
(cd build-gpu && CUDA_VISIBLE_DEVICES=0 VLLM_TEST_FLASH_ONLY=fa3 VLLM_TEST_FILTER=test_flash_gqa timeout -k 5 60 ./test_cuda_flash >$L/probe_fa3.log 2>&1; echo $? >$L/probe_fa3.rc) &
P1=$!
(cd build-gpu && CUDA_VISIBLE_DEVICES=1 VLLM_TEST_FLASH_ONLY=fa3pp VLLM_TEST_FILTER=test_flash_gqa timeout -k 5 60 ./test_cuda_flash >$L/probe_fa3pp.log 2>&1; echo $? >$L/probe_fa3pp.rc) &
P2=$!
wait $P1 $P2
for v in fa3 fa3pp; do
  rc=$(cat $L/probe_$v.rc); echo "probe $v (test_flash_gqa) exit $rc"
  grep -E "tile $v:|FAILED|did not run" $L/probe_$v.log | head -12
  if [ "$rc" != 124 ] && [ "$rc" != 137 ]; then NEW="$NEW,$v"; [ $v = fa3 ] && WGS="$WGS 2"; [ $v = fa3pp ] && WGS="$WGS 3"; fi
done
say "3. test_cuda_flash on 64,128,wg$NEW (GPU 0) | memcheck of${NEW//,/ } (GPU 1, background)"
( export CUDA_VISIBLE_DEVICES=1
  for v in ${NEW//,/ }; do for t in test_flash_gqa test_flash_block_sizes test_flash_long; do
    (cd build-gpu && VLLM_TEST_FLASH_ONLY=$v VLLM_TEST_FILTER=$t timeout -k 5 120 \
      compute-sanitizer --tool memcheck --error-exitcode 9 ./test_cuda_flash >$L/mc_${v}_$t.log 2>&1)
    echo "memcheck $v $t exit $? $(grep -h 'ERROR SUMMARY' $L/mc_${v}_$t.log | tail -1)"
  done; done >$L/mc.txt ) &
MC=$!
(cd build-gpu && CUDA_VISIBLE_DEVICES=0 VLLM_TEST_FLASH_ONLY="64,128,wg$NEW" timeout -k 5 180 ./test_cuda_flash >$L/test_cuda_flash.log 2>&1); echo "test_cuda_flash exit $?"
grep -E "tile fa3|FAILED|did not run|Assert|error:" $L/test_cuda_flash.log | head -40
grep -E "^\[  (PASSED|FAILED) \]|max normalised|speed:" $L/test_cuda_flash.log
wait $MK; tail -2 $L/make.log
say "4. in-situ prefill TTFT A/B, VLLM_CUDA_FLASH_WG in: $WGS (GPU 0)"
for r in 1 2; do for s in qwen3-0.6b llama-8b; do for v in $WGS; do
  CUDA_VISIBLE_DEVICES=0 VLLM_CUDA_FLASH_WG=$v timeout -k 5 90 build-gpu/vllm bench --device cuda --model /tmp/rand-$s \
    --num-prompts 8 --input-len 2048 --output-len 1 --concurrency 1 --max-num-seqs 1 --max-num-batched-tokens 8192 \
    >$L/ttft_${s}_${v}_$r.log 2>&1
  echo "prefill 2048 $s VLLM_CUDA_FLASH_WG=$v round $r: exit $? median TTFT $(sed -n 's/^Median TTFT (ms): *\([0-9.]*\).*/\1/p' $L/ttft_${s}_${v}_$r.log | head -1) ms"
done; done; done
grep -h "TMA tensor map" $L/ttft_*.log | head -2
wait $MC; cat $L/mc.txt
say done
