#!/usr/bin/env bash
# gpu_s14f.sh — session 14, call 5 (nvidia-h200, ~1 min; the snapshot of
# call 4, .gpu-snap-e, run carry [".gpu-snap-e"] "cd .gpu-snap-e &&
# OUT=$OUT bash scripts/gpu_s14f.sh"). Call 4's engine profile put
# QK_ROPE_STORE at ~36 us a 2048-token call against 17.6 us in
# test_cuda_rope_pf (same kernel, warm, one small cache): is it the KV
# pool (0.9 of the device: ~120 GB; each new request's blocks lie
# elsewhere in it, TLB misses on the cache writes) or the engine's L2
# state? Qwen3-0.6B bf16, session-13 kernels (VLLM_CUDA_RS_PF=1,
# VLLM_CUDA_NORM_WARP=0): median TTFT of 8 2048-token prefills at
# --gpu-memory-utilization 0.9 / 0.05 / 0.02, three rounds, then the
# per-op table (PDL and graphs off) at 0.9 and 0.02.
# Record of a call made with the binaries of branch s14-rows (its
# VLLM_CUDA_RS_PF variants and VLLM_CUDA_NORM_WARP are not on main).
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s14f
M=/tmp/rand-qwen3-0.6b
[ -f $M/config.json ] || $PY scripts/gpu_hf.py make --shape qwen3-0.6b --out $M >$L/make.log 2>&1
gpu_bin
export VLLM_CUDA_RS_PF=1 VLLM_CUDA_NORM_WARP=0
pf() { local u=$1; shift; env "$@" ./bin/vllm bench --device cuda --model $M --num-prompts 8 --input-len 2048 \
    --output-len 1 --concurrency 1 --max-num-seqs 1 --max-num-batched-tokens 8192 --gpu-memory-utilization $u; }
for r in 1 2 3; do
    line="round $r:"
    for u in 0.9 0.05 0.02; do
        pf $u >$L/pf_${u}_$r.log 2>&1
        line="$line util $u $(sed -n 's/^Median TTFT (ms): *\([0-9.]*\).*/\1/p' $L/pf_${u}_$r.log | head -1)"
    done
    echo "$line ms"
done
grep -iE "kv cache|blocks" $L/pf_0.02_1.log | head -3
for u in 0.9 0.02; do
    say "per-op, util $u"
    pf $u VLLM_CUDA_PROFILE=1 VLLM_CUDA_PDL=0 VLLM_CUDA_GRAPHS=0 >$L/prof_$u.txt 2>&1
    grep -E "cuda profile|n>64" $L/prof_$u.txt | cut -c1-150
done
say done
