#!/usr/bin/env bash
# gpu_profile.sh — where the GPU time of a step goes (issue 6), one device
# call on the H200:
#   - the CUDA op tests (quick), then, per shape of VLLM_PROFILE_SHAPES
#     (default "llama-8b qwen3-0.6b"; random bf16 checkpoints made here by
#     scripts/gpu_hf.py make, in the background while the tests run):
#       - `vllm run` whole-prompt prefill of 2048 tokens (2 reps, default
#         settings) and batch-1 greedy decode (512-token prompt + 256);
#       - the per-op GPU time table (VLLM_CUDA_PROFILE=1) of a 2048-token
#         prefill + 64 decode steps, run with VLLM_CUDA_PDL=0 (with PDL on an
#         op's event time includes its wait on the previous kernel) and
#         VLLM_CUDA_GRAPHS=0 (a replayed graph is not timed per op);
#       - with nsys on the machine: a kernel summary of 64 graphed decode
#         steps (--cuda-graph-trace=node);
#   - compute-sanitizer memcheck over VLLM_PROFILE_MEMCHECK (default
#     test_cuda_ops test_cuda_model), each capped at
#     VLLM_PROFILE_MEMCHECK_SECONDS (default 150).
# VLLM_PREBUILT=DIR takes vllm and the test binaries from DIR (a
# -DVLLM_CUDA=ON build made elsewhere, same CUDA major) instead of building.
# Logs into $OUT.
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
t0=$(date +%s)
say() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
source scripts/gpu_deps.sh || exit 1
PY=${PYTHON:-python3}
SHAPES=${VLLM_PROFILE_SHAPES:-"llama-8b qwen3-0.6b"}
TESTS=(test_cuda_fused test_cuda_ops test_cuda_model test_cuda_comm test_cuda_sample test_cuda_flash test_cuda_combine
    test_cuda_gemm test_cuda_paged_fd)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader || true
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
echo "nsys: ${NSYS:-none}; ncu: $(command -v ncu || echo none)"

( for s in $SHAPES; do
    [ -f /tmp/rand-$s/config.json ] || $PY scripts/gpu_hf.py make --shape "$s" --out /tmp/rand-$s || exit 1
  done ) >"$OUT/make.log" 2>&1 &
MPID=$!

B=${VLLM_PREBUILT:-}
if [ -z "$B" ] || ! "$B/vllm" --help >/dev/null 2>&1; then
    [ -n "$B" ] && echo "prebuilt binaries do not run here: building"
    B=build-gpu
    say "build"
    cmake -S . -B $B -DVLLM_CUDA=ON -DCMAKE_BUILD_TYPE=Release >"$OUT/configure.log" 2>&1 ||
        { tail -30 "$OUT/configure.log"; exit 1; }
    cmake --build $B -j"$(nproc)" --target vllm "${TESTS[@]}" >"$OUT/build.log" 2>&1 ||
        { grep -E "error" "$OUT/build.log" | head -30; exit 1; }
fi
B=$(cd "$B" && pwd)
V=$B/vllm

for t in "${TESTS[@]}"; do
    [ -x "$B/$t" ] || continue
    (cd "$B" && VLLM_CUDA_SPEED=0 timeout 120 ./$t) >"$OUT/$t.log" 2>&1
    echo "$t exit $?: $(grep -cE '^\[       OK \]' "$OUT/$t.log") ok, $(grep -cE '^\[  FAILED  \] test' "$OUT/$t.log") failed"
done
say "waiting for the checkpoints"
wait $MPID || { tail -20 "$OUT/make.log"; exit 1; }

rand_ids() { # n seed model
    $PY -c "import json, random; random.seed($2); V = json.load(open('$3/config.json'))['vocab_size'];
print(','.join(str(random.randrange(V // 100, min(V, 100000))) for _ in range($1)))"
}
for s in $SHAPES; do
    M=/tmp/rand-$s
    rand_ids 512 0 $M >"$OUT/p512.ids"
    rand_ids 2048 1 $M >"$OUT/p2048.ids"
    say "$s: whole-prompt prefill 2048 (2 reps) and batch-1 decode"
    for rep in 1 2; do
        $V run --device cuda --model $M --prompt-ids "$(cat "$OUT/p2048.ids")" --max-tokens 1 --ignore-eos \
            --temperature 0 >/dev/null 2>"$OUT/pf_${s}_$rep.err"
        echo "prefill rep $rep: $(grep -E 'prompt:' "$OUT/pf_${s}_$rep.err" | head -1)"
    done
    $V run --device cuda --model $M --prompt-ids "$(cat "$OUT/p512.ids")" --max-tokens 256 --ignore-eos \
        --temperature 0 >/dev/null 2>"$OUT/dec_$s.err"
    grep -E "prompt:|decode:" "$OUT/dec_$s.err"
    say "$s: per-op GPU time (PDL off, graphs off): prefill 2048 + 64 decode steps"
    VLLM_CUDA_PROFILE=1 VLLM_CUDA_PDL=0 VLLM_CUDA_GRAPHS=0 $V run --device cuda --model $M \
        --prompt-ids "$(cat "$OUT/p2048.ids")" --max-tokens 64 --ignore-eos --temperature 0 >/dev/null \
        2>"$OUT/prof_$s.txt"
    cat "$OUT/prof_$s.txt" | grep -vE "^\s*$" | tail -60
    if [ -n "$NSYS" ]; then
        say "$s: nsys, 64 graphed decode steps after a 512-token prompt"
        timeout 120 "$NSYS" profile --cuda-graph-trace=node -t cuda -o "$OUT/nsys_$s" --force-overwrite true \
            $V run --device cuda --model $M --prompt-ids "$(cat "$OUT/p512.ids")" --max-tokens 64 --ignore-eos \
            --temperature 0 >/dev/null 2>"$OUT/nsys_$s.err"
        timeout 60 "$NSYS" stats --report cuda_gpu_kern_sum --format csv "$OUT/nsys_$s.nsys-rep" \
            >"$OUT/nsys_kern_$s.csv" 2>/dev/null
        head -40 "$OUT/nsys_kern_$s.csv" | cut -c1-220
        rm -f "$OUT/nsys_$s.nsys-rep" "$OUT"/nsys_$s.sqlite
    fi
done

if command -v compute-sanitizer >/dev/null; then
    for t in ${VLLM_PROFILE_MEMCHECK:-test_cuda_ops test_cuda_model}; do
        say "compute-sanitizer memcheck $t"
        (cd "$B" && VLLM_CUDA_SPEED=0 timeout "${VLLM_PROFILE_MEMCHECK_SECONDS:-150}" compute-sanitizer \
            --tool memcheck --error-exitcode 9 ./$t) >"$OUT/memcheck_$t.log" 2>&1
        r=$?
        grep -E "ERROR SUMMARY|Invalid" "$OUT/memcheck_$t.log" | head -10
        echo "memcheck $t exit $r$([ $r = 124 ] && echo ' (time limit: not finished)')"
    done
fi
say "done"
