#!/usr/bin/env bash
# gpu_s11f.sh — session 11, call 8 (nvidia-h200; no build there: vllm,
# quantize, test_cuda_gemm and test_cuda_ops built here in build-cuda,
# stripped and carried as bin.txz (17 MB; the carry limit is 64 MiB) in a
# snapshot with scripts/, tools/make_random_gguf.py, .deps and .wheels):
# cuda_gemv_d4.cu at 1..8 rows (was 1..4), the widened MATMUL bound over
# quantized weights in test_cuda_ops; GGUF 1B bench c = 1..16 new / old.
#   OUT=$OUT bash scripts/gpu_s11f.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-$PWD/gpu-out}; mkdir -p "$FINAL"
L=/tmp/s11f; mkdir -p $L
t0=$(date +%s); say() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
trap 'tar czf "$FINAL/s11f_logs.tgz" -C $L --exclude="*.gguf" . 2>/dev/null' EXIT
source scripts/gpu_deps.sh >/dev/null || exit 1
PY=${PYTHON:-python3}
W=$(ls .wheels/gguf-*.whl 2>/dev/null | head -1)
[ -n "$W" ] && export PYTHONPATH=$PWD/$W${PYTHONPATH:+:$PYTHONPATH}
G=$L/rand-llama-1b
( $PY tools/make_random_gguf.py --shape llama-1b --qtype f16 --out $G-f16.gguf >$L/make.log 2>&1; echo "exit $?" >>$L/make.log ) &
say tests
mkdir -p bin && tar xJf bin.txz -C bin
for t in test_cuda_gemm test_cuda_ops; do
    (cd bin && VLLM_CUDA_SPEED=$([ $t = test_cuda_gemm ] && echo 1 || echo 0) timeout 200 ./$t) >$L/$t.log 2>&1
    echo "$t exit $? $(grep -E 'PASSED|FAILED' $L/$t.log | head -2 | tr '\n' ' ')"
done
grep -E "ERROR|LINE" $L/*.log | head
grep "speed: quant" $L/test_cuda_gemm.log | grep -E "n= [48]" | sed 's/ us  *[0-9]* GB\/s;/;/g' | cut -c14- | cut -d';' -f1-4
tp() { echo "$(sed -n 's/Output token throughput (tok\/s): *\([0-9.]*\)/\1/p' $1) tok/s $(sed -n 's/Mean TPOT *(ms): *\([0-9.]*\)/\1/p' $1) ms"; }
envk() { case $1 in old) echo VLLM_CUDA_GEMV_Q=0;; q) echo VLLM_CUDA_GEMV_D4=0;; *) echo X=1;; esac; }
say "gguf 1B"
while ! grep -q exit $L/make.log 2>/dev/null; do sleep 1; done; tail -1 $L/make.log
for q in q4_0 q4_K_M; do
    ./bin/quantize $G-f16.gguf $G-$q.gguf $q --threads 16 >$L/quant_$q.log 2>&1 || { tail -3 $L/quant_$q.log; continue; }
    for c in 1 2 4 6 8 16; do
        for k in new old; do
            env $(envk $k) ./bin/vllm bench --device cuda --model $G-$q.gguf --num-prompts $c --input-len 512 --output-len 128 \
                --concurrency $c --max-num-seqs $c --max-num-batched-tokens 16384 >$L/b_${q}_c${c}_$k.log 2>&1
        done
        echo "$q conc $c: new $(tp $L/b_${q}_c${c}_new.log); old $(tp $L/b_${q}_c${c}_old.log)"
    done
done
say done
