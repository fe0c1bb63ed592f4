#!/usr/bin/env bash
# (The L2 prefetch code, VLLM_L2_PREFETCH / VLLM_L2PF_CTA_KB, lives on branch s10-l2pf: measured
# slower in every configuration in session 10 and not merged; run this from that branch.)
# gpu_l2pf.sh — one device call (nvidia-h200, ~5 min): the weight prefetch
# hints of decode steps (branch s10-l2pf: rt_backend_prefetch, the CUDA
# k_l2_prefetch kernel, VLLM_L2_PREFETCH="wo,gu,qkv" MiB in arch_llama).
#   1. build vllm, test_cuda_ops, test_model_prefetch (checkpoints made in
#      the background);
#   2. test_cuda_ops (its test_prefetch: sizes, a misaligned view, a graph),
#      test_model_prefetch on CUDA (logits bit-identical with the hints),
#      memcheck of both;
#   3. `vllm run --device cuda` greedy 512 + 256 on the Llama-3.1-8B and
#      Qwen3-0.6B shapes, the configurations of VLLM_L2PF_CFGS alternated,
#      VLLM_L2PF_ROUNDS rounds; greedy ids must be equal in every run.
# Make a configuration the default (model.c) only if it beats "0" (off) in
# every round on both shapes.
set -u -o pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-$PWD/gpu-out}; mkdir -p "$FINAL"
L=/tmp/l2pf; mkdir -p $L
t0=$(date +%s); say() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
trap 'tar czf "$FINAL/l2pf_logs.tgz" -C $L . 2>/dev/null' EXIT
source scripts/gpu_deps.sh >/dev/null || exit 1
PY=${PYTHON:-python3}
CFGS=${VLLM_L2PF_CFGS:-"0 32,0,0 32,16,16 24,24,24 16,8,8"}
( for s in llama-8b qwen3-0.6b; do [ -f /tmp/rand-$s/config.json ] ||
    $PY scripts/gpu_hf.py make --shape $s --out /tmp/rand-$s >$L/make_$s.log 2>&1; done ) &
MK=$!
B=build-gpu
say build
[ "${NO_BUILD:-0}" = 1 ] || {
cmake -S . -B $B -DVLLM_CUDA=ON -DCMAKE_BUILD_TYPE=Release >$L/configure.log 2>&1 || { tail -20 $L/configure.log; exit 1; }
cmake --build $B -j"$(nproc)" --target vllm test_cuda_ops test_model_prefetch >$L/build.log 2>&1 ||
    { grep -E "error" $L/build.log | head -20; exit 1; }
}
say tests
(cd $B && VLLM_CUDA_SPEED=0 ./test_cuda_ops) >$L/ops.log 2>&1
echo "test_cuda_ops exit $? $(grep -E 'PASSED|FAILED' $L/ops.log | head -2 | tr '\n' ' ')"
(cd $B && VLLM_TEST_DEVICE=cuda ./test_model_prefetch) >$L/model.log 2>&1
echo "test_model_prefetch (cuda) exit $? $(grep -E 'PASSED|FAILED' $L/model.log | head -1)"
MC="compute-sanitizer --tool memcheck --target-processes application-only --error-exitcode 9"
if [ "${MC_OPS:-1}" = 1 ]; then # gpu_s10a.sh runs it in gpu_memcheck_all.sh
    (cd $B && VLLM_CUDA_SPEED=0 timeout 150 $MC ./test_cuda_ops) >$L/mc_ops.log 2>&1
    echo "memcheck test_cuda_ops exit $? $(grep 'ERROR SUMMARY' $L/mc_ops.log | tail -1)"
fi
(cd $B && VLLM_TEST_DEVICE=cuda timeout 100 $MC ./test_model_prefetch) >$L/mc_model.log 2>&1
echo "memcheck test_model_prefetch exit $? $(grep 'ERROR SUMMARY' $L/mc_model.log | tail -1)"
wait $MK
say "decode A/B"
$PY -c "import random; random.seed(0); print(','.join(str(random.randrange(1519, 100000)) for _ in range(512)))" >$L/p512.ids
for s in llama-8b qwen3-0.6b; do
    for r in $(seq 1 ${VLLM_L2PF_ROUNDS:-2}); do
        line="$s round $r:"
        for cfg in $CFGS; do
            VLLM_L2_PREFETCH=$cfg ./$B/vllm run --device cuda --model /tmp/rand-$s --prompt-ids "$(cat $L/p512.ids)" \
                --max-tokens 256 --ignore-eos --temperature 0 --print-ids >$L/ids_${s}_$cfg.txt 2>$L/err_${s}_$cfg.txt
            tok=$(sed -n 's/.*decode: [0-9]* tokens, \([0-9.]*\) tok\/s.*/\1/p' $L/err_${s}_$cfg.txt | head -1)
            same=$(cmp -s $L/ids_${s}_$cfg.txt $L/ids_${s}_0.txt 2>/dev/null && echo same || echo DIFF)
            line="$line $cfg ${tok:-fail} ($same)"
        done
        echo "$line"
    done
done
say done
