#!/usr/bin/env bash
# gpu_gemv.sh — the batch-1 decode GEMV on the H200 (issue 6), one device call:
#   1. correctness: test_cuda_ops (every GEMV variant vs the CPU op) and
#      test_cuda_fused (MATMUL_GLU, every variant), then compute-sanitizer
#      memcheck of test_cuda_ops' matmul tests under VLLM_CUDA_GEMV=
#      $VLLM_GEMV_MEMCHECK (7: the bulk GEMV; empty: none); on the second
#      GPU when there is one, while 2-3 run on the first;
#   2. test_cuda_speed's GEMV table: GB/s per shape and column (graph
#      replay); VLLM_GEMV_COLS = its VLLM_CUDA_SPEED_GEMV ("V" or
#      "V:BULKCFG" per column; empty: variants 0..8);
#   3. `vllm run --device cuda` decode tok/s on the random checkpoints of
#      VLLM_GEMV_SHAPES (llama-8b qwen3-0.6b; 512-token prompt + 256 greedy
#      tokens) per entry of VLLM_GEMV_E2E ("V" or "V:BULKCFG"), alternated
#      over VLLM_GEMV_REPS rounds (2); greedy ids compared with the first run;
#   4. Nsight Compute per variant of VLLM_GEMV_VARIANTS (empty by default):
#      the first 10 GEMVs of the 8B (prefill's LM head, decode layers 0-1).
# VLLM_PREBUILT=DIR takes the binaries (vllm, test_cuda_*) from DIR instead
# of building. Logs in $OUT (gemv_logs.tgz).
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
LOG=/tmp/gemv-logs
mkdir -p "$OUT" "$LOG"
PY=${PYTHON:-python3}
VARS=${VLLM_GEMV_VARIANTS-}
E2E=${VLLM_GEMV_E2E-"4 7"}
SHAPES=${VLLM_GEMV_SHAPES-"llama-8b qwen3-0.6b"}
COLS=${VLLM_GEMV_COLS-}
MC=${VLLM_GEMV_MEMCHECK-7}
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
t0=$(date +%s)
say() { echo "== [$(($(date +%s) - t0))s] $*"; }
source scripts/gpu_deps.sh >/dev/null || exit 1
NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)
TGPU=0
[ "$NGPU" -ge 2 ] && TGPU=1
( for s in $SHAPES; do
    [ -f /tmp/rand-$s/config.json ] || $PY scripts/gpu_hf.py make --shape "$s" --out /tmp/rand-$s || exit 1
  done ) >"$LOG/make.log" 2>&1 &
MPID=$!
B=${VLLM_PREBUILT:-}
if [ -z "$B" ] || ! "$B/vllm" --help >/dev/null 2>&1 || ldd "$B/test_cuda_ops" | grep -q "not found"; then
    say "build (prebuilt binaries missing or not runnable)"
    B=build-gpu
    cmake -S . -B $B -DVLLM_CUDA=ON -DCMAKE_BUILD_TYPE=Release >"$LOG/configure.log" 2>&1 ||
        { tail -30 "$LOG/configure.log"; exit 1; }
    cmake --build $B -j"$(nproc)" --target vllm test_cuda_ops test_cuda_fused test_cuda_speed >"$LOG/build.log" 2>&1 ||
        { grep -E "error" "$LOG/build.log" | head -30; exit 1; }
fi
B=$(cd "$B" && pwd)
say "tests on GPU $TGPU (background), then memcheck (VLLM_CUDA_GEMV=${MC:-none})"
(
    cd "$B"
    for t in test_cuda_ops test_cuda_fused; do
        CUDA_VISIBLE_DEVICES=$TGPU timeout 200 ./$t >"$LOG/$t.log" 2>&1
        echo "$t exit $?: $(grep -cE '^\[       OK \]' "$LOG/$t.log") ok, $(grep -cE '^\[  FAILED  \]' "$LOG/$t.log") failed"
    done
    if [ -n "$MC" ]; then
        CUDA_VISIBLE_DEVICES=$TGPU VLLM_CUDA_GEMV=$MC VLLM_CUDA_SPEED=0 VLLM_TEST_FILTER="test_matmul*" timeout 200 \
            compute-sanitizer --tool memcheck ./test_cuda_ops >"$LOG/memcheck_ops.log" 2>&1
        echo "memcheck test_cuda_ops (matmul tests, VLLM_CUDA_GEMV=$MC) exit $?: $(grep -E 'ERROR SUMMARY' "$LOG/memcheck_ops.log" | tail -1); $(grep -cE '^\[       OK \]' "$LOG/memcheck_ops.log") ok"
    fi
) >"$LOG/tests.sum" 2>&1 &
TPID=$!
[ "$TGPU" = 0 ] && wait $TPID
say "test_cuda_speed: GEMV GB/s per shape and column (graph replay, GPU 0)"
CUDA_VISIBLE_DEVICES=0 VLLM_CUDA_SPEED_GEMV="$COLS" VLLM_CUDA_BENCH_MODEL= "$B/test_cuda_speed" >"$LOG/speed.log" 2>&1
grep -E "speed: gemv|FAILED|PASSED" "$LOG/speed.log"
wait $MPID || { tail -20 "$LOG/make.log"; exit 1; }
rate() { sed -n "s/.*$1: [0-9]* tokens, \([0-9.]*\) tok\/s.*/\1/p" | head -1; }
for s in $SHAPES; do
    M=/tmp/rand-$s
    ids=$($PY -c "import json, random; random.seed(0); V = json.load(open('$M/config.json'))['vocab_size'];
print(','.join(str(random.randrange(V // 100, min(V, 100000))) for _ in range(512)))")
    first=
    for r in $(seq 1 "${VLLM_GEMV_REPS:-2}"); do
        line="$s round $r:"
        for e in $E2E; do
            v=${e%%:*}
            cfg=
            [ "$v" != "$e" ] && cfg=${e#*:}
            tag=$(echo "$e" | tr ':,' '__')
            CUDA_VISIBLE_DEVICES=0 VLLM_CUDA_GEMV=$v VLLM_CUDA_GEMV_BULK=$cfg "$B/vllm" run --device cuda --model "$M" \
                --prompt-ids "$ids" --max-tokens 256 --ignore-eos --temperature 0 --print-ids \
                >"$LOG/ids_${s}_${tag}_$r.txt" 2>"$LOG/run_${s}_${tag}_$r.err"
            d=$(rate decode <"$LOG/run_${s}_${tag}_$r.err")
            [ -n "$first" ] || first="$LOG/ids_${s}_${tag}_$r.txt"
            same=same
            cmp -s "$first" "$LOG/ids_${s}_${tag}_$r.txt" || same=DIFF
            [ -s "$LOG/ids_${s}_${tag}_$r.txt" ] || same=EMPTY
            line="$line v$e ${d:-?} ($same)"
        done
        echo "$line"
    done
done
M=/tmp/rand-llama-8b
for v in $VARS; do
    [ -f $M/config.json ] || break
    ids=$($PY -c "import random; random.seed(1); print(','.join(str(random.randrange(1000, 100000)) for _ in range(512)))")
    say "ncu, VLLM_CUDA_GEMV=$v (8B shape: prefill LM head, decode layers 0-1)"
    CUDA_VISIBLE_DEVICES=0 VLLM_CUDA_GEMV=$v timeout 60 "$NCU" -k regex:gemv --metrics gpu__time_duration.sum,dram__bytes_read.sum \
        --clock-control none --csv --print-units base --launch-count 10 \
        "$B/vllm" run --device cuda --model $M --prompt-ids "$ids" --max-tokens 3 --ignore-eos \
        --temperature 0 >/tmp/ncu_v$v.csv 2>/tmp/ncu_v$v.err || tail -5 /tmp/ncu_v$v.err
    $PY - /tmp/ncu_v$v.csv <<'EOF'
import sys
sys.path.insert(0, "tools")
import ncu_summary as n
for k in n.kernels(sys.argv[1]):
    t, b = k.get("gpu__time_duration.sum", 0), k.get("dram__bytes_read.sum", 0)
    print(f"  {n.short(k['name'])[:40]:40s} grid {k['grid']:>14s} {t / 1e3:8.1f} us {b / 1e6:8.1f} MB "
          f"{b / t if t else 0:7.0f} GB/s")
EOF
done
wait $TPID
say "tests"
cat "$LOG/tests.sum"
grep -hE "^\[  FAILED|cuda vs cpu: matmul|matmul.*>|ERROR SUMMARY" "$LOG"/test_cuda_*.log "$LOG"/memcheck_ops.log 2>/dev/null | head -20
tar -czf "$OUT/gemv_logs.tgz" -C "$LOG" . 2>/dev/null
say "done"
