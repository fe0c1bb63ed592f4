#!/usr/bin/env bash
# gpu_s11e.sh — session 11, call 7 (nvidia-h200): GGUF decode end to end
# with the dp4a GEMV (cuda_gemv_d4.cu, default) against cuda_gemv_q.cu
# (VLLM_CUDA_GEMV_D4=0) and the kernels before session 11
# (VLLM_CUDA_GEMV_Q=0).
#   1. build; test_cuda_gemm (the quant table), test_cuda_ops,
#      test_cuda_fused, test_cuda_model;
#   2. random Llama-3.2-1B-shaped GGUF (make_random_gguf f16; our quantize
#      to Q4_0 / Q4_K_M / Q8_0): greedy ids of 48 tokens CPU / new / old;
#      `vllm run` batch-1 decode (512 + 128) new / q / old; `vllm bench`
#      512-in / 128-out, one wave of c = 1 2 4 8 16, new / old;
#   3. random Llama-3.1-8B-shaped GGUF (f16 16 GB -> Q4_K_M): batch-1
#      decode new / old, bench c = 1 4 16 new.
#   OUT=$OUT bash scripts/gpu_s11e.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-$PWD/gpu-out}; mkdir -p "$FINAL"
L=/tmp/s11e; mkdir -p $L
t0=$(date +%s); say() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
trap 'tar czf "$FINAL/s11e_logs.tgz" -C $L --exclude="*.gguf" . 2>/dev/null' EXIT
source scripts/gpu_deps.sh >/dev/null || exit 1
PY=${PYTHON:-python3}
W=$(ls .wheels/gguf-*.whl 2>/dev/null | head -1)
[ -n "$W" ] && export PYTHONPATH=$PWD/$W${PYTHONPATH:+:$PYTHONPATH}
G=$L/rand-llama-1b; G8=$L/rand-llama-8b
( for s in llama-1b llama-8b; do $PY tools/make_random_gguf.py --shape $s --qtype f16 --out $L/rand-$s-f16.gguf >$L/make_$s.log 2>&1;
    echo "exit $?" >>$L/make_$s.log; done ) &
MG=$!
B=build-gpu
say build
cmake -S . -B $B -DVLLM_CUDA=ON -DCMAKE_BUILD_TYPE=Release >$L/configure.log 2>&1 || { tail -20 $L/configure.log; exit 1; }
cmake --build $B -j"$(nproc)" --target vllm quantize test_cuda_gemm test_cuda_ops test_cuda_fused test_cuda_model >$L/build.log 2>&1 ||
    { grep -E "error" $L/build.log | head -20; exit 1; }
say tests
(cd $B && timeout 200 ./test_cuda_gemm) >$L/gemm.log 2>&1
echo "test_cuda_gemm exit $? $(grep -E 'PASSED|FAILED' $L/gemm.log | head -2 | tr '\n' ' ')"
grep "speed: quant" $L/gemm.log | grep "n= 1" | sed 's/ us  *[0-9]* GB\/s;/;/g' | cut -c14-
for t in test_cuda_ops test_cuda_fused test_cuda_model; do
    (cd $B && VLLM_CUDA_SPEED=0 timeout 150 ./$t) >$L/$t.log 2>&1
    echo "$t exit $? $(grep -E 'PASSED|FAILED' $L/$t.log | head -2 | tr '\n' ' ')"
done
ids64=$($PY -c "import random; random.seed(1); print(','.join(str(random.randrange(100, 30000)) for _ in range(64)))")
ids=$($PY -c "import random; random.seed(0); print(','.join(str(random.randrange(100, 30000)) for _ in range(512)))")
rate() { sed -n "s/.*$1: [0-9]* tokens, \([0-9.]*\) tok\/s.*/\1/p" | head -1; }
tp() { echo "$(sed -n 's/Output token throughput (tok\/s): *\([0-9.]*\)/\1/p' $1) tok/s $(sed -n 's/Mean TPOT *(ms): *\([0-9.]*\)/\1/p' $1) ms"; }
envk() { case $1 in old) echo VLLM_CUDA_GEMV_Q=0;; q) echo VLLM_CUDA_GEMV_D4=0;; *) echo X=1;; esac; }
same() { cmp -s $1 $2 && echo same || echo "DIFF at $($PY -c "import sys; a=open('$1').read().replace(',',' ').split(); b=open('$2').read().replace(',',' ').split(); print(next((i for i,(x,y) in enumerate(zip(a,b)) if x!=y), min(len(a),len(b))))")"; }
say "gguf 1B"
while ! grep -q exit $L/make_llama-1b.log 2>/dev/null; do sleep 1; done; tail -1 $L/make_llama-1b.log
for q in q4_0 q4_K_M q8_0; do
    ./$B/quantize $G-f16.gguf $G-$q.gguf $q --threads 16 >$L/quant_$q.log 2>&1 || { tail -3 $L/quant_$q.log; continue; }
    M=$G-$q.gguf
    ./$B/vllm run --device cpu --model $M --prompt-ids "$ids64" --max-tokens 48 --ignore-eos --temperature 0 --print-ids >$L/ids_${q}_cpu.txt 2>$L/ids_${q}_cpu.err
    for k in new q old; do
        env $(envk $k) ./$B/vllm run --device cuda --model $M --prompt-ids "$ids64" --max-tokens 48 --ignore-eos --temperature 0 --print-ids >$L/ids_${q}_$k.txt 2>$L/ids_${q}_$k.err
        env $(envk $k) ./$B/vllm run --device cuda --model $M --prompt-ids "$ids" --max-tokens 128 --ignore-eos --temperature 0 >/dev/null 2>$L/run_${q}_$k.err
    done
    echo "$q: greedy 48 ids vs cpu: new $(same $L/ids_${q}_new.txt $L/ids_${q}_cpu.txt), q $(same $L/ids_${q}_q.txt $L/ids_${q}_cpu.txt), old $(same $L/ids_${q}_old.txt $L/ids_${q}_cpu.txt)"
    echo "$q batch-1 decode (512 + 128): new $(rate decode <$L/run_${q}_new.err), q $(rate decode <$L/run_${q}_q.err), old $(rate decode <$L/run_${q}_old.err) tok/s"
    for c in 1 2 4 8 16; do
        for k in new old; do
            env $(envk $k) ./$B/vllm bench --device cuda --model $M --num-prompts $c --input-len 512 --output-len 128 --concurrency $c \
                --max-num-seqs $c --max-num-batched-tokens 16384 >$L/b_${q}_c${c}_$k.log 2>&1
        done
        echo "$q conc $c: new $(tp $L/b_${q}_c${c}_new.log); old $(tp $L/b_${q}_c${c}_old.log)"
    done
done
say "gguf 8B"
while ! grep -q exit $L/make_llama-8b.log 2>/dev/null; do sleep 1; done; tail -1 $L/make_llama-8b.log
for q in q4_K_M; do
    ./$B/quantize $G8-f16.gguf $G8-$q.gguf $q --threads 16 >$L/quant8_$q.log 2>&1 || { tail -3 $L/quant8_$q.log; continue; }
    M=$G8-$q.gguf
    for k in new old; do
        env $(envk $k) ./$B/vllm run --device cuda --model $M --prompt-ids "$ids" --max-tokens 128 --ignore-eos --temperature 0 >/dev/null 2>$L/run8_${q}_$k.err
    done
    echo "8B $q ($(stat -c %s $M) bytes): batch-1 decode (512 + 128): new $(rate decode <$L/run8_${q}_new.err), old $(rate decode <$L/run8_${q}_old.err) tok/s"
    for c in 1 4 16; do
        ./$B/vllm bench --device cuda --model $M --num-prompts $c --input-len 512 --output-len 128 --concurrency $c \
            --max-num-seqs $c --max-num-batched-tokens 16384 >$L/b8_${q}_c$c.log 2>&1
        echo "8B $q conc $c: new $(tp $L/b8_${q}_c$c.log)"
    done
done
say done
