#!/usr/bin/env bash
# gpu_dec.sh — batch-1 decode A/B of the pre-wait switches (issue 6,
# branch h6-dec) in one device call: build vllm and the tests it touches,
# run test_cuda_paged_fd (with its speed sweep) and test_cuda_fused,
# compute-sanitizer memcheck on both (speed sweep off), then `vllm run
# --device cuda` greedy, 512-token prompt + 256 tokens, on random
# Llama-3.1-8B- and Qwen3-0.6B-shaped bf16 checkpoints, each configuration
# of VLLM_DEC_CFGS in turn, VLLM_DEC_ROUNDS rounds (alternated), greedy ids
# of every run compared with the first configuration's.
#   configurations: name=ENV,ENV (ENV as VAR:VALUE), e.g. off=VLLM_CUDA_FD_PRE:0
# VLLM_DEC_SKIP_TESTS=1 skips the tests and memcheck, VLLM_DEC_TESTS picks
# them (default "test_cuda_paged_fd test_cuda_fused"); VLLM_DEC_SHAPES picks
# the shapes (default "llama-8b qwen3-0.6b"; empty: no runs). Logs under $LOG (default
# /tmp/declog); the test and memcheck logs are copied to $OUT.
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
LOG=${LOG:-/tmp/declog}
mkdir -p "$OUT" "$LOG"
t0=$(date +%s)
say() { echo "== [$(($(date +%s) - t0))s] $*"; }
source scripts/gpu_deps.sh || exit 1
PY=${PYTHON:-python3}
SHAPES=${VLLM_DEC_SHAPES-llama-8b qwen3-0.6b}
TESTS=${VLLM_DEC_TESTS-test_cuda_paged_fd test_cuda_fused}
CFGS=${VLLM_DEC_CFGS:-"off=VLLM_CUDA_FD_PRE:0,VLLM_CUDA_ROW_PRE:0 fd=VLLM_CUDA_FD_PRE:1,VLLM_CUDA_ROW_PRE:0 row=VLLM_CUDA_FD_PRE:0,VLLM_CUDA_ROW_PRE:1 both=VLLM_CUDA_FD_PRE:1,VLLM_CUDA_ROW_PRE:1"}
ROUNDS=${VLLM_DEC_ROUNDS:-2}
( for s in $SHAPES; do
    [ -f /tmp/rand-$s/config.json ] || $PY scripts/gpu_hf.py make --shape "$s" --out /tmp/rand-$s || exit 1
  done ) >"$LOG/make.log" 2>&1 &
MPID=$!
B=build-gpu
say "build"
cmake -S . -B $B -DVLLM_CUDA=ON -DCMAKE_BUILD_TYPE=Release >"$LOG/configure.log" 2>&1 ||
    { tail -30 "$LOG/configure.log"; exit 1; }
cmake --build $B -j"$(nproc)" --target ${SHAPES:+vllm} $TESTS >"$LOG/build.log" 2>&1 ||
    { grep -E "error" "$LOG/build.log" | head -30; exit 1; }
if [ "${VLLM_DEC_SKIP_TESTS:-0}" != 1 ]; then
    for t in $TESTS; do
        say "$t"
        (cd $B && timeout 120 ./$t) >"$LOG/$t.log" 2>&1
        echo "$t exit $?: $(grep -cE '^\[       OK \]' "$LOG/$t.log") ok, $(grep -cE '^\[  FAILED  \]' "$LOG/$t.log") failed"
        grep -E "FAILED|error|speed:|ctas" "$LOG/$t.log" | head -60
    done
    say "memcheck (speed sweeps off)"
    pids=
    for t in $TESTS; do
        (cd $B && VLLM_CUDA_SPEED=0 timeout 100 compute-sanitizer --tool memcheck ./$t) >"$LOG/memcheck_$t.log" 2>&1 &
        pids="$pids $!"
    done
    wait $pids
    for t in $TESTS; do
        echo "memcheck $t: $(grep -E 'ERROR SUMMARY' "$LOG/memcheck_$t.log" | tail -1); $(grep -cE '^\[  PASSED  \]' "$LOG/memcheck_$t.log") passed lines"
    done
fi
wait $MPID || { tail -20 "$LOG/make.log"; exit 1; }
V=$(cd $B && pwd)/vllm
rate() { sed -n "s/.*$1: [0-9]* tokens, \([0-9.]*\) tok\/s.*/\1/p" | head -1; }
for s in $SHAPES; do
    M=/tmp/rand-$s
    ids=$($PY -c "import json, random; random.seed(0); V = json.load(open('$M/config.json'))['vocab_size'];
print(','.join(str(random.randrange(V // 100, min(V, 100000))) for _ in range(512)))")
    first=
    for r in $(seq 1 "$ROUNDS"); do
        line="$s round $r:"
        for c in $CFGS; do
            name=${c%%=*}
            envs=$(echo "${c#*=}" | tr ',' ' ' | sed 's/:/=/g')
            env $envs "$V" run --device cuda --model "$M" --prompt-ids "$ids" --max-tokens 256 --ignore-eos \
                --temperature 0 --print-ids >"$LOG/ids_${s}_${name}_$r.txt" 2>"$LOG/run_${s}_${name}_$r.err"
            d=$(rate decode <"$LOG/run_${s}_${name}_$r.err")
            [ -n "$first" ] || first="$LOG/ids_${s}_${name}_$r.txt"
            same=same
            cmp -s "$first" "$LOG/ids_${s}_${name}_$r.txt" || same=DIFF
            line="$line $name ${d:-?} ($same)"
        done
        echo "$line"
    done
done
# the files that matter (at most 8 come back)
cp "$LOG"/test_cuda_paged_fd.log "$LOG"/test_cuda_fused.log "$LOG"/memcheck_*.log "$OUT/" 2>/dev/null
say "done"
