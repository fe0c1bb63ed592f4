#!/usr/bin/env bash
# gpu_s11g.sh — session 11, call 10 (nvidia-h200; prebuilt binaries as
# gpu_s11f.sh, plus test_cuda_model): the d4 shared-memory opt-in now set at
# every launch (per device); GGUF decode under CUDA graphs.
#   OUT=$OUT bash scripts/gpu_s11g.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-$PWD/gpu-out}; mkdir -p "$FINAL"
L=/tmp/s11g; mkdir -p $L
t0=$(date +%s); say() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
trap 'tar czf "$FINAL/s11g_logs.tgz" -C $L --exclude="*.gguf" . 2>/dev/null' EXIT
source scripts/gpu_deps.sh >/dev/null || exit 1
PY=${PYTHON:-python3}
W=$(ls .wheels/gguf-*.whl 2>/dev/null | head -1)
[ -n "$W" ] && export PYTHONPATH=$PWD/$W${PYTHONPATH:+:$PYTHONPATH}
G=$L/rand-llama-1b
( $PY tools/make_random_gguf.py --shape llama-1b --qtype f16 --out $G-f16.gguf >$L/make.log 2>&1; echo "exit $?" >>$L/make.log ) &
mkdir -p bin && tar xJf bin.txz -C bin
for t in test_cuda_gemm test_cuda_ops test_cuda_model; do
    (cd bin && VLLM_CUDA_SPEED=0 timeout 200 ./$t) >$L/$t.log 2>&1
    echo "$t exit $? $(grep -E 'PASSED|FAILED' $L/$t.log | head -2 | tr '\n' ' ')"
done
grep -E "ERROR|LINE" $L/*.log | head
while ! grep -q exit $L/make.log 2>/dev/null; do sleep 1; done; tail -1 $L/make.log
ids=$($PY -c "import random; random.seed(0); print(','.join(str(random.randrange(100, 30000)) for _ in range(512)))")
rate() { sed -n "s/.*$1: [0-9]* tokens, \([0-9.]*\) tok\/s.*/\1/p" | head -1; }
tp() { echo "$(sed -n 's/Output token throughput (tok\/s): *\([0-9.]*\)/\1/p' $1) tok/s $(sed -n 's/Mean TPOT *(ms): *\([0-9.]*\)/\1/p' $1) ms"; }
./bin/quantize $G-f16.gguf $G-q4_K_M.gguf q4_K_M --threads 16 >$L/quant.log 2>&1 || tail -3 $L/quant.log
for g in 1 0; do
    VLLM_CUDA_GRAPHS=$g ./bin/vllm run --device cuda --model $G-q4_K_M.gguf --prompt-ids "$ids" --max-tokens 128 --ignore-eos \
        --temperature 0 --print-ids >$L/ids_g$g.txt 2>$L/run_g$g.err
    echo "q4_K_M graphs=$g: decode $(rate decode <$L/run_g$g.err) tok/s; $(grep -i graph $L/run_g$g.err | head -2 | tr '\n' ' ')"
done
echo "ids graphs on == off: $(cmp -s $L/ids_g1.txt $L/ids_g0.txt && echo same || echo DIFF)"
for c in 1 4 8; do
    ./bin/vllm bench --device cuda --model $G-q4_K_M.gguf --num-prompts $c --input-len 512 --output-len 128 --concurrency $c \
        --max-num-seqs $c --max-num-batched-tokens 16384 >$L/b_c$c.log 2>&1
    echo "q4_K_M conc $c: $(tp $L/b_c$c.log)"
done
say done
