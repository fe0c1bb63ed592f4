#!/usr/bin/env bash
# gpu_s11b.sh — prepared in session 10 for session 11 (nvidia-h200, ~5 min):
# GGUF weights in batched decode, end to end: the skinny kernel over block
# weights (VLLM_CUDA_SKINNY_QUANT=1, default off until this runs) against
# the f32-row quant GEMV (2-8 rows) and cuBLAS over a dequantized copy.
#   1. build vllm, quantize, test_cuda_gemm; test_cuda_gemm (test_skinny_quant
#      against a double reference; the Q4_K / Q8_0 speed lines);
#   2. a random Llama-3.2-1B-shaped GGUF (tools/make_random_gguf.py, Q4_0;
#      the `gguf` package from a wheel carried in .wheels/, pure Python),
#      re-quantized by our `quantize` to Q4_K_M and Q8_0;
#   3. `vllm bench` 512-in / 128-out, one wave of c requests, QUANT off /
#      on, c = 1 2 4 8 16, each model; greedy `vllm run` ids off == on at
#      batch 1 (the GEMV takes one row either way).
# SKINNY_QUANT becomes the default if the tests pass and no c is slower.
#   OUT=$OUT bash scripts/gpu_s11b.sh      (VLLM_S11B_DEVICE=cpu: a local dry run, tiny shape)
set -u -o pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-$PWD/gpu-out}; mkdir -p "$FINAL"
L=/tmp/s11b; mkdir -p $L
t0=$(date +%s); say() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
trap 'tar czf "$FINAL/s11b_logs.tgz" -C $L --exclude="*.gguf" . 2>/dev/null' EXIT
DEV=${VLLM_S11B_DEVICE:-cuda}
PY=${PYTHON:-python3}
if [ "$DEV" = cuda ]; then
    source scripts/gpu_deps.sh >/dev/null || exit 1
    B=build-gpu; cuda=ON; SHAPE=llama-1b
else
    B=${VLLM_S11B_BUILD:-build}; cuda=OFF; SHAPE=tiny
fi
W=$(ls .wheels/gguf-*.whl 2>/dev/null | head -1)
[ -n "$W" ] && export PYTHONPATH=$PWD/$W${PYTHONPATH:+:$PYTHONPATH} # a pure-Python wheel imports as a zip
say build
if [ -z "${VLLM_GPU_PREBUILT:-}" ]; then
cmake -S . -B $B -DVLLM_CUDA=$cuda -DCMAKE_BUILD_TYPE=Release >$L/configure.log 2>&1 || { tail -20 $L/configure.log; exit 1; }
TG=(vllm quantize); [ $DEV = cuda ] && TG+=(test_cuda_gemm)
cmake --build $B -j"$(nproc)" --target "${TG[@]}" >$L/build.log 2>&1 || { grep -E "error" $L/build.log | head -20; exit 1; }
fi
if [ $DEV = cuda ]; then
    (cd $B && timeout 150 ./test_cuda_gemm) >$L/gemm.log 2>&1
    echo "test_cuda_gemm exit $? $(grep -E 'PASSED|FAILED' $L/gemm.log | head -2 | tr '\n' ' ')"
    grep -E "skinny Q|skinny-quant" $L/gemm.log | head -60
fi
say "models"
M=$L/rand-$SHAPE
timeout 240 $PY tools/make_random_gguf.py --shape $SHAPE --qtype q4_0 --out $M-q4_0.gguf >$L/make.log 2>&1 ||
    { echo "make_random_gguf failed: $(tail -3 $L/make.log)"; exit 1; }
./$B/quantize $M-q4_0.gguf $M-q4_K_M.gguf q4_K_M >$L/q4km.log 2>&1 || { tail -3 $L/q4km.log; exit 1; }
./$B/quantize $M-q4_0.gguf $M-q8_0.gguf q8_0 >$L/q8.log 2>&1 || { tail -3 $L/q8.log; exit 1; }
ls -la $L/*.gguf | awk '{print $5, $9}'
say "bench QUANT off / on"
for q in q4_0 q4_K_M q8_0; do
    ids=$($PY -c "import random; random.seed(0); print(','.join(str(random.randrange(100, 900)) for _ in range(64)))")
    for k in 0 1; do
        VLLM_CUDA_SKINNY_QUANT=$k ./$B/vllm run --device $DEV --model $M-$q.gguf --prompt-ids "$ids" --max-tokens 32 \
            --ignore-eos --temperature 0 --print-ids >$L/ids_${q}_$k.txt 2>$L/run_${q}_$k.err
    done
    echo "$q greedy batch 1 off == on: $(cmp -s $L/ids_${q}_0.txt $L/ids_${q}_1.txt && echo same || echo DIFF)"
    for c in 1 2 4 8 16; do
        line="$q conc $c:"
        for k in 0 1; do
            VLLM_CUDA_SKINNY_QUANT=$k ./$B/vllm bench --device $DEV --model $M-$q.gguf --num-prompts $c --input-len 512 \
                --output-len 128 --concurrency $c --max-num-seqs $c --max-num-batched-tokens 16384 >$L/b_${q}_c${c}_$k.log 2>&1
            line="$line quant=$k $(sed -n 's/Output token throughput (tok\/s): *\([0-9.]*\)/\1/p' $L/b_${q}_c${c}_$k.log) tok/s $(sed -n 's/Mean TPOT *(ms): *\([0-9.]*\)/\1/p' $L/b_${q}_c${c}_$k.log) ms;"
        done
        echo "$line"
    done
done
say done
