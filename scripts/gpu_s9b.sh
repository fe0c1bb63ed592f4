#!/usr/bin/env bash
# gpu_s9b.sh — session 9, device call 3 (nvidia-h200, ~7 min): the
# tensor-core decode kernel (cuda_flash_dec.cu, VLLM_CUDA_FLASH_DEC).
#   1. build vllm and the tests (checkpoints made in the background);
#   2. test_cuda_attn_mixed (the kernel vs the CPU op in every shape class,
#      the mixed-step split, speed tables "speed: mixed" / "speed: dec"),
#      its memcheck, test_cuda_flash / test_cuda_paged_fd without speed
#      sweeps (the shared flash helpers moved), test_model_attn_split;
#   3. oracle: Qwen3-0.6B shape, `vllm run` greedy 512 + 128 with the kernel
#      forced at batch 1 (VLLM_CUDA_FLASH_DEC=1), HF teacher-forced check;
#      async == sync over 64 requests with the kernel forced;
#   4. `vllm bench` 1024-in / 128-out, Llama-3.1-8B shape at concurrency
#      64, 256, 16 and Qwen3-0.6B at 64, 256: VLLM_CUDA_FLASH_DEC=0 then
#      the default.
set -u -o pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-$PWD/gpu-out}; mkdir -p "$FINAL"
L=/tmp/s9b; mkdir -p $L
t0=$(date +%s); say() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
trap 'tar czf "$FINAL/s9b_logs.tgz" -C $L . 2>/dev/null' EXIT
source scripts/gpu_deps.sh >/dev/null || exit 1
PY=${PYTHON:-python3}
M8=/tmp/rand-llama-8b M6=/tmp/rand-qwen3-0.6b
( for s in qwen3-0.6b llama-8b; do [ -f /tmp/rand-$s/config.json ] ||
    $PY scripts/gpu_hf.py make --shape $s --out /tmp/rand-$s >$L/make_$s.log 2>&1; done ) &
MK=$!
B=build-gpu
say build
cmake -S . -B $B -DVLLM_CUDA=ON -DCMAKE_BUILD_TYPE=Release >$L/configure.log 2>&1 || { tail -20 $L/configure.log; exit 1; }
cmake --build $B -j"$(nproc)" --target vllm test_cuda_attn_mixed test_model_attn_split test_cuda_flash test_cuda_paged_fd \
    test_engine_async_64 >$L/build.log 2>&1 || { grep -E "error" $L/build.log | head -20; exit 1; }
say tests
(cd $B && ./test_cuda_attn_mixed) >$L/mixed.log 2>&1
echo "test_cuda_attn_mixed exit $?"; grep -E "^dec|^mixed|speed: |FAIL|error|did not" $L/mixed.log | head -60
(cd $B && VLLM_CUDA_SPEED=0 timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 ./test_cuda_attn_mixed) >$L/mc.log 2>&1
echo "memcheck test_cuda_attn_mixed exit $? $(grep 'ERROR SUMMARY' $L/mc.log | tail -1)"
for t in test_cuda_flash test_cuda_paged_fd; do
    (cd $B && VLLM_CUDA_SPEED=0 timeout 120 ./$t) >$L/$t.log 2>&1; echo "$t exit $? $(grep -E 'PASSED|FAILED' $L/$t.log | head -2 | tr '\n' ' ')"
done
(cd $B && VLLM_TEST_DEVICE=cuda ./test_model_attn_split) >$L/model_split.log 2>&1; echo "test_model_attn_split (cuda) exit $?"
wait $MK
say "oracle (0.6B, kernel forced at batch 1)"
V=./$B/vllm
$PY -c "import random; random.seed(0); print(','.join(str(random.randrange(1519, 100000)) for _ in range(512)))" >$L/p512.ids
VLLM_CUDA_FLASH_DEC=1 $V run --device cuda --model $M6 --prompt-ids "$(cat $L/p512.ids)" --max-tokens 128 --ignore-eos \
    --temperature 0 --print-ids >$L/ours6.ids 2>$L/ours6.err; echo "vllm run exit $? $(grep -E 'decode:' $L/ours6.err)"
head -c 100000 $L/ours6.ids | tr ' ' '\n' | head -128 | tr '\n' ' ' >$L/ours6_128.ids
timeout 150 $PY scripts/gpu_hf.py hf --model $M6 --prompt-ids $L/p512.ids --ours $L/ours6_128.ids --max-tokens 128 \
    >$L/hf6.json 2>$L/hf6.err; echo "gpu_hf.py hf exit $?"; cat $L/hf6.json | head -c 1500; echo
(cd $B && VLLM_CUDA_FLASH_DEC=1 VLLM_TEST_DEVICE=cuda VLLM_TEST_ASYNC_MODEL=$M6 timeout 150 ./test_engine_async_64) >$L/async64.log 2>&1
echo "test_engine_async_64 (kernel forced) exit $? $(grep -E 'async == sync|FAILED' $L/async64.log | head -2)"
say bench
for spec in "$M8 64" "$M8 256" "$M8 16" "$M6 64" "$M6 256"; do
    set -- $spec; M=$1 c=$2; np=$(( c < 256 ? 2 * c : c ))
    for fd in 0 d; do
        env $([ $fd = 0 ] && echo VLLM_CUDA_FLASH_DEC=0) $V bench --device cuda --model $M --num-prompts $np --input-len 1024 \
            --output-len 128 --concurrency $c --max-num-seqs $c --max-num-batched-tokens 8192 --gpu-memory-utilization 0.9 \
            >$L/bench_$(basename $M)_c${c}_$fd.log 2>&1
        echo "$(basename $M) conc $c flash_dec $fd: $(grep -E 'Output token throughput|Mean TTFT|Mean TPOT' $L/bench_$(basename $M)_c${c}_$fd.log | sed 's/  */ /g' | tr '\n' ';')"
    done
done
say done
