#!/usr/bin/env bash
# gpu_s11c.sh — session 11, call 2 (nvidia-h200): the new act_dtype rule
# (bf16 rows from 2 tokens over bf16 W) and skinny f32 x rows by default,
# A/B against the old rule; and where a GGUF decode's time goes.
#   1. build; test_cuda_gemm (act_dtype; the quant speed table: Q4_0 / Q4_K
#      / Q6_K / Q8_0 on the 8B shapes, n = 1..16), test_cuda_model,
#      test_cuda_fused;
#   2. `vllm bench` 1024-in / 256-out, one wave of c requests: 0.6B at c =
#      2 3 4 8, old (VLLM_CUDA_GEMV_MAX_N=2 VLLM_CUDA_SKINNY_F32X=0) / new,
#      two rounds; 8B at c = 2 8, old (F32X=0) / new;
#   3. a random Llama-3.2-1B-shaped GGUF (make_random_gguf f16, our
#      quantize to Q4_0 / Q4_K_M / Q8_0): `vllm run` batch-1 decode (512 +
#      128), and the per-op GPU time at 1 request (VLLM_CUDA_PROFILE=1,
#      graphs and PDL off).
#   OUT=$OUT bash scripts/gpu_s11c.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-$PWD/gpu-out}; mkdir -p "$FINAL"
L=/tmp/s11c; mkdir -p $L
t0=$(date +%s); say() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
trap 'tar czf "$FINAL/s11c_logs.tgz" -C $L --exclude="*.gguf" . 2>/dev/null' EXIT
source scripts/gpu_deps.sh >/dev/null || exit 1
PY=${PYTHON:-python3}
W=$(ls .wheels/gguf-*.whl 2>/dev/null | head -1)
[ -n "$W" ] && export PYTHONPATH=$PWD/$W${PYTHONPATH:+:$PYTHONPATH}
( for s in qwen3-0.6b llama-8b; do [ -f /tmp/rand-$s/config.json ] ||
    $PY scripts/gpu_hf.py make --shape $s --out /tmp/rand-$s >$L/make_$s.log 2>&1; done ) &
MK=$!
G=$L/rand-llama-1b
( $PY tools/make_random_gguf.py --shape llama-1b --qtype f16 --out $G-f16.gguf >$L/make_gguf.log 2>&1; echo "make_gguf exit $?" >>$L/make_gguf.log ) &
MG=$!
B=build-gpu
say build
cmake -S . -B $B -DVLLM_CUDA=ON -DCMAKE_BUILD_TYPE=Release >$L/configure.log 2>&1 || { tail -20 $L/configure.log; exit 1; }
cmake --build $B -j"$(nproc)" --target vllm quantize test_cuda_gemm test_cuda_model test_cuda_fused >$L/build.log 2>&1 ||
    { grep -E "error" $L/build.log | head -20; exit 1; }
say tests
(cd $B && timeout 150 ./test_cuda_gemm) >$L/gemm.log 2>&1
echo "test_cuda_gemm exit $? $(grep -E 'PASSED|FAILED' $L/gemm.log | head -2 | tr '\n' ' ')"
grep -E "act_dtype|skinny-quant|^\[  (FAILED|ERROR)|LINE" $L/gemm.log | head -70
for t in test_cuda_model test_cuda_fused; do
    (cd $B && VLLM_CUDA_SPEED=0 timeout 150 ./$t) >$L/$t.log 2>&1
    echo "$t exit $? $(grep -E 'PASSED|FAILED' $L/$t.log | head -2 | tr '\n' ' ')"
done
wait $MK
bench() { # shape conc out env...
    local s=$1 c=$2 o=$3; shift 3
    env "$@" ./$B/vllm bench --device cuda --model /tmp/rand-$s --num-prompts $c --input-len 1024 --output-len $o \
        --concurrency $c --max-num-seqs $c --max-num-batched-tokens 16384 --gpu-memory-utilization 0.9
}
tp() { echo "$(sed -n 's/Output token throughput (tok\/s): *\([0-9.]*\)/\1/p' $1) tok/s $(sed -n 's/Mean TPOT *(ms): *\([0-9.]*\)/\1/p' $1) ms"; }
say "bench old / new rule"
for r in 1 2; do
    for c in 2 3 4 8; do
        bench qwen3-0.6b $c 256 VLLM_CUDA_GEMV_MAX_N=2 VLLM_CUDA_SKINNY_F32X=0 >$L/b06_${r}_c${c}_old.log 2>&1
        bench qwen3-0.6b $c 256 >$L/b06_${r}_c${c}_new.log 2>&1
        echo "round $r qwen3-0.6b conc $c: old $(tp $L/b06_${r}_c${c}_old.log); new $(tp $L/b06_${r}_c${c}_new.log)"
    done
done
for c in 2 8; do
    bench llama-8b $c 256 VLLM_CUDA_SKINNY_F32X=0 >$L/b8_c${c}_old.log 2>&1
    bench llama-8b $c 256 >$L/b8_c${c}_new.log 2>&1
    echo "llama-8b conc $c: old $(tp $L/b8_c${c}_old.log); new $(tp $L/b8_c${c}_new.log)"
done
say "gguf"
wait $MG; tail -2 $L/make_gguf.log
ls -la $G-f16.gguf | awk '{print $5, $9}'
ids=$($PY -c "import random; random.seed(0); print(','.join(str(random.randrange(100, 30000)) for _ in range(512)))")
rate() { sed -n "s/.*$1: [0-9]* tokens, \([0-9.]*\) tok\/s.*/\1/p" | head -1; }
for q in f16 q4_0 q4_K_M q8_0; do
    [ $q = f16 ] || ./$B/quantize $G-f16.gguf $G-$q.gguf $q --threads 16 >$L/quant_$q.log 2>&1 || { tail -3 $L/quant_$q.log; continue; }
    sz=$(stat -c %s $G-$q.gguf)
    ./$B/vllm run --device cuda --model $G-$q.gguf --prompt-ids "$ids" --max-tokens 128 --ignore-eos --temperature 0 \
        >/dev/null 2>$L/run_$q.err
    echo "gguf $q ($sz bytes): decode $(rate decode <$L/run_$q.err) tok/s"
    VLLM_CUDA_PROFILE=1 VLLM_CUDA_GRAPHS=0 VLLM_CUDA_PDL=0 ./$B/vllm run --device cuda --model $G-$q.gguf \
        --prompt-ids "$ids" --max-tokens 64 --ignore-eos --temperature 0 >/dev/null 2>$L/prof_$q.err
    grep -A16 "cuda profile" $L/prof_$q.err | head -16
done
say done
