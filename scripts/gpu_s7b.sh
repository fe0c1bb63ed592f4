#!/usr/bin/env bash
# gpu_s7b.sh — session 7's second device call, kept as the record of its
# command (docs/DISTRIBUTED.md): test_cuda_comm (symmetric rounds in
# lockstep) with the system NCCL and with torch's bundled NCCL, then the
# TP=2 8k prefill A/B with whichever passed (none did: the odd-block bug).
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
L=/tmp/s7b; mkdir -p $L
t0=$(date +%s); say() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
pack() { tar czf "$OUT/s7b_logs.tgz" -C "$L" . 2>/dev/null; }
trap pack EXIT
source scripts/gpu_deps.sh >/dev/null || exit 1
[ -f /tmp/rand-llama-8b/config.json ] || (python3 scripts/gpu_hf.py make --shape llama-8b --out /tmp/rand-llama-8b >$L/make.log 2>&1) &
MPID=$!
B=build-gpu
cmake -S . -B $B -DVLLM_CUDA=ON -DCMAKE_BUILD_TYPE=Release >$L/configure.log 2>&1 || { tail -30 $L/configure.log; exit 1; }
cmake --build $B -j"$(nproc)" --target vllm test_cuda_comm tp_probe >$L/build.log 2>&1 || { grep -E "error" $L/build.log | head -30; exit 1; }
say built
echo "system NCCL: $(strings /usr/lib/x86_64-linux-gnu/libnccl.so.2 2>/dev/null | grep -m1 -E '^NCCL version') $(ldd $B/test_cuda_comm | grep nccl)"
TN=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))" 2>/dev/null)
echo "torch NCCL dir: $TN: $(python3 -c 'import torch; print(torch.cuda.nccl.version())' 2>&1 | tail -1)"
(cd $B && NCCL_DEBUG=VERSION timeout 150 ./test_cuda_comm) >$L/comm_sys.log 2>&1
echo "test_cuda_comm (system NCCL) exit $?" | tee -a $L/summary.txt; grep -E "NCCL version|nccl symmetric|rank [01]:|FAILED|ERROR|OK \]" $L/comm_sys.log | sort | uniq -c | sort -rn | head -30
if [ -n "$TN" ] && [ -f "$TN/libnccl.so.2" ]; then # always: the version comparison matters
  (cd $B && LD_LIBRARY_PATH=$TN:$LD_LIBRARY_PATH NCCL_DEBUG=VERSION timeout 150 ./test_cuda_comm) >$L/comm_torch.log 2>&1
  echo "test_cuda_comm (torch NCCL) exit $?" | tee -a $L/summary.txt; grep -E "NCCL version|nccl symmetric|rank [01]:|FAILED|ERROR|OK \]" $L/comm_torch.log | sort | uniq -c | sort -rn | head -30
fi
pack
wait $MPID
say "TP prefill A/B"
lib=; grep -q "^test_cuda_comm (torch NCCL) exit 0" $L/summary.txt && lib=$TN
grep -q "^test_cuda_comm (system NCCL) exit 0" $L/summary.txt && lib=sys
if [ -z "$lib" ]; then echo "no NCCL passed the symmetric test: TP A/B skipped"; else
  LP=$LD_LIBRARY_PATH; [ $lib != sys ] && LP=$lib:$LD_LIBRARY_PATH
  echo "TP A/B with NCCL from $lib"
  LD_LIBRARY_PATH=$LP OUT=$L/tp VLLM_TP_SIZES="1 2" VLLM_TP_GREEDY=0 VLLM_TP_SKIP_COMM=1 \
    VLLM_TP_AB="VLLM_TP_SP_OVERLAP=1,VLLM_TP_SYM=1,VLLM_TP_NCCL_CTA=zero VLLM_TP_SP_A2A=1,VLLM_TP_SP_OVERLAP=1,VLLM_TP_SYM=1,VLLM_TP_NCCL_CTA=zero" \
    timeout ${S7B_TP_T:-200} bash scripts/gpu_tp.sh 2>&1 | grep -E "prefill 8000|TP=2:|tensor parallel|symmetric|all-|reduce" | grep -v "^== \[" | head -40
fi
say done
