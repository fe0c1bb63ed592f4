#!/usr/bin/env bash
# gpu_s7c.sh — session 7's last device call (nvidia-h200-x2), kept as the
# record of its command: gpu_run.sh (every CUDA test, engine gates), the
# k_pf path (VLLM_CUDA_FLASH=0), gpu_tp.sh with the symmetric-memory A/B
# rows, then GEMV v4 vs v8 in situ on GPU 0 beside test_cuda_rope_pf, the
# VLLM_CUDA_RS_PF prefill A/B and memcheck on GPU 1. The v8 and
# VLLM_TP_SP_AG / VLLM_TP_SYM=a2a rows refer to code since reverted
# (branches h8-gemv, h8-tpag).
set -u -o pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-$PWD/gpu-out}; mkdir -p "$FINAL"
L=/tmp/s7c; mkdir -p $L
t0=$(date +%s); say() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
pack() { tar czf "$FINAL/s7c_logs.tgz" -C "$L" . 2>/dev/null; }
trap pack EXIT
( python3 scripts/gpu_hf.py make --shape llama-8b --out /tmp/rand-llama-8b >$L/make.log 2>&1
  python3 scripts/gpu_hf.py make --shape qwen3-0.6b --out /tmp/rand-qwen3-0.6b >>$L/make.log 2>&1 ) &
say "1. gpu_run.sh"
OUT=$L/run VLLM_GPU_SANITIZE=0 timeout 220 bash scripts/gpu_run.sh >$L/run.txt 2>&1
echo "gpu_run rc=$?"; grep -E "^[a-z_0-9]+ exit [0-9]+" $L/run.txt | tr '\n' ';'; echo
grep -E "FAILED|Assertion|nccl symmetric|rank [0-9]:" $L/run.txt | head -20
source scripts/gpu_deps.sh >/dev/null
cmake --build build-gpu -j"$(nproc)" --target vllm tp_probe test_cuda_rope_pf >$L/build2.log 2>&1 || grep -E "error" $L/build2.log | head
cd build-gpu
for t in test_cuda_ops test_cuda_bf16_attn; do
  VLLM_CUDA_FLASH=0 VLLM_CUDA_SPEED=0 timeout 120 ./$t >$L/${t}_noflash.log 2>&1; echo "$t (VLLM_CUDA_FLASH=0: k_pf) exit $?"
done
cd ..
pack
wait
say "2. gpu_tp.sh"
A="VLLM_TP_SP_A2A=1,VLLM_TP_SP_OVERLAP=1,VLLM_TP_NCCL_CTA=zero"
OUT=$L/tp VLLM_TP_SKIP_COMM=1 VLLM_TP_SIZES="1 2" VLLM_TP_PROMPT_LEN=2048 \
  VLLM_TP_PROBE_AB="VLLM_TP_SYM=1,VLLM_TP_NCCL_CTA=zero" \
  VLLM_TP_AB="$A,VLLM_TP_SYM=1 $A,VLLM_TP_SYM=1,VLLM_TP_SP_AG=a2a $A,VLLM_TP_SYM=1,VLLM_TP_SP_AG=oop $A,VLLM_TP_SYM=a2a,VLLM_TP_SP_AG=a2a" \
  VLLM_TP_GREEDY_ENV="$A,VLLM_TP_SYM=1,VLLM_TP_SP_AG=a2a" timeout 260 bash scripts/gpu_tp.sh >$L/tp.txt 2>&1
echo "gpu_tp rc=$?"
grep -E "prefill 8000|TP=[0-9g]+|greedy|tensor parallel|check|all_|reduce_scatter|GEMM|symmetric" $L/tp.txt | grep -v "^== \[" | cut -c1-300 | head -50
pack
say "3. GEMV v4 vs v8 in situ (GPU 0) | rope_pf test + prefill TTFT A/B, then memcheck (GPU 1)"
( export CUDA_VISIBLE_DEVICES=1
  (cd build-gpu && timeout 60 ./test_cuda_rope_pf) >$L/test_cuda_rope_pf.log 2>&1; echo "test_cuda_rope_pf exit $?" >$L/rpf.txt
  grep -E "speed|ident|differ|FAILED" $L/test_cuda_rope_pf.log | head -8 >>$L/rpf.txt
  for r in 1 2; do for s in qwen3-0.6b llama-8b; do for v in 0 1; do
    [ $s = llama-8b ] && [ $r = 2 ] && continue
    VLLM_CUDA_RS_PF=$v build-gpu/vllm bench --device cuda --model /tmp/rand-$s --num-prompts 8 --input-len 2048 --output-len 1 \
      --concurrency 1 --max-num-seqs 1 --max-num-batched-tokens 8192 >$L/ttft_${s}_${v}_$r.log 2>&1
    echo "prefill 2048 $s RS_PF=$v round $r: median TTFT $(sed -n 's/^Median TTFT (ms): *\([0-9.]*\).*/\1/p' $L/ttft_${s}_${v}_$r.log | head -1) ms" >>$L/rpf.txt
  done; done; done
  (cd build-gpu && VLLM_CUDA_SPEED=0 VLLM_CUDA_GEMV=8 VLLM_CUDA_FLASH=0 VLLM_CUDA_RS_PF=1 timeout 150 \
    compute-sanitizer --tool memcheck --error-exitcode 9 ./test_cuda_ops >$L/mc_ops.log 2>&1; echo "memcheck test_cuda_ops (GEMV 8, FLASH 0, RS_PF 1) exit $?" >$L/mc_ops.rc)
  (cd build-gpu && VLLM_CUDA_SPEED=0 timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 ./test_cuda_rope_pf >$L/mc_rpf.log 2>&1; echo "memcheck test_cuda_rope_pf exit $?" >>$L/mc_ops.rc)
) &
MC=$!
OUT=$L/dec LOG=$L/dec CUDA_VISIBLE_DEVICES=0 VLLM_DEC_SKIP_TESTS=1 VLLM_DEC_TESTS="" VLLM_DEC_SHAPES="llama-8b" \
  VLLM_DEC_CFGS="v4=VLLM_CUDA_GEMV:4 v8=VLLM_CUDA_GEMV:8" VLLM_DEC_ROUNDS=2 timeout 150 bash scripts/gpu_dec.sh 2>&1 | grep -v "^== \[" | tail -6
wait $MC; cat $L/rpf.txt $L/mc_ops.rc; grep -hE "ERROR SUMMARY" $L/mc_ops.log $L/mc_rpf.log | tail -2
say done
