#!/usr/bin/env bash
# gpu_s15a.sh — prepared in session 14 for session 15's first call
# (nvidia-h200, ~2 min): on branch s15-rope,
#   git checkout s15-rope && bash scripts/gpu_snap.sh a vllm test_cuda_rope_pf
#   run carry [".gpu-snap-a"] "cd .gpu-snap-a && OUT=$OUT bash scripts/gpu_s15a.sh"
# Two questions of the 0.6B 2048-token prefill (5.64 ms under ncu with a
# warm L2, session 14's gpu_s14g.sh: GEMMs 2.81 ms, k_flash_fa3 1.43 ms,
# k_qk_rope_store_pf 0.57, ADD_RMSNORM 0.48, GLU 0.33):
#   1. k_qk_rope_store_pf with the half-warp's 64 angles computed once and
#      shuffled (the branch's default, VLLM_CUDA_RS_PF=2) vs every lane's
#      own 8 (=1): session 14's ncu of the kernel in the engine showed 0.48
#      issued instructions a cycle per scheduler and SM 38% at DRAM 19%,
#      i.e. it is issue- and latency-bound, not bandwidth-bound.
#      test_cuda_rope_pf (bit-identity of 1 and 2, speed), memcheck of the
#      cases, median TTFT of 8 prefills per mode, three rounds, greedy ids;
#   2. what limits k_flash_fa3 (~360 TFLOP/s of attention, ~40% of the
#      tensor peak): Nsight Compute of one layer's call in the engine, L2
#      left warm (--cache-control none), the full set: L2 / L1 / DRAM
#      throughput (is the K/V stream from L2, 64 KB a 128 x 128 tile, the
#      limit?), tensor pipe utilisation, stall reasons.
# Merge s15-rope if the TTFT wins in all three rounds and the ids match.
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s15a
M=/tmp/rand-qwen3-0.6b
( $PY scripts/gpu_hf.py make --shape qwen3-0.6b --out $M >$L/make.log 2>&1; echo "exit $?" >>$L/make.log ) &
gpu_bin
say test_cuda_rope_pf
(cd bin && timeout 200 ./test_cuda_rope_pf) >$L/test_rope_pf.log 2>&1
echo "test_cuda_rope_pf exit $? $(grep -E 'PASSED|FAILED' $L/test_rope_pf.log | head -2 | tr '\n' ' ')"
grep -E "qk_rope_store|differs|LINE|Failure" $L/test_rope_pf.log | cut -c1-240 | head -8
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
(cd bin && VLLM_TEST_ONLY=test_rope_pf_cases timeout 200 $SAN --tool memcheck ./test_cuda_rope_pf) >$L/memcheck.log 2>&1
echo "memcheck test_cuda_rope_pf exit $? $(grep -E 'ERROR SUMMARY' $L/memcheck.log | tail -1)"
while ! grep -q exit $L/make.log 2>/dev/null; do sleep 1; done; tail -1 $L/make.log
ids=$($PY -c "import json, random; random.seed(1); V = json.load(open('$M/config.json'))['vocab_size'];
print(','.join(str(random.randrange(V // 100, min(V, 100000))) for _ in range(2048)))")
say "TTFT, VLLM_CUDA_RS_PF 1 / 2"
for r in 1 2 3; do
    line="round $r:"
    for k in 1 2; do
        VLLM_CUDA_RS_PF=$k ./bin/vllm bench --device cuda --model $M --num-prompts 8 --input-len 2048 --output-len 1 \
            --concurrency 1 --max-num-seqs 1 --max-num-batched-tokens 8192 >$L/pf_${k}_$r.log 2>&1
        line="$line RS_PF=$k $(sed -n 's/^Median TTFT (ms): *\([0-9.]*\).*/\1/p' $L/pf_${k}_$r.log | head -1)"
    done
    echo "$line ms"
done
for k in 1 2; do
    VLLM_CUDA_RS_PF=$k ./bin/vllm run --device cuda --model $M --prompt-ids "$ids" --max-tokens 32 --ignore-eos \
        --temperature 0 --print-ids >$L/ids_$k.txt 2>/dev/null
done
cmp -s $L/ids_1.txt $L/ids_2.txt && echo "greedy ids RS_PF 1 == 2" || echo "greedy ids RS_PF 1 != 2"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for k in k_qk_rope_store_pf k_flash_fa3; do
    say "ncu --set full: $k (6th call, engine, warm L2)"
    timeout 150 $NCU -k regex:$k --launch-skip 5 --launch-count 1 --cache-control none --set full \
        ./bin/vllm run --device cuda --model $M --prompt-ids "$ids" --max-tokens 1 --ignore-eos --temperature 0 \
        >$L/ncu_$k.txt 2>&1
    echo "ncu exit $?"
    grep -E "Duration|DRAM Throughput|L1/TEX Cache Throughput|L2 Cache Throughput|Compute \(SM\) Throughput|Issued Warp|Eligible Warps|Active Warps Per|Registers Per|Waves Per SM|L2 Hit Rate|Mem Busy|Max Bandwidth|Executed Ipc|SM Busy|Tensor|stall|Stall" \
        $L/ncu_$k.txt | cut -c1-170 | head -40
done
say done
