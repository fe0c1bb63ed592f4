#!/usr/bin/env bash
# gpu_s8a.sh — one device call (nvidia-h200-x2, ~9-10 min) validating
# branch h9-cand = main + h9-tpdef + h9-normfold + h9-fa3 (all three
# prepared without a GPU in session 7), in the order of what they could
# close:
#   1. gpu_run.sh: build, every CUDA op test (test_cuda_fused includes the
#      norm fold against its CPU twin; test_cuda_flash only on the old
#      variants here: a new one could hang), the engine gates on cuda;
#   2. gpu_tp.sh: TP=1 / TP=2 greedy (the TP=2 default is now the
#      symmetric-memory configuration) with the HF near-tie check, the 8k
#      prefill, and the old default as an A/B row;
#   3. GPU 0: `vllm run` decode A/B of VLLM_CUDA_NORMFOLD 0/1/2 (8B, 0.6B);
#      GPU 1 meanwhile: probes of the FA3-style flash variants (a hang
#      costs 60 s), test_cuda_flash on them, memcheck of the new kernels;
#   4. GPU 0: prefill TTFT A/B of VLLM_CUDA_FLASH_WG=1 vs the new variants
#      that passed.
# Key lines on stdout, logs in $OUT/s8a_logs.tgz.
set -u -o pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-$PWD/gpu-out}; mkdir -p "$FINAL"
L=/tmp/s8a; mkdir -p $L
t0=$(date +%s); say() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
pack() { tar czf "$FINAL/s8a_logs.tgz" -C "$L" . 2>/dev/null; }
trap pack EXIT
( python3 scripts/gpu_hf.py make --shape llama-8b --out /tmp/rand-llama-8b >$L/make.log 2>&1
  python3 scripts/gpu_hf.py make --shape qwen3-0.6b --out /tmp/rand-qwen3-0.6b >>$L/make.log 2>&1 ) &
MK=$!
say "1. gpu_run.sh (old flash variants only)"
OUT=$L/run VLLM_GPU_SANITIZE=0 VLLM_TEST_FLASH_ONLY=64,128,wg timeout 240 bash scripts/gpu_run.sh >$L/run.txt 2>&1
echo "gpu_run rc=$?"; grep -E "^[a-z_0-9]+ exit [0-9]+" $L/run.txt | tr '\n' ';'; echo
grep -E "FAILED|Assertion|norm fold|rank [0-9]:" $L/run.txt | head -20
source scripts/gpu_deps.sh >/dev/null
cmake --build build-gpu -j"$(nproc)" --target vllm tp_probe test_cuda_flash >$L/build2.log 2>&1 || grep -E "error" $L/build2.log | head
pack
wait $MK
say "2. gpu_tp.sh (TP=2 default = symmetric buffers, all-to-all partials, overlapped gather, zero-CTA policy)"
OUT=$L/tp VLLM_TP_SKIP_COMM=1 VLLM_TP_SIZES="1 2" VLLM_TP_PROMPT_LEN=2048 \
  VLLM_TP_AB="VLLM_TP_SYM=0,VLLM_TP_SP_A2A=0,VLLM_TP_SP_OVERLAP=0" timeout 280 bash scripts/gpu_tp.sh >$L/tp.txt 2>&1
echo "gpu_tp rc=$?"
grep -E "prefill 8000|TP=[0-9g]+|greedy|tensor parallel|check|HF" $L/tp.txt | grep -v "^== \[" | cut -c1-300 | head -30
pack
say "3. GPU 0: norm fold decode A/B | GPU 1: FA3-style flash probes, tests, memcheck"
( export CUDA_VISIBLE_DEVICES=1
  NEW=; WGS=1
  for v in fa3 fa3pp; do
    (cd build-gpu && VLLM_TEST_FLASH_ONLY=$v VLLM_TEST_FILTER=test_flash_gqa timeout -k 5 60 ./test_cuda_flash >$L/probe_$v.log 2>&1)
    rc=$?; echo "probe $v (test_flash_gqa) exit $rc"
    if [ $rc != 124 ] && [ $rc != 137 ]; then NEW="$NEW,$v"; [ $v = fa3 ] && WGS="$WGS 2"; [ $v = fa3pp ] && WGS="$WGS 3"; fi
  done
  echo "$WGS" >$L/wgs.txt
  (cd build-gpu && VLLM_TEST_FLASH_ONLY="wg$NEW" timeout -k 5 150 ./test_cuda_flash >$L/test_cuda_flash_new.log 2>&1)
  echo "test_cuda_flash (wg$NEW) exit $?"
  grep -E "tile fa3|FAILED|did not run|speed:" $L/test_cuda_flash_new.log | head -30
  for v in ${NEW//,/ }; do
    (cd build-gpu && VLLM_TEST_FLASH_ONLY=$v VLLM_TEST_FILTER=test_flash_gqa VLLM_CUDA_SPEED=0 timeout -k 5 120 \
      compute-sanitizer --tool memcheck --error-exitcode 9 ./test_cuda_flash >$L/mc_$v.log 2>&1)
    echo "memcheck $v exit $? $(grep -h 'ERROR SUMMARY' $L/mc_$v.log | tail -1)"
  done
  (cd build-gpu && VLLM_CUDA_SPEED=0 timeout -k 5 120 compute-sanitizer --tool memcheck --error-exitcode 9 ./test_cuda_fused \
    >$L/mc_fused.log 2>&1)
  echo "memcheck test_cuda_fused (norm fold) exit $? $(grep -h 'ERROR SUMMARY' $L/mc_fused.log | tail -1)"
) >$L/gpu1.txt 2>&1 &
G1=$!
OUT=$L/dec LOG=$L/dec CUDA_VISIBLE_DEVICES=0 VLLM_DEC_SKIP_TESTS=1 VLLM_DEC_TESTS="" \
  VLLM_DEC_CFGS="unfused=VLLM_CUDA_NORMFOLD:0 fold=VLLM_CUDA_NORMFOLD:1 late=VLLM_CUDA_NORMFOLD:2" VLLM_DEC_ROUNDS=2 \
  timeout 150 bash scripts/gpu_dec.sh 2>&1 | grep -v "^== \[" | tail -6
wait $G1; cat $L/gpu1.txt
pack
WGS=$(cat $L/wgs.txt 2>/dev/null || echo 1)
say "4. prefill TTFT A/B, VLLM_CUDA_FLASH_WG in: $WGS (GPU 0)"
for s in qwen3-0.6b llama-8b; do for v in $WGS; do
  CUDA_VISIBLE_DEVICES=0 VLLM_CUDA_FLASH_WG=$v timeout -k 5 60 build-gpu/vllm bench --device cuda --model /tmp/rand-$s \
    --num-prompts 8 --input-len 2048 --output-len 1 --concurrency 1 --max-num-seqs 1 --max-num-batched-tokens 8192 \
    >$L/ttft_${s}_$v.log 2>&1
  echo "prefill 2048 $s VLLM_CUDA_FLASH_WG=$v: exit $? median TTFT $(sed -n 's/^Median TTFT (ms): *\([0-9.]*\).*/\1/p' $L/ttft_${s}_$v.log | head -1) ms"
done; done
say done
