#!/usr/bin/env bash
# gpu_s18a.sh — prepared in session 17 for session 18's first call
# (nvidia-h200, ~3 min): branch s17-ggp (k_gemm_glu persistent: one CTA an
# SM walks the 128 x 128 tiles, the stage ring running on across tiles so
# the next tile's TMA loads overlap this tile's epilogue) against main's
# first version (a CTA a tile: 2.9 waves at the 0.6B shape) and cuBLAS +
# k_glu. Both off by default; VLLM_CUDA_GEMM_GLU=1 turns them on.
# Binaries in bin/: vllm, test_cuda_gemm (main); vllm_g, test_cuda_gemm_g
# (s17-ggp).
#   1. test_gemm_glu_fused of both (correctness, launch counter, speed at
#      2048 x 1024 -> 2 x 3072: cuBLAS + k_glu / fused), memcheck of the
#      branch's;
#   2. greedy ids 2048 + 32 (0.6B) of vllm_g with GEMM_GLU=1 vs main's =0;
#   3. warm 2048-token TTFT, 0.6B: main =0 / main =1 / branch =1, three
#      rounds; the 8B (f = 14,336: 1,792 tiles): main =0 / branch =1, two;
#   4. ncu source profile of the branch's k_gemm_glu in the 0.6B engine
#      (gpu_ncu_src), for the next step (ping-pong consumers?).
# Make (here, from /work/main, main checked out and clean):
#   B=build-cuda; T="vllm test_cuda_gemm"
#   bash scripts/gpu_snap.sh s18a $T && D=.gpu-snap-s18a && mkdir -p /tmp/s18 && \
#   git checkout -q s17-ggp && (cd $B && cmake . >/dev/null && make -j2 $T >/dev/null) && \
#   for t in $T; do strip -o /tmp/s18/${t}_g $B/$t; done; git checkout -q main && (cd $B && cmake . >/dev/null && make -j2 $T >/dev/null) && \
#   (cd /tmp/s18 && tar cf - vllm_g test_cuda_gemm_g | xz -T1 --lzma2=preset=9,dict=192MiB > /work/main/$D/branches.txz) && du -sm $D
#   run carry [".gpu-snap-s18a"] "cd .gpu-snap-s18a && OUT=$OUT bash scripts/gpu_s18a.sh"
# Merge rule: tests + memcheck pass, greedy ids equal, the branch faster
# than main's version; default on only if it beats cuBLAS + k_glu in the
# engine (TTFT) in every round.
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s18a
gpu_bin
tar xJf branches.txz -C bin
gpu_models
say "test_gemm_glu_fused: main, then the branch"
for b in "" _g; do
    gpu_test gg$b 90 VLLM_TEST_ONLY=test_gemm_glu_fused ./test_cuda_gemm$b
    grep -E "LINE|Failure|FAILED|vs cuBLAS|speed: matmul_glu" $L/gg$b.log | cut -c1-160 | head -10
done
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
(cd bin && VLLM_TEST_ONLY=test_gemm_glu_fused VLLM_CUDA_SPEED=0 timeout 90 $SAN --tool memcheck ./test_cuda_gemm_g) >$L/mc.log 2>&1
echo "memcheck (branch) exit $? $(grep -E 'ERROR SUMMARY|PASSED|FAILED' $L/mc.log | tr '\n' ' ')"
gpu_model_wait 6
VLLM_CUDA_GEMM_GLU=0 gpu_greedy vllm $M6 $L/ids_main.txt
VLLM_CUDA_GEMM_GLU=1 gpu_greedy vllm_g $M6 $L/ids_g.txt
cmp -s $L/ids_main.txt $L/ids_g.txt && echo "greedy ids branch (fused) == main (cuBLAS)" || echo "greedy ids differ"
say "0.6B TTFT: main =0 / main =1 / branch =1"
for r in 1 2 3; do
    VLLM_CUDA_GEMM_GLU=0 gpu_pf vllm $M6 $L/pf6_m0_$r.log
    VLLM_CUDA_GEMM_GLU=1 gpu_pf vllm $M6 $L/pf6_m1_$r.log
    VLLM_CUDA_GEMM_GLU=1 gpu_pf vllm_g $M6 $L/pf6_g1_$r.log
    echo "round $r: $(gpu_med $L/pf6_m0_$r.log) / $(gpu_med $L/pf6_m1_$r.log) / $(gpu_med $L/pf6_g1_$r.log) ms"
done
gpu_model_wait 8
say "8B TTFT: main =0 / branch =1"
for r in 1 2; do
    VLLM_CUDA_GEMM_GLU=0 gpu_pf vllm $M8 $L/pf8_m0_$r.log
    VLLM_CUDA_GEMM_GLU=1 gpu_pf vllm_g $M8 $L/pf8_g1_$r.log
    echo "round $r: $(gpu_med $L/pf8_m0_$r.log) / $(gpu_med $L/pf8_g1_$r.log) ms"
done
ids6=$($PY -c "import random; random.seed(1); print(','.join(str(random.randrange(1000, 100000)) for _ in range(2048)))")
say "ncu source profile: the branch's k_gemm_glu in the 0.6B prefill"
VLLM_CUDA_GEMM_GLU=1 gpu_ncu_src ggp "k_gemm_glu" 10 1 ./bin/vllm_g run --device cuda --model $M6 --prompt-ids $ids6 \
    --max-tokens 2 --ignore-eos --temperature 0
say done
