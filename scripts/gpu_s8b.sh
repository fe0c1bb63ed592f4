#!/usr/bin/env bash
# gpu_s8b.sh — session 8's second device call (nvidia-h200-x2, ~8 min) on
# main + the FA3-style flash variant with its producer tail fix (branch
# h9-fa3):
#   1. build;
#   2. TP=1 / TP=2 prefill of 8,000 tokens alternated twice (the TP=2
#      defaults now the symmetric-memory configuration), 5 requests each;
#   3. probes of VLLM_CUDA_FLASH_WG=2/3 on the cases that failed in the
#      first call (60 s each: a hang leaves them out of everything after);
#   4. GPU 1: test_cuda_flash on every variant + memcheck of the new ones |
#      GPU 0: model / engine tests with VLLM_CUDA_FLASH_WG=2, greedy 2048 +
#      128 with WG=2 against WG=1 on both shapes (HF near-tie check when
#      they differ);
#   5. GPU 0: prefill TTFT A/B, WG 1/2/3, two rounds.
# Key lines on stdout, logs in $OUT/s8b_logs.tgz.
set -u -o pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-$PWD/gpu-out}; mkdir -p "$FINAL"
L=/tmp/s8b; mkdir -p $L
t0=$(date +%s); say() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
pack() { tar czf "$FINAL/s8b_logs.tgz" -C "$L" . 2>/dev/null; }
trap pack EXIT
( python3 scripts/gpu_hf.py make --shape llama-8b --out /tmp/rand-llama-8b >$L/make.log 2>&1
  python3 scripts/gpu_hf.py make --shape qwen3-0.6b --out /tmp/rand-qwen3-0.6b >>$L/make.log 2>&1 ) &
MK=$!
say "1. build"
source scripts/gpu_deps.sh >/dev/null
B=build-gpu
cmake -S . -B $B -DVLLM_CUDA=ON -DCMAKE_BUILD_TYPE=Release >$L/cfg.log 2>&1
cmake --build $B -j"$(nproc)" --target vllm test_cuda_flash test_cuda_model test_cuda_bf16_attn test_engine \
  test_engine_async_64 test_engine_warmup >$L/build.log 2>&1 || { grep -E "error" $L/build.log | head -20; exit 1; }
wait $MK; tail -1 $L/make.log
ids() { python3 -c "import random; random.seed($2); print(','.join(str(random.randrange(1000, 100000)) for _ in range($1)))"; }
ids 2048 0 >$L/p2048.ids

say "2. TP=1 / TP=2 prefill 8000, alternated (defaults)"
for r in 1 2; do for n in 1 2; do
  timeout -k 5 100 $B/vllm bench --device cuda -tp $n --model /tmp/rand-llama-8b --num-prompts 5 --input-len 8000 \
    --output-len 1 --concurrency 1 --max-num-seqs 1 --max-num-batched-tokens 8192 >$L/tp${n}_$r.log 2>&1
  echo "round $r TP=$n: exit $? median TTFT $(sed -n 's/^Median TTFT (ms): *\([0-9.]*\).*/\1/p' $L/tp${n}_$r.log | head -1) ms" \
    "$(grep -m1 -o 'tensor parallel: xn in symmetric.*\|tensor parallel: no symmetric.*' $L/tp${n}_$r.log | cut -c1-120)"
done; done
pack

say "3. probes of the fa3 variants (GPU 0: test_flash_long, GPU 1: test_flash_gqa + block sizes)"
(cd $B && CUDA_VISIBLE_DEVICES=0 VLLM_TEST_FLASH_ONLY=fa3,fa3pp VLLM_TEST_FILTER=test_flash_long timeout -k 5 60 ./test_cuda_flash >$L/probe_long.log 2>&1; echo $? >$L/probe_long.rc) &
P1=$!
(cd $B && export CUDA_VISIBLE_DEVICES=1 VLLM_TEST_FLASH_ONLY=fa3,fa3pp
 VLLM_TEST_FILTER=test_flash_gqa timeout -k 5 60 ./test_cuda_flash >$L/probe_gqa.log 2>&1; r1=$?
 VLLM_TEST_FILTER=test_flash_block_sizes timeout -k 5 60 ./test_cuda_flash >$L/probe_bs.log 2>&1; echo "$r1 $?" >$L/probe_gqa.rc) &
P2=$!
wait $P1 $P2
echo "probe test_flash_long exit $(cat $L/probe_long.rc); test_flash_gqa, test_flash_block_sizes exit $(cat $L/probe_gqa.rc)"
grep -h -E "tile fa3|wrong rows|FAILED" $L/probe_long.log $L/probe_gqa.log $L/probe_bs.log | head -24
HUNG=0; grep -q -E "124|137" $L/probe_long.rc $L/probe_gqa.rc && HUNG=1
pack

say "4. GPU 1: test_cuda_flash (all variants) + memcheck | GPU 0: tests and greedy with VLLM_CUDA_FLASH_WG=2"
ONLY="64,128,wg"; [ $HUNG = 0 ] && ONLY="$ONLY,fa3,fa3pp"
( export CUDA_VISIBLE_DEVICES=1
  (cd $B && VLLM_TEST_FLASH_ONLY=$ONLY timeout -k 5 150 ./test_cuda_flash >$L/test_cuda_flash.log 2>&1)
  echo "test_cuda_flash ($ONLY) exit $?"
  grep -E "FAILED|wrong rows|did not run|speed:|^\[  PASSED" $L/test_cuda_flash.log | head -30
  if [ $HUNG = 0 ]; then for v in fa3 fa3pp; do for t in test_flash_gqa test_flash_block_sizes test_flash_long; do
    (cd $B && VLLM_TEST_FLASH_ONLY=$v VLLM_TEST_FILTER=$t VLLM_CUDA_SPEED=0 timeout -k 5 90 \
      compute-sanitizer --tool memcheck --error-exitcode 9 ./test_cuda_flash >$L/mc_${v}_$t.log 2>&1)
    echo "memcheck $v $t exit $? $(grep -h 'ERROR SUMMARY' $L/mc_${v}_$t.log | tail -1)"
  done; done; fi
) >$L/gpu1.txt 2>&1 &
G1=$!
if [ $HUNG = 0 ]; then
  export CUDA_VISIBLE_DEVICES=0
  for t in test_cuda_model test_cuda_bf16_attn; do
    (cd $B && VLLM_CUDA_FLASH_WG=2 timeout -k 5 120 ./$t >$L/wg2_$t.log 2>&1); echo "$t (WG=2) exit $?"
  done
  for t in test_engine test_engine_async_64 test_engine_warmup; do
    (cd $B && VLLM_CUDA_FLASH_WG=2 VLLM_TEST_DEVICE=cuda timeout -k 5 120 ./$t >$L/wg2_$t.log 2>&1); echo "$t (cuda, WG=2) exit $?"
  done
  for s in qwen3-0.6b llama-8b; do
    for v in 1 2; do
      VLLM_CUDA_FLASH_WG=$v timeout -k 5 90 $B/vllm run --device cuda --model /tmp/rand-$s --prompt-ids "$(cat $L/p2048.ids)" \
        --max-tokens 128 --ignore-eos --temperature 0 --print-ids >$L/g_${s}_$v.ids 2>$L/g_${s}_$v.err
      echo "greedy $s WG=$v exit $? $(grep -o 'prompt:.*' $L/g_${s}_$v.err)"
    done
    if cmp -s $L/g_${s}_1.ids $L/g_${s}_2.ids; then echo "greedy $s: WG=2 ids == WG=1"; else
      echo "greedy $s: WG=2 ids differ from WG=1: near-tie check against HF"
      for v in 1 2; do
        timeout -k 5 120 python3 scripts/gpu_hf.py hf --model /tmp/rand-$s --prompt-ids $L/p2048.ids --ours $L/g_${s}_$v.ids \
          --max-tokens 128 >$L/hf_${s}_$v.json 2>$L/hf_${s}_$v.err
        echo "  WG=$v vs HF: exit $? $(cut -c1-300 $L/hf_${s}_$v.json | grep -o '"check": "[A-Za-z]*"')"
      done
    fi
  done
  unset CUDA_VISIBLE_DEVICES
fi
wait $G1; cat $L/gpu1.txt
pack

WGS="1"; [ $HUNG = 0 ] && WGS="1 2 3"
say "5. prefill TTFT A/B, VLLM_CUDA_FLASH_WG in: $WGS (GPU 0)"
for r in 1 2; do for s in qwen3-0.6b llama-8b; do for v in $WGS; do
  CUDA_VISIBLE_DEVICES=0 VLLM_CUDA_FLASH_WG=$v timeout -k 5 60 $B/vllm bench --device cuda --model /tmp/rand-$s \
    --num-prompts 8 --input-len 2048 --output-len 1 --concurrency 1 --max-num-seqs 1 --max-num-batched-tokens 8192 \
    >$L/ttft_${s}_${v}_$r.log 2>&1
  echo "prefill 2048 $s WG=$v round $r: exit $? median TTFT $(sed -n 's/^Median TTFT (ms): *\([0-9.]*\).*/\1/p' $L/ttft_${s}_${v}_$r.log | head -1) ms"
done; done; done
grep -h "TMA tensor map" $L/ttft_*.log | head -2
say done
