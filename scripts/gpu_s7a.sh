#!/usr/bin/env bash
# gpu_s7a.sh — session 7's first device call, kept as the record of its
# command (docs/BENCHMARKS.md): run from a snapshot of branch s7-cand (main
# + h7-topp + h7-ropefd): the CUDA tests of both branches, memcheck,
# `vllm run` decode A/B of VLLM_CUDA_ROPE_FD, the 0.6B graphed cuBLAS
# ceiling (gpu_hf.py roof). Snapshot + carry as in docs/STATUS-HISTORY.md.
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
L=/tmp/s7a; mkdir -p $L
t0=$(date +%s); say() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
pack() { tar czf "$OUT/s7a_logs.tgz" -C "$L" . 2>/dev/null; }
trap pack EXIT
source scripts/gpu_deps.sh || exit 1
nvidia-smi -L
( for s in qwen3-0.6b llama-8b; do python3 scripts/gpu_hf.py make --shape $s --out /tmp/rand-$s || exit 1; done ) >$L/make.log 2>&1 &
MPID=$!
B=build-gpu
say build
cmake -S . -B $B -DVLLM_CUDA=ON -DCMAKE_BUILD_TYPE=Release >$L/configure.log 2>&1 || { tail -30 $L/configure.log; exit 1; }
T="vllm test_cuda_sample test_cuda_rope_fd test_cuda_paged_fd test_cuda_fused test_cuda_comm"
cmake --build $B -j"$(nproc)" --target $T >$L/build.log 2>&1 || { grep -E "error" $L/build.log | head -30; exit 1; }
say tests
for t in test_cuda_comm test_cuda_sample test_cuda_rope_fd test_cuda_paged_fd test_cuda_fused; do
  (cd $B && timeout 150 ./$t) >$L/$t.log 2>&1
  echo "$t exit $?: $(grep -cE '^\[       OK \]' $L/$t.log) ok, $(grep -cE '^\[  FAILED  \]' $L/$t.log) failed"
  grep -E "FAILED|rror|nccl symmetric|speed: rope|differ" $L/$t.log | grep -vE ": 0 differ \(|: 0 rows differ" | head -20
done
echo "sample comparisons with no differing row: $(grep -cE ': 0 differ \(|: 0 rows differ' $L/test_cuda_sample.log)"
grep -E "^speed: sample B=256" $L/test_cuda_sample.log | head -12
pack
say "memcheck (parallel)"
( cd $B && VLLM_CUDA_SPEED=0 VLLM_CUDA_CFG=02 VLLM_TEST_SKIP=test_large_vocab,test_distribution,test_speed timeout 150 compute-sanitizer --tool memcheck ./test_cuda_sample >$L/mc_sample.log 2>&1 ) & P1=$!
( cd $B && VLLM_CUDA_SPEED=0 timeout 150 compute-sanitizer --tool memcheck ./test_cuda_rope_fd >$L/mc_rope.log 2>&1 ) & P2=$!
( cd $B && VLLM_CUDA_SPEED=0 VLLM_TEST_FILTER=test_fd_wide_table timeout 150 compute-sanitizer --tool memcheck ./test_cuda_paged_fd >$L/mc_fd.log 2>&1 ) & P3=$!
wait $P1 $P2 $P3
for f in mc_sample mc_rope mc_fd; do echo "$f: $(grep -E 'ERROR SUMMARY' $L/$f.log | tail -1) $(grep -cE '^\[       OK \]' $L/$f.log) ok"; done
pack
wait $MPID || { tail -20 $L/make.log; exit 1; }
say "roof 0.6b"
timeout 90 python3 scripts/gpu_hf.py roof --model /tmp/rand-qwen3-0.6b --tokens 2048 >$L/roof.json 2>$L/roof.err || tail -5 $L/roof.err
cat $L/roof.json | cut -c1-1500
say "rope_fd A/B"
OUT=$L/dec LOG=$L/dec VLLM_DEC_SKIP_TESTS=1 VLLM_DEC_TESTS="" VLLM_DEC_CFGS="pair=VLLM_CUDA_ROPE_FD:0 fused=VLLM_CUDA_ROPE_FD:1" \
  VLLM_DEC_ROUNDS=2 timeout 200 bash scripts/gpu_dec.sh 2>&1 | grep -v "^== \[" | tail -8
say done
