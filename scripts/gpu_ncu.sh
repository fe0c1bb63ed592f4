#!/usr/bin/env bash
# gpu_ncu.sh — per-kernel GPU time of a prefill and of graphed decode steps
# (issue 6), from Nsight Compute, in one device call on the H200.
#
# For each shape of VLLM_NCU_SHAPES (default llama-8b; random bf16
# checkpoints made here by scripts/gpu_hf.py make) ncu records every kernel
# of `vllm run` with a 2048-token prompt and VLLM_NCU_DECODE (default 4)
# greedy tokens: duration and DRAM bytes only (one pass, no replay of the
# weights), clocks left to the driver (--clock-control none), caches flushed
# before each kernel (ncu's default: weights never fit the L2 anyway).
# Replayed CUDA graphs are profiled node by node. tools/ncu_summary.py then
# prints the time per kernel name for the prefill (the kernels before the
# first decode step) and for one replayed decode step, with the bandwidth
# each kernel reached. Also, warm prefill through the engine: `vllm bench`
# 2048-in / 1-out at concurrency 1 (median TTFT of 6 requests).
# VLLM_PREBUILT=DIR takes vllm from DIR instead of building. Logs in $OUT.
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
t0=$(date +%s)
say() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
source scripts/gpu_deps.sh || exit 1
PY=${PYTHON:-python3}
SHAPES=${VLLM_NCU_SHAPES:-llama-8b}
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
( for s in $SHAPES; do
    [ -f /tmp/rand-$s/config.json ] || $PY scripts/gpu_hf.py make --shape "$s" --out /tmp/rand-$s || exit 1
  done ) >"$OUT/make.log" 2>&1 &
MPID=$!
B=${VLLM_PREBUILT:-}
if [ -z "$B" ] || ! "$B/vllm" --help >/dev/null 2>&1; then
    B=build-gpu
    say "build"
    cmake -S . -B $B -DVLLM_CUDA=ON -DCMAKE_BUILD_TYPE=Release >"$OUT/configure.log" 2>&1 ||
        { tail -30 "$OUT/configure.log"; exit 1; }
    cmake --build $B -j"$(nproc)" --target vllm >"$OUT/build.log" 2>&1 ||
        { grep -E "error" "$OUT/build.log" | head -30; exit 1; }
fi
V=$(cd "$B" && pwd)/vllm
wait $MPID || { tail -20 "$OUT/make.log"; exit 1; }
for s in $SHAPES; do
    M=/tmp/rand-$s
    ids=$($PY -c "import json, random; random.seed(1); V = json.load(open('$M/config.json'))['vocab_size'];
print(','.join(str(random.randrange(V // 100, min(V, 100000))) for _ in range(2048)))")
    say "$s: warm prefill through the engine (vllm bench 2048-in / 1-out, concurrency 1)"
    for n in 1024 2048; do
        $V bench --device cuda --model $M --num-prompts 6 --input-len $n --output-len 1 --concurrency 1 \
            --max-num-seqs 1 --max-num-batched-tokens 8192 >"$OUT/bench_ttft_${s}_$n.log" 2>&1
        echo "input $n: $(grep -E 'Median TTFT|Mean TTFT' "$OUT/bench_ttft_${s}_$n.log" | tr -s ' ' | tr '\n' ';')"
    done
    say "$s: ncu over vllm run (2048-token prompt, ${VLLM_NCU_DECODE:-4} tokens)"
    timeout 400 "$NCU" --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
        --clock-control none --graph-profiling node --csv --print-units base --launch-count 4000 \
        $V run --device cuda --model $M --prompt-ids "$ids" --max-tokens "${VLLM_NCU_DECODE:-4}" --ignore-eos \
        --temperature 0 >"$OUT/ncu_$s.csv" 2>"$OUT/ncu_$s.err"
    echo "ncu exit $?"
    grep -vE '^"' "$OUT/ncu_$s.csv" | tail -5
    $PY tools/ncu_summary.py "$OUT/ncu_$s.csv"
    gzip -f "$OUT/ncu_$s.csv"
done
say "done"
