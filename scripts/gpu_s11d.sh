#!/usr/bin/env bash
# gpu_s11d.sh — session 11, call 3 (nvidia-h200): the GGUF decode GEMV
# (cuda_gemv_q.cu, default on; VLLM_CUDA_GEMV_Q=0 the old kernels).
#   1. build; test_cuda_gemm (test_gemv_quant against a double reference;
#      the quant speed table: default / old / skinny on the 8B shapes),
#      test_cuda_ops, test_cuda_fused; memcheck of test_cuda_gemm (speed off);
#   2. a random Llama-3.2-1B-shaped GGUF (make_random_gguf f16, our quantize
#      to Q4_0 / Q4_K_M / Q8_0): greedy ids of 48 tokens on the CPU, on the
#      GPU with the new and the old kernel; `vllm run` batch-1 decode tok/s
#      new / old (512 + 128); `vllm bench` 512-in / 128-out one wave of c =
#      1 2 4 8 16 requests new / old; the per-op GPU time at 1 request (new).
#   OUT=$OUT bash scripts/gpu_s11d.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-$PWD/gpu-out}; mkdir -p "$FINAL"
L=/tmp/s11d; mkdir -p $L
t0=$(date +%s); say() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
trap 'tar czf "$FINAL/s11d_logs.tgz" -C $L --exclude="*.gguf" . 2>/dev/null' EXIT
source scripts/gpu_deps.sh >/dev/null || exit 1
PY=${PYTHON:-python3}
W=$(ls .wheels/gguf-*.whl 2>/dev/null | head -1)
[ -n "$W" ] && export PYTHONPATH=$PWD/$W${PYTHONPATH:+:$PYTHONPATH}
G=$L/rand-llama-1b
( $PY tools/make_random_gguf.py --shape llama-1b --qtype f16 --out $G-f16.gguf >$L/make_gguf.log 2>&1; echo "make_gguf exit $?" >>$L/make_gguf.log ) &
MG=$!
B=build-gpu
say build
cmake -S . -B $B -DVLLM_CUDA=ON -DCMAKE_BUILD_TYPE=Release >$L/configure.log 2>&1 || { tail -20 $L/configure.log; exit 1; }
cmake --build $B -j"$(nproc)" --target vllm quantize test_cuda_gemm test_cuda_ops test_cuda_fused >$L/build.log 2>&1 ||
    { grep -E "error" $L/build.log | head -20; exit 1; }
say tests
(cd $B && timeout 200 ./test_cuda_gemm) >$L/gemm.log 2>&1
echo "test_cuda_gemm exit $? $(grep -E 'PASSED|FAILED' $L/gemm.log | head -2 | tr '\n' ' ')"
grep -E "^gemv |speed: quant|^\[  (FAILED|ERROR)|LINE" $L/gemm.log | head -120
for t in test_cuda_ops test_cuda_fused; do
    (cd $B && VLLM_CUDA_SPEED=0 timeout 150 ./$t) >$L/$t.log 2>&1
    echo "$t exit $? $(grep -E 'PASSED|FAILED' $L/$t.log | head -2 | tr '\n' ' ')"
done
(cd $B && VLLM_CUDA_SPEED=0 timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 ./test_cuda_gemm) >$L/mc_gemm.log 2>&1
echo "memcheck test_cuda_gemm exit $? $(grep 'ERROR SUMMARY' $L/mc_gemm.log | tail -1)"
say "gguf"
wait $MG; tail -1 $L/make_gguf.log
ids64=$($PY -c "import random; random.seed(1); print(','.join(str(random.randrange(100, 30000)) for _ in range(64)))")
ids=$($PY -c "import random; random.seed(0); print(','.join(str(random.randrange(100, 30000)) for _ in range(512)))")
rate() { sed -n "s/.*$1: [0-9]* tokens, \([0-9.]*\) tok\/s.*/\1/p" | head -1; }
tp() { echo "$(sed -n 's/Output token throughput (tok\/s): *\([0-9.]*\)/\1/p' $1) tok/s $(sed -n 's/Mean TPOT *(ms): *\([0-9.]*\)/\1/p' $1) ms"; }
for q in q4_0 q4_K_M q8_0; do
    ./$B/quantize $G-f16.gguf $G-$q.gguf $q --threads 16 >$L/quant_$q.log 2>&1 || { tail -3 $L/quant_$q.log; continue; }
    M=$G-$q.gguf
    ./$B/vllm run --device cpu --model $M --prompt-ids "$ids64" --max-tokens 48 --ignore-eos --temperature 0 --print-ids >$L/ids_${q}_cpu.txt 2>$L/ids_${q}_cpu.err
    for k in new old; do
        e=$([ $k = old ] && echo VLLM_CUDA_GEMV_Q=0 || echo X=1)
        env $e ./$B/vllm run --device cuda --model $M --prompt-ids "$ids64" --max-tokens 48 --ignore-eos --temperature 0 --print-ids >$L/ids_${q}_$k.txt 2>$L/ids_${q}_$k.err
        env $e ./$B/vllm run --device cuda --model $M --prompt-ids "$ids" --max-tokens 128 --ignore-eos --temperature 0 >/dev/null 2>$L/run_${q}_$k.err
    done
    same() { cmp -s $1 $2 && echo same || echo "DIFF (first differing id at $($PY -c "import sys; a=open('$1').read().replace(',',' ').split(); b=open('$2').read().replace(',',' ').split(); print(next((i for i,(x,y) in enumerate(zip(a,b)) if x!=y), min(len(a),len(b))))"))"; }
    echo "$q ($(stat -c %s $M) bytes): greedy 48 ids new vs cpu: $(same $L/ids_${q}_new.txt $L/ids_${q}_cpu.txt); new vs old: $(same $L/ids_${q}_new.txt $L/ids_${q}_old.txt); old vs cpu: $(same $L/ids_${q}_old.txt $L/ids_${q}_cpu.txt)"
    echo "$q batch-1 decode (512 + 128): new $(rate decode <$L/run_${q}_new.err) tok/s, old $(rate decode <$L/run_${q}_old.err) tok/s"
    for c in 1 2 4 8 16; do
        for k in new old; do
            e=$([ $k = old ] && echo VLLM_CUDA_GEMV_Q=0 || echo X=1)
            env $e ./$B/vllm bench --device cuda --model $M --num-prompts $c --input-len 512 --output-len 128 --concurrency $c \
                --max-num-seqs $c --max-num-batched-tokens 16384 >$L/b_${q}_c${c}_$k.log 2>&1
        done
        echo "$q conc $c: new $(tp $L/b_${q}_c${c}_new.log); old $(tp $L/b_${q}_c${c}_old.log)"
    done
    VLLM_CUDA_PROFILE=1 VLLM_CUDA_GRAPHS=0 VLLM_CUDA_PDL=0 ./$B/vllm run --device cuda --model $M \
        --prompt-ids "$ids64" --max-tokens 64 --ignore-eos --temperature 0 >/dev/null 2>$L/prof_$q.err
    grep -A16 "cuda profile" $L/prof_$q.err | grep -E "profile|n=1 " | head -12
done
say done
