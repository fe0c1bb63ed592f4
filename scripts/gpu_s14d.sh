#!/usr/bin/env bash
# gpu_s14d.sh — session 14, call 3 (nvidia-h200, ~4 min; prebuilt vllm and
# test_cuda_rope_pf: `bash scripts/gpu_snap.sh d vllm test_cuda_rope_pf`,
# run carry [".gpu-snap-d"] "cd .gpu-snap-d && OUT=$OUT bash
# scripts/gpu_s14d.sh"). The 0.6B prefill gate: session 13's ncu put
# k_qk_rope_store_pf at 0.62 ms of a 5.85 ms 2048-token prefill (22 us a
# layer for ~34 MB: ~1.5 TB/s), but ncu runs kernels one at a time with
# cold caches. Here:
#   1. test_cuda_rope_pf: the prefill kernel's variants (VLLM_CUDA_RS_PF
#      "p": persistent grid; "8": 8 bf16 rows ahead kept as loaded; "8p")
#      bit-identical to it, and all timed warm (report); memcheck of the
#      cases;
#   2. Qwen3-0.6B bf16 (random, gpu_hf.py make): the per-op GPU table of a
#      2048-token prefill in the engine (VLLM_CUDA_PROFILE, PDL and graphs
#      off), and nsys's kernel summary of 8 prefills if nsys is here;
#   3. the median TTFT of 8 2048-token prefills (gpu_bench.sh's command)
#      per variant, alternated, two rounds; greedy ids of 2048 + 16 per
#      variant compared.
# Record of a call made with the binaries of branch s14-rows (its
# VLLM_CUDA_RS_PF variants and VLLM_CUDA_NORM_WARP are not on main).
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s14d
M=/tmp/rand-qwen3-0.6b
( $PY scripts/gpu_hf.py make --shape qwen3-0.6b --out $M >$L/make.log 2>&1; echo "exit $?" >>$L/make.log ) &
gpu_bin
say test_cuda_rope_pf
(cd bin && timeout 200 ./test_cuda_rope_pf) >$L/test_rope_pf.log 2>&1
echo "test_cuda_rope_pf exit $? $(grep -E 'PASSED|FAILED' $L/test_rope_pf.log | head -2 | tr '\n' ' ')"
grep -E "qk_rope_store|differs|DIFFERS|LINE|Failure" $L/test_rope_pf.log | cut -c1-240 | head -12
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
(cd bin && VLLM_TEST_ONLY=test_rope_pf_cases timeout 200 $SAN --tool memcheck ./test_cuda_rope_pf) >$L/memcheck.log 2>&1
echo "memcheck test_cuda_rope_pf exit $? $(grep -E 'ERROR SUMMARY' $L/memcheck.log | tail -1)"
while ! grep -q exit $L/make.log 2>/dev/null; do sleep 1; done; tail -1 $L/make.log
ids=$($PY -c "import json, random; random.seed(1); V = json.load(open('$M/config.json'))['vocab_size'];
print(','.join(str(random.randrange(V // 100, min(V, 100000))) for _ in range(2048)))")
say "per-op GPU time, 2048-token prefill (PDL and graphs off)"
VLLM_CUDA_PROFILE=1 VLLM_CUDA_PDL=0 VLLM_CUDA_GRAPHS=0 ./bin/vllm run --device cuda --model $M --prompt-ids "$ids" \
    --max-tokens 2 --ignore-eos --temperature 0 >/dev/null 2>$L/prof.txt
grep -vE "^\s*$" $L/prof.txt | tail -40 | cut -c1-160
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
if [ -n "$NSYS" ]; then
    say "nsys: kernels of 8 prefills (engine, PDL on)"
    timeout 150 "$NSYS" profile -t cuda -o $L/nsys --force-overwrite true ./bin/vllm bench --device cuda --model $M \
        --num-prompts 8 --input-len 2048 --output-len 1 --concurrency 1 --max-num-seqs 1 --max-num-batched-tokens 8192 \
        >$L/nsys.out 2>&1
    timeout 60 "$NSYS" stats --report cuda_gpu_kern_sum --format csv $L/nsys.nsys-rep >$L/nsys_kern.csv 2>/dev/null
    head -25 $L/nsys_kern.csv | cut -c1-200
    rm -f $L/nsys.nsys-rep $L/nsys.sqlite
else
    echo "nsys: none"
fi
say "TTFT per variant"
for r in 1 2; do
    for k in 1 p 8 8p; do
        VLLM_CUDA_RS_PF=$k ./bin/vllm bench --device cuda --model $M --num-prompts 8 --input-len 2048 --output-len 1 \
            --concurrency 1 --max-num-seqs 1 --max-num-batched-tokens 8192 >$L/pf_${k}_$r.log 2>&1
        echo "round $r RS_PF=$k: median TTFT $(sed -n 's/^Median TTFT (ms): *\([0-9.]*\).*/\1/p' $L/pf_${k}_$r.log | head -1) ms"
    done
done
for k in 1 p 8 8p; do
    VLLM_CUDA_RS_PF=$k ./bin/vllm run --device cuda --model $M --prompt-ids "$ids" --max-tokens 16 --ignore-eos \
        --temperature 0 --print-ids >$L/ids_$k.txt 2>/dev/null
done
for k in p 8 8p; do cmp -s $L/ids_1.txt $L/ids_$k.txt && echo "greedy ids 1 == $k" || echo "greedy ids 1 != $k"; done
say done
