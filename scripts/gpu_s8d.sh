#!/usr/bin/env bash
# gpu_s8d.sh — session 8's fourth device call (nvidia-h200-x2, ~5 min):
# main + the FA3-style flash variant, fixed (its second consumer
# warpgroup never staged its first 8 Q rows) and made the default at
# hd 128:
#   1. gpu_run.sh: build, every CUDA op test (test_cuda_flash: every
#      variant, with other data in shared memory before each), the engine
#      gates on cuda (which now run the new default);
#   2. GPU 1: memcheck of test_cuda_flash on the new kernel | GPU 0: greedy
#      2048 + 128 with the default against VLLM_CUDA_FLASH_WG=1 on both
#      shapes, HF near-tie check when they differ;
#   3. prefill TTFT A/B: WG=1 vs the default, two rounds.
set -u -o pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-$PWD/gpu-out}; mkdir -p "$FINAL"
L=/tmp/s8d; mkdir -p $L
t0=$(date +%s); say() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
pack() { tar czf "$FINAL/s8d_logs.tgz" -C "$L" . 2>/dev/null; }
trap pack EXIT
( python3 scripts/gpu_hf.py make --shape llama-8b --out /tmp/rand-llama-8b >$L/make.log 2>&1
  python3 scripts/gpu_hf.py make --shape qwen3-0.6b --out /tmp/rand-qwen3-0.6b >>$L/make.log 2>&1 ) &
MK=$!
say "1. gpu_run.sh"
OUT=$L/run VLLM_GPU_SANITIZE=0 timeout 300 bash scripts/gpu_run.sh >$L/run.txt 2>&1
echo "gpu_run rc=$?"; grep -E "^[a-z_0-9]+ exit [0-9]+" $L/run.txt | tr '\n' ';'; echo
grep -h -E "FAILED|wrong rows|packed rows|did not run" $L/run/*.log | head -20
grep -h -E "^speed: flash prefill.*bf16 q/out" $L/run/test_cuda_flash.log
source scripts/gpu_deps.sh >/dev/null
B=build-gpu
cmake --build $B -j"$(nproc)" --target vllm >$L/build2.log 2>&1 || grep -E "error" $L/build2.log | head
wait $MK; tail -1 $L/make.log
pack
python3 -c "import random; random.seed(0); print(','.join(str(random.randrange(1000, 100000)) for _ in range(2048)))" >$L/p2048.ids
say "2. GPU 1: memcheck (fa3) | GPU 0: greedy, default vs WG=1"
( export CUDA_VISIBLE_DEVICES=1
  for t in test_flash_gqa test_flash_long test_flash_block_sizes; do
    (cd $B && VLLM_TEST_FLASH_ONLY=fa3 VLLM_TEST_FILTER=$t VLLM_CUDA_SPEED=0 timeout -k 5 90 \
      compute-sanitizer --tool memcheck --error-exitcode 9 ./test_cuda_flash >$L/mc_$t.log 2>&1)
    echo "memcheck fa3 $t exit $? $(grep -h 'ERROR SUMMARY' $L/mc_$t.log | tail -1)"
  done ) >$L/gpu1.txt 2>&1 &
G1=$!
export CUDA_VISIBLE_DEVICES=0
for s in qwen3-0.6b llama-8b; do
  for v in 1 def; do
    ( [ $v = 1 ] && export VLLM_CUDA_FLASH_WG=1
      timeout -k 5 90 $B/vllm run --device cuda --model /tmp/rand-$s --prompt-ids "$(cat $L/p2048.ids)" \
        --max-tokens 128 --ignore-eos --temperature 0 --print-ids >$L/g_${s}_$v.ids 2>$L/g_${s}_$v.err )
    echo "greedy $s WG=$v exit $? $(grep -o 'prompt:.*' $L/g_${s}_$v.err)"
  done
  if cmp -s $L/g_${s}_1.ids $L/g_${s}_def.ids; then echo "greedy $s: default ids == WG=1"; else
    echo "greedy $s: default ids differ from WG=1: near-tie check against HF"
    for v in 1 def; do
      timeout -k 5 120 python3 scripts/gpu_hf.py hf --model /tmp/rand-$s --prompt-ids $L/p2048.ids --ours $L/g_${s}_$v.ids \
        --max-tokens 128 >$L/hf_${s}_$v.json 2>$L/hf_${s}_$v.err
      echo "  WG=$v vs HF: exit $? $(cut -c1-300 $L/hf_${s}_$v.json | grep -o '"check": "[A-Za-z]*"')"
    done
  fi
done
wait $G1; cat $L/gpu1.txt
pack
say "3. prefill TTFT A/B (GPU 0)"
for r in 1 2; do for s in qwen3-0.6b llama-8b; do for v in 1 def; do
  ( [ $v = 1 ] && export VLLM_CUDA_FLASH_WG=1
    timeout -k 5 60 $B/vllm bench --device cuda --model /tmp/rand-$s --num-prompts 8 --input-len 2048 --output-len 1 \
      --concurrency 1 --max-num-seqs 1 --max-num-batched-tokens 8192 >$L/ttft_${s}_${v}_$r.log 2>&1 )
  echo "prefill 2048 $s WG=$v round $r: exit $? median TTFT $(sed -n 's/^Median TTFT (ms): *\([0-9.]*\).*/\1/p' $L/ttft_${s}_${v}_$r.log | head -1) ms"
done; done; done
grep -h "TMA tensor map" $L/ttft_*.log | head -2
say done
