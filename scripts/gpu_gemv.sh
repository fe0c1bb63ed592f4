#!/usr/bin/env bash
# gpu_gemv.sh — the batch-1 decode GEMV on the H200 (issue 6), one device call:
#   1. correctness: test_cuda_ops (every GEMV variant vs the CPU op) and
#      test_cuda_fused (MATMUL_GLU, every variant);
#   2. test_cuda_speed's GEMV table: GB/s per shape and variant, graph replay;
#   3. `vllm run` decode tok/s of the full 8B shape (512-token prompt + 256
#      greedy tokens) per variant of VLLM_GEMV_E2E, VLLM_GEMV_REPS rounds (1);
#   4. Nsight Compute, each GEMV isolated (caches flushed, clocks left to the
#      driver): the first 10 GEMVs (prefill's LM head, then layers 0-1 of
#      the first decode step) of a Llama-3.1-8B-shaped random bf16 model
#      per variant of VLLM_GEMV_VARIANTS (VLLM_CUDA_GEMV values).
# VLLM_PREBUILT=DIR takes the binaries (vllm, test_cuda_*) from DIR instead
# of building. Logs in $OUT.
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
VARS=${VLLM_GEMV_VARIANTS-"1 4"}
E2E=${VLLM_GEMV_E2E-"1 4"}
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
t0=$(date +%s)
say() { echo "== [$(($(date +%s) - t0))s] $*"; }
source scripts/gpu_deps.sh >/dev/null || exit 1
# the full 8B shape (32 layers): one made earlier on this machine, or a new one
M=/tmp/gemv-llama-8b
for d in /tmp/rand-llama-8b /tmp/m8 $M; do
    if $PY -c "import json, sys; c = json.load(open('$d/config.json'))
sys.exit(not (c['num_hidden_layers'] == 32 and c['hidden_size'] == 4096 and c['vocab_size'] == 128256))" 2>/dev/null
    then M=$d; break; fi
done
(
    [ -f $M/config.json ] || $PY scripts/gpu_hf.py make --shape llama-8b --out $M
) >"$OUT/make.log" 2>&1 &
MPID=$!
B=${VLLM_PREBUILT:-}
if [ -z "$B" ] || ! "$B/vllm" --help >/dev/null 2>&1 || ldd "$B/test_cuda_ops" | grep -q "not found"; then
    say "build (prebuilt binaries missing or not runnable)"
    B=build-gpu
    cmake -S . -B $B -DVLLM_CUDA=ON -DCMAKE_BUILD_TYPE=Release >"$OUT/configure.log" 2>&1 ||
        { tail -30 "$OUT/configure.log"; exit 1; }
    cmake --build $B -j"$(nproc)" --target vllm test_cuda_ops test_cuda_fused test_cuda_speed >"$OUT/build.log" 2>&1 ||
        { grep -E "error" "$OUT/build.log" | head -30; exit 1; }
fi
B=$(cd "$B" && pwd)
say "tests"
(cd "$B" && ./test_cuda_ops && ./test_cuda_fused) >"$OUT/tests.log" 2>&1
echo "tests exit $?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|cuda vs cpu: matmul|ERROR|fail" "$OUT/tests.log" | head -30
wait $MPID || { tail -20 "$OUT/make.log"; exit 1; }
say "test_cuda_speed: GEMV GB/s per shape and variant (graph replay)"
VLLM_CUDA_BENCH_MODEL= "$B/test_cuda_speed" 2>&1 | grep -E "speed: gemv|FAILED|PASSED" 
ids=$($PY -c "import random; random.seed(1); print(','.join(str(random.randrange(1000, 100000)) for _ in range(512)))")
for rep in $(seq "${VLLM_GEMV_REPS:-1}"); do
    for v in $E2E; do
        say "vllm run, VLLM_CUDA_GEMV=$v: 8B shape ($M), 512-token prompt + 256 tokens"
        VLLM_CUDA_GEMV=$v "$B/vllm" run --device cuda --model $M --prompt-ids "$ids" --max-tokens 256 \
            --ignore-eos --temperature 0 2>&1 >/dev/null | grep -E "decode:|rror"
    done
done
for v in $VARS; do
    say "ncu, VLLM_CUDA_GEMV=$v (8B shape: prefill LM head, decode layers 0-1)"
    VLLM_CUDA_GEMV=$v timeout 60 "$NCU" -k regex:gemv --metrics gpu__time_duration.sum,dram__bytes_read.sum \
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
say "done"
