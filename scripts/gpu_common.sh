# gpu_common.sh — the header of the gpu_s*.sh device scripts (session 12
# on), sourced from the repository root: `source scripts/gpu_common.sh NAME`.
# Sets FINAL (the call's $OUT), L (/tmp/NAME, logs; tarred into
# $FINAL/NAME_logs.tgz at exit, GGUF files left out), say (elapsed-time
# headers), PY, the gguf wheel of .wheels/ on PYTHONPATH, our Debian
# libraries (gpu_deps.sh), and two readers: rate KEY (tok/s of a `vllm run`
# "KEY: N tokens, X tok/s" line on stdin) and tp LOG (output tok/s and mean
# TPOT of a `vllm bench` log), gpu_bin (unpack a prebuilt bin.txz into bin/,
# with cmocka for the test binaries) and gpu_d2d (the device-to-device copy
# rate in GB/s, bytes read + written, torch: the rooflines' denominator)
# and gpu_test LOG SECONDS [VAR=value ...] ./BINARY (a test binary of bin/
# under a time limit into $L/LOG.log, then one line: its exit status and
# cmocka's PASSED / FAILED counts; the pattern every device script
# repeated). The A/B scripts of session 16 on also share: gpu_models
# (the random Qwen3-0.6B / Llama-3.1-8B bf16 checkpoints at $M6 / $M8,
# made in the background), gpu_model_wait, gpu_pf (the warm 2048-token
# prefill of gpu_bench.sh: median TTFT of 8), gpu_med (its median TTFT),
# gpu_greedy (greedy ids of a fixed 2048-token prompt + 32 tokens).
GPU_RUN=$1
FINAL=${OUT:-$PWD/gpu-out}; mkdir -p "$FINAL"
L=/tmp/$GPU_RUN; mkdir -p "$L"
t0=$(date +%s)
say() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
trap 'tar czf "$FINAL/${GPU_RUN}_logs.tgz" -C "$L" --exclude="*.gguf" . 2>/dev/null' EXIT
source scripts/gpu_deps.sh >/dev/null || exit 1
PY=${PYTHON:-python3}
GPU_WHL=$(ls .wheels/gguf-*.whl 2>/dev/null | head -1)
[ -n "$GPU_WHL" ] && export PYTHONPATH=$PWD/$GPU_WHL${PYTHONPATH:+:$PYTHONPATH} # a pure-Python wheel imports as a zip
rate() { sed -n "s/.*$1: [0-9]* tokens, \([0-9.]*\) tok\/s.*/\1/p" | head -1; }
tp() { echo "$(sed -n 's/Output token throughput (tok\/s): *\([0-9.]*\)/\1/p' "$1") tok/s $(sed -n 's/Mean TPOT *(ms): *\([0-9.]*\)/\1/p' "$1") ms"; }
gpu_bin() {
    mkdir -p bin && tar xJf bin.txz -C bin
    # the test binaries link cmocka (.deps/libcmocka0*.deb; a warm machine may have unpacked .deps without it)
    [ -f /opt/deps/usr/lib/x86_64-linux-gnu/libcmocka.so.0 ] || for f in .deps/libcmocka0*.deb; do dpkg -x "$f" /opt/deps; done
}
gpu_d2d() {
    $PY -c "
import time, torch
n = 1 << 28
x = torch.empty(n, dtype=torch.int32, device='cuda'); y = torch.empty_like(x); y.copy_(x); torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(10): y.copy_(x)
torch.cuda.synchronize(); print(round(2 * 4 * n / ((time.perf_counter() - t0) / 10) / 1e9, 1))"
}
gpu_test() {
    local log=$1 secs=$2
    shift 2
    (cd bin && timeout "$secs" env "$@") >"$L/$log.log" 2>&1
    local rc=$?
    echo "$log exit $rc $(grep -E 'PASSED|FAILED' "$L/$log.log" | head -2 | tr '\n' ' ')"
}

M6=/tmp/rand-qwen3-0.6b M8=/tmp/rand-llama-8b
# gpu_models: make $M6 and $M8 (scripts/gpu_hf.py make; kept when present)
# in the background, one after the other; $L/make6.log, make8.log end in
# "exit N". gpu_model_wait 6|8: wait for one, print that line.
gpu_models() {
    ( [ -f $M6/config.json ] || $PY scripts/gpu_hf.py make --shape qwen3-0.6b --out $M6 >$L/make6.log 2>&1
      echo "exit $?" >>$L/make6.log
      [ -f $M8/config.json ] || $PY scripts/gpu_hf.py make --shape llama-8b --out $M8 >$L/make8.log 2>&1
      echo "exit $?" >>$L/make8.log ) &
}
gpu_model_wait() {
    while ! grep -q exit $L/make$1.log 2>/dev/null; do sleep 1; done
    tail -1 $L/make$1.log
}
# gpu_pf BINARY MODEL LOG [FLAG...]: bin/BINARY's warm 2048-token prefill,
# 8 prompts one at a time (gpu_bench.sh's command), extra bench flags after
# LOG; environment settings go before the call (VAR=v gpu_pf ...).
gpu_pf() {
    local b=$1 m=$2 log=$3
    shift 3
    timeout 90 ./bin/$b bench --device cuda --model $m --num-prompts 8 --input-len 2048 --output-len 1 \
        --concurrency 1 --max-num-seqs 1 --max-num-batched-tokens 8192 --no-async-scheduling "$@" >$log 2>&1
}
gpu_med() { sed -n 's/^Median TTFT (ms): *\([0-9.]*\).*/\1/p' "$1" | head -1; }
# gpu_greedy BINARY MODEL OUT: greedy ids of a 2048-token prompt (random
# ids of the model's vocabulary, seed 1) + 32 tokens into OUT.
gpu_greedy() {
    local ids
    ids=$($PY -c "import json, random; random.seed(1); V = json.load(open('$2/config.json'))['vocab_size'];
print(','.join(str(random.randrange(V // 100, min(V, 100000))) for _ in range(2048)))")
    timeout 90 ./bin/$1 run --device cuda --model $2 --prompt-ids "$ids" --max-tokens 32 --ignore-eos \
        --temperature 0 --print-ids >$3 2>/dev/null
}
# gpu_c64 LOG [ARGS...]: concurrency-64 serving of the 0.6B (128 random
# 1024-token prompts, 128 out) into LOG; prints throughput and TTFT / TPOT
# on one line (the block of sessions 21-23's scripts; set variables before
# the call: VLLM_X=1 gpu_c64 LOG).
gpu_c64() {
    local log=$1
    shift
    timeout 150 ./bin/vllm bench --device cuda --model $M6 --num-prompts 128 --input-len 1024 --output-len 128 \
        --concurrency 64 --max-num-seqs 64 --max-num-batched-tokens 8192 --no-async-scheduling "$@" >$log 2>&1
    grep -E 'Output token throughput|Mean TTFT|P99 TTFT|Mean TPOT' $log | tr -s ' ' | tr '\n' ';'
    echo
}
# gpu_fixtures: the model tests read tests/fixtures at the path compiled
# in (this machine's /work/main); the device's copy has them one level up.
gpu_fixtures() {
    [ -d /work/main/tests/fixtures/models ] ||
        { mkdir -p /work/main/tests && ln -sfn "$(cd .. && pwd)/tests/fixtures" /work/main/tests/fixtures; }
}
# gpu_ncu_src NAME REGEX SKIP COUNT CMD...: Nsight Compute --set full with
# source counters of COUNT launches matching REGEX (demangled names, e.g.
# "k_gemv_half_u<.*\(int\)1, \(int\)2") after SKIP, in CMD (run from the
# repository root); prints the kernel lines, duration and issue rate, then
# the per-SASS-instruction stall summary (tools/ncu_sass_top.py, 14 lines);
# $L/NAME.ncu-rep, $L/NAME.txt and $L/NAME_sass.csv (also copied to $FINAL).
gpu_ncu_src() {
    local name=$1 re=$2 skip=$3 cnt=$4 ncu
    shift 4
    ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
    timeout 150 $ncu --kernel-name-base demangled -k regex:"$re" --launch-skip $skip --launch-count $cnt \
        --cache-control none --set full -o $L/$name -f "$@" >$L/ncu_run_$name.txt 2>&1
    echo "ncu $name ($re) exit $?"
    $ncu --import $L/$name.ncu-rep --page details >$L/$name.txt 2>&1
    grep -E "^  [a-z_]+|Duration|DRAM Throughput|Compute \(SM\) Throughput|Registers Per|Achieved Occ|Warp Cycles Per Issued" \
        $L/$name.txt | cut -c1-140 | head -16
    $ncu --import $L/$name.ncu-rep --page source --csv --print-source sass >$L/${name}_sass.csv 2>/dev/null
    $PY tools/ncu_sass_top.py $L/${name}_sass.csv 14
    cp $L/${name}_sass.csv "$FINAL/" 2>/dev/null
}
