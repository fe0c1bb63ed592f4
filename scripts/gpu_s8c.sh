#!/usr/bin/env bash
# gpu_s8c.sh — session 8's third device call: where the FA3-style flash
# variant's wrong rows come from. Builds test_cuda_flash and runs the fa3
# cases that failed under the temporary diagnostic knobs VLLM_FA3_DBG
# (bit 1: no producer tail; 2: both consumer warpgroups meet after Q;
# 4: consumers in lockstep per key tile; 8: the tail waits for the copies
# only), GPU 0 the long case, GPU 1 the GQA and block-size cases.
set -u -o pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-$PWD/gpu-out}; mkdir -p "$FINAL"
L=/tmp/s8c; mkdir -p $L
t0=$(date +%s); say() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
pack() { tar czf "$FINAL/s8c_logs.tgz" -C "$L" . 2>/dev/null; }
trap pack EXIT
source scripts/gpu_deps.sh >/dev/null
B=build-gpu
cmake -S . -B $B -DVLLM_CUDA=ON -DCMAKE_BUILD_TYPE=Release >$L/cfg.log 2>&1
cmake --build $B -j"$(nproc)" --target test_cuda_flash >$L/build.log 2>&1 || { grep -E "error" $L/build.log | head -20; exit 1; }
say built
for d in 0 1 8 2 4 6 14; do
  (cd $B && CUDA_VISIBLE_DEVICES=0 VLLM_FA3_DBG=$d VLLM_TEST_FLASH_ONLY=fa3,fa3pp VLLM_TEST_FILTER=test_flash_long VLLM_CUDA_SPEED=0 \
     timeout -k 5 40 ./test_cuda_flash >$L/long_$d.log 2>&1; echo $? >$L/long_$d.rc) &
  (cd $B && export CUDA_VISIBLE_DEVICES=1 VLLM_FA3_DBG=$d VLLM_TEST_FLASH_ONLY=fa3,fa3pp VLLM_CUDA_SPEED=0
   VLLM_TEST_FILTER=test_flash_gqa timeout -k 5 40 ./test_cuda_flash >$L/gqa_$d.log 2>&1; r=$?
   VLLM_TEST_FILTER=test_flash_block_sizes timeout -k 5 40 ./test_cuda_flash >$L/bs_$d.log 2>&1; echo "$r $?" >$L/gqa_$d.rc) &
  wait
  echo "VLLM_FA3_DBG=$d: long exit $(cat $L/long_$d.rc), gqa + block sizes exit $(cat $L/gqa_$d.rc)"
  for f in long gqa bs; do
    grep -h -E "tile fa3.*normalised|wrong rows|packed rows|first:" $L/${f}_$d.log | grep -v "e-0[3-9]$" | head -7 | cut -c1-260
  done
done
say done
