#!/usr/bin/env bash
# gpu_s11a.sh — prepared in session 10 for session 11's first device call
# (nvidia-h200, ~5 min): the skinny kernel on f32 x rows
# (VLLM_CUDA_SKINNY_F32X=1, default off until this runs) and where the
# 8-request step goes.
#   1. build; test_cuda_gemm (test_skinny_f32x against the CPU; the speed
#      table with the "f32x" and "gemv-f32" columns); test_cuda_ops,
#      test_cuda_model, test_cuda_fused with VLLM_CUDA_SKINNY_F32X=1 (the
#      bounds they would meet if it became the default); memcheck of
#      test_cuda_gemm;
#   2. `vllm bench` 1024-in / 256-out, one wave of c requests, F32X off /
#      on, two rounds: 8B and 0.6B at c = 2 4 8;
#   3. the per-op GPU time of 1 and 8 requests (VLLM_CUDA_PROFILE=1,
#      graphs and PDL off, 64 out), F32X on.
# Make F32X the default (cuda_skinny.cu skinny_max_n) if the tests pass
# and the bench is not slower at any c on both shapes.
#   OUT=$OUT bash scripts/gpu_s11a.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-$PWD/gpu-out}; mkdir -p "$FINAL"
L=/tmp/s11a; mkdir -p $L
t0=$(date +%s); say() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
trap 'tar czf "$FINAL/s11a_logs.tgz" -C $L . 2>/dev/null' EXIT
source scripts/gpu_deps.sh >/dev/null || exit 1
PY=${PYTHON:-python3}
( [ -n "${VLLM_GPU_PREBUILT:-}" ] && exit 0; for s in qwen3-0.6b llama-8b; do [ -f /tmp/rand-$s/config.json ] ||
    $PY scripts/gpu_hf.py make --shape $s --out /tmp/rand-$s >$L/make_$s.log 2>&1; done ) &
MK=$!
B=build-gpu
T=(test_cuda_gemm test_cuda_ops test_cuda_model test_cuda_fused)
say build
if [ -z "${VLLM_GPU_PREBUILT:-}" ]; then
cmake -S . -B $B -DVLLM_CUDA=ON -DCMAKE_BUILD_TYPE=Release >$L/configure.log 2>&1 || { tail -20 $L/configure.log; exit 1; }
cmake --build $B -j"$(nproc)" --target vllm "${T[@]}" >$L/build.log 2>&1 || { grep -E "error" $L/build.log | head -20; exit 1; }
fi
(cd $B && timeout 120 ./test_cuda_gemm) >$L/gemm.log 2>&1
echo "test_cuda_gemm exit $? $(grep -E 'PASSED|FAILED' $L/gemm.log | head -2 | tr '\n' ' ')"
grep -E "skinny f32 x|speed: skinny" $L/gemm.log | head -60
for t in test_cuda_ops test_cuda_model test_cuda_fused; do
    (cd $B && VLLM_CUDA_SPEED=0 VLLM_CUDA_SKINNY_F32X=1 timeout 150 ./$t) >$L/$t.log 2>&1
    echo "$t (F32X=1) exit $? $(grep -E 'PASSED|FAILED' $L/$t.log | head -2 | tr '\n' ' ')"
done
(cd $B && VLLM_CUDA_SPEED=0 timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 ./test_cuda_gemm) >$L/mc_gemm.log 2>&1
echo "memcheck test_cuda_gemm exit $? $(grep 'ERROR SUMMARY' $L/mc_gemm.log | tail -1)"
wait $MK
if [ -n "${VLLM_GPU_PREBUILT:-}" ]; then for i in $(seq 300); do [ -f /tmp/ab_models.done ] && break; sleep 1; done; fi
bench() { # shape conc out env...
    local s=$1 c=$2 o=$3; shift 3
    env "$@" ./$B/vllm bench --device cuda --model /tmp/rand-$s --num-prompts $c --input-len 1024 --output-len $o \
        --concurrency $c --max-num-seqs $c --max-num-batched-tokens 16384 --gpu-memory-utilization 0.9
}
say "bench F32X off / on"
for r in 1 2; do
    for s in llama-8b qwen3-0.6b; do
        for c in 2 4 8; do
            line="round $r $s conc $c:"
            for k in 0 1; do
                bench $s $c 256 VLLM_CUDA_SKINNY_F32X=$k >$L/b_${s}_c${c}_$k.log 2>&1
                line="$line f32x=$k $(sed -n 's/Output token throughput (tok\/s): *\([0-9.]*\)/\1/p' $L/b_${s}_c${c}_$k.log) tok/s $(sed -n 's/Mean TPOT *(ms): *\([0-9.]*\)/\1/p' $L/b_${s}_c${c}_$k.log) ms;"
            done
            echo "$line"
        done
    done
done
say "profile 1 / 8 requests (8B)"
for c in 1 8; do
    bench llama-8b $c 64 VLLM_CUDA_SKINNY_F32X=1 VLLM_CUDA_PROFILE=1 VLLM_CUDA_GRAPHS=0 VLLM_CUDA_PDL=0 >$L/prof_c$c.log 2>&1
    echo "-- conc $c"; grep -A30 "cuda profile" $L/prof_c$c.log | grep -E "cuda profile|n=1 |n=2..8" | head -20
done
say done
