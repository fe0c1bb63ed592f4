#!/usr/bin/env bash
# gpu_s14e.sh — session 14, call 4 (nvidia-h200, ~3 min; prebuilt vllm,
# test_cuda_rope_pf, test_cuda_fused, test_cuda_ops: `bash
# scripts/gpu_snap.sh e vllm test_cuda_rope_pf test_cuda_fused
# test_cuda_ops`, run carry [".gpu-snap-e"] "cd .gpu-snap-e && OUT=$OUT
# bash scripts/gpu_s14e.sh"). Two prefill row kernels of the 0.6B shape:
#   - k_qk_rope_store_pf8 (bf16 activations, the default; VLLM_CUDA_RS_PF=1
#     the session-7 kernel): 8 rows ahead as raw vectors, loaded right
#     after the PDL wait, the angles before it;
#   - k_norm_warp (VLLM_CUDA_NORM_WARP, default on): RMSNORM / ADD_RMSNORM
#     of >= 2 rows an SM and d <= 1024 a warp a row, no block barriers
#     (call 3's cold profile: ADD_RMSNORM 11.7 us a 2048 x 1024 call).
#   1. test_cuda_rope_pf, test_cuda_fused, test_cuda_ops (VLLM_CUDA_SPEED=0
#      but for rope_pf), memcheck of test_cuda_fused's add_rmsnorm and
#      test_cuda_rope_pf's cases;
#   2. Qwen3-0.6B bf16: per-op GPU table over 8 warm 2048-token prefills
#      (engine, VLLM_CUDA_PROFILE, PDL and graphs off), default and both
#      off;
#   3. median TTFT of 8 2048-token prefills: default / RS_PF=1 /
#      NORM_WARP=0 / both off, alternated, three rounds; greedy ids of
#      2048 + 32 per configuration compared (the norm's sum order changed).
# Record of a call made with the binaries of branch s14-rows (its
# VLLM_CUDA_RS_PF variants and VLLM_CUDA_NORM_WARP are not on main).
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s14e
M=/tmp/rand-qwen3-0.6b
( $PY scripts/gpu_hf.py make --shape qwen3-0.6b --out $M >$L/make.log 2>&1; echo "exit $?" >>$L/make.log ) &
gpu_bin
if [ -z "${S14E_BENCH_ONLY:-}" ]; then # (the call's second run: the bench part only)
say tests
(cd bin && timeout 200 ./test_cuda_rope_pf) >$L/test_rope_pf.log 2>&1
echo "test_cuda_rope_pf exit $? $(grep -E 'PASSED|FAILED' $L/test_rope_pf.log | head -2 | tr '\n' ' ')"
grep -E "qk_rope_store|differs|LINE|Failure" $L/test_rope_pf.log | cut -c1-240 | head -8
for t in test_cuda_fused test_cuda_ops; do
    (cd bin && VLLM_CUDA_SPEED=0 timeout 200 ./$t) >$L/$t.log 2>&1
    echo "$t exit $? $(grep -E 'PASSED|FAILED' $L/$t.log | head -2 | tr '\n' ' ')"
    grep -E "LINE|Failure|error:|rmsnorm.*(2048|2100|300|333|600) x" $L/$t.log | cut -c1-200 | head -24
done
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
(cd bin && VLLM_TEST_ONLY=test_add_rmsnorm timeout 200 $SAN --tool memcheck ./test_cuda_fused) >$L/memcheck_f.log 2>&1
echo "memcheck test_cuda_fused (add_rmsnorm) exit $? $(grep -E 'ERROR SUMMARY' $L/memcheck_f.log | tail -1)"
(cd bin && VLLM_TEST_ONLY=test_rope_pf_cases timeout 200 $SAN --tool memcheck ./test_cuda_rope_pf) >$L/memcheck_r.log 2>&1
echo "memcheck test_cuda_rope_pf exit $? $(grep -E 'ERROR SUMMARY' $L/memcheck_r.log | tail -1)"
fi
while ! grep -q exit $L/make.log 2>/dev/null; do sleep 1; done; tail -1 $L/make.log
ids=$($PY -c "import json, random; random.seed(1); V = json.load(open('$M/config.json'))['vocab_size'];
print(','.join(str(random.randrange(V // 100, min(V, 100000))) for _ in range(2048)))")
pf() { env "$@" ./bin/vllm bench --device cuda --model $M --num-prompts 8 --input-len 2048 --output-len 1 --concurrency 1 \
    --max-num-seqs 1 --max-num-batched-tokens 8192; }
cfg() { case $1 in dflt) echo X=1;; rs1) echo VLLM_CUDA_RS_PF=1;; nw0) echo VLLM_CUDA_NORM_WARP=0;;
    off) echo VLLM_CUDA_RS_PF=1 VLLM_CUDA_NORM_WARP=0;; esac; }
for k in dflt off; do
    say "per-op GPU time, 8 warm prefills, $k"
    pf $(cfg $k) VLLM_CUDA_PROFILE=1 VLLM_CUDA_PDL=0 VLLM_CUDA_GRAPHS=0 >$L/prof_$k.txt 2>&1
    grep -E "cuda profile|n>64" $L/prof_$k.txt | cut -c1-150
done
say "TTFT"
for r in 1 2 3; do
    line="round $r:"
    for k in dflt rs1 nw0 off; do
        pf $(cfg $k) >$L/pf_${k}_$r.log 2>&1
        line="$line $k $(sed -n 's/^Median TTFT (ms): *\([0-9.]*\).*/\1/p' $L/pf_${k}_$r.log | head -1)"
    done
    echo "$line ms"
done
for k in dflt rs1 nw0 off; do
    env $(cfg $k) ./bin/vllm run --device cuda --model $M --prompt-ids "$ids" --max-tokens 32 --ignore-eos \
        --temperature 0 --print-ids >$L/ids_$k.txt 2>/dev/null
done
for k in rs1 nw0 off; do cmp -s $L/ids_dflt.txt $L/ids_$k.txt && echo "greedy ids dflt == $k" || echo "greedy ids dflt != $k"; done
say done
