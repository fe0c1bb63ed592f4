#!/usr/bin/env bash
# gpu_s15a.sh — prepared in session 14 for session 15's first call
# (nvidia-h200, ~4-5 min) on branch s15 (= s15-rope + s15-fa3ps):
#   git checkout s15 && bash scripts/gpu_snap.sh a vllm test_cuda_rope_pf test_cuda_flash test_cuda_mk
#   run carry [".gpu-snap-a"] "cd .gpu-snap-a && OUT=$OUT bash scripts/gpu_s15a.sh"
# The 0.6B 2048-token prefill (5.64 ms under ncu with a warm L2, session
# 14's gpu_s14g.sh: GEMMs 2.81 ms, k_flash_fa3 1.43 ms, k_qk_rope_store_pf
# 0.57, ADD_RMSNORM 0.48, GLU 0.33; engine TTFT 5.9-6.0 ms):
#   1. k_flash_fa3 with persistent CTAs (VLLM_CUDA_FLASH_WG=4, prepared
#      blind): 45 s probes of test_flash_gqa / _long first (a barrier-
#      protocol hang shows as exit 124 and leaves fa3ps out of every later
#      step), then test_cuda_flash on fa3 and fa3ps (cases + timing),
#      memcheck of fa3ps on test_flash_long (multi-item CTAs);
#   2. k_qk_rope_store_pf with the half-warp's 64 angles computed once and
#      shuffled (the branch's default, VLLM_CUDA_RS_PF=2) vs every lane's
#      own 8 (=1; session 14's ncu: 0.48 issued a cycle per scheduler, SM
#      38%, DRAM 19%: issue- and latency-bound): test_cuda_rope_pf
#      (bit-identity, speed), memcheck of its cases;
#   3. median TTFT of 8 2048-token prefills, configurations FLASH_WG 2 / 4
#      x RS_PF 1 / 2, three rounds alternated; greedy ids of each;
#   4. ncu --set full of k_flash_fa3 (default) in the engine, L2 warm: L2
#      / L1 / DRAM throughput, tensor pipe, stall reasons (what limits it
#      at ~360 TFLOP/s);
#   5. the megakernel lab (cuda_mk.cu, test_cuda_mk; prepared blind):
#      decode layers without attention (RMSNorm + QKV, Wo + residual,
#      RMSNorm + gate|up GLU, down + residual: dependent bf16 GEMVs) in
#      one persistent kernel with grid
#      barriers and a producer warp streaming the weights ahead; each
#      phase vs a double reference, memcheck, then the chain's GB/s (28
#      0.6B-shaped / 8 8B-shaped layers) vs one op a phase in a graph. The
#      number that decides whether a decode megakernel is worth building:
#      the 0.6B chain's fraction of the d2d rate (the separate ops reach
#      ~0.45-0.55 on those shapes).
# Merge rules: fa3ps correct, memcheck clean and TTFT lower in all three
# rounds -> default 4; the rope change likewise -> default 2 (s15-rope's
# default already); else keep 2 / 1 and record.
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s15a
M=/tmp/rand-qwen3-0.6b
( $PY scripts/gpu_hf.py make --shape qwen3-0.6b --out $M >$L/make.log 2>&1; echo "exit $?" >>$L/make.log ) &
gpu_bin
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
# (order: the quick decisive results first; the memchecks and ncu last,
# each with its own limit, so the call stays inside 600 s)
say "megakernel lab"
gpu_test test_mk 150 ./test_cuda_mk
grep -E "^mk |speed: mk|LINE|Failure|mk plan" $L/test_mk.log | cut -c1-240 | head -24
say "probe fa3ps"
PS_OK=1
for t in test_flash_gqa test_flash_long; do # long: 256 items on 132 CTAs, so CTAs walk two
    line=$(gpu_test probe_fa3ps_$t 45 VLLM_TEST_FILTER=$t VLLM_TEST_FLASH_ONLY=fa3ps VLLM_CUDA_SPEED=0 ./test_cuda_flash)
    echo "$line"
    case "$line" in *" exit 0 "*) ;; *) PS_OK=0; tail -3 $L/probe_fa3ps_$t.log;; esac
done
say "test_cuda_flash (fa3, fa3ps: cases + timing)"
ONLY="fa3$([ $PS_OK = 1 ] && echo ,fa3ps)"
gpu_test test_flash 150 VLLM_TEST_FLASH_ONLY=$ONLY ./test_cuda_flash
grep -E "tile fa3ps.*error|LINE|Failure|did not run" $L/test_flash.log | cut -c1-200 | sort | uniq | head -12
grep -E "speed: flash" $L/test_flash.log | cut -c1-200 | head -8
say test_cuda_rope_pf
gpu_test test_rope_pf 90 ./test_cuda_rope_pf
grep -E "qk_rope_store|differs|LINE|Failure" $L/test_rope_pf.log | cut -c1-240 | head -8
while ! grep -q exit $L/make.log 2>/dev/null; do sleep 1; done; tail -1 $L/make.log
ids=$($PY -c "import json, random; random.seed(1); V = json.load(open('$M/config.json'))['vocab_size'];
print(','.join(str(random.randrange(V // 100, min(V, 100000))) for _ in range(2048)))")
CFGS="2:1 2:2$([ $PS_OK = 1 ] && echo ' 4:1 4:2')"
say "TTFT (FLASH_WG:RS_PF)"
for r in 1 2 3; do
    line="round $r:"
    for c in $CFGS; do
        VLLM_CUDA_FLASH_WG=${c%:*} VLLM_CUDA_RS_PF=${c#*:} timeout 60 ./bin/vllm bench --device cuda --model $M \
            --num-prompts 8 --input-len 2048 --output-len 1 --concurrency 1 --max-num-seqs 1 \
            --max-num-batched-tokens 8192 >$L/pf_${c/:/_}_$r.log 2>&1
        line="$line $c $(sed -n 's/^Median TTFT (ms): *\([0-9.]*\).*/\1/p' $L/pf_${c/:/_}_$r.log | head -1)"
    done
    echo "$line ms"
done
for c in $CFGS; do
    VLLM_CUDA_FLASH_WG=${c%:*} VLLM_CUDA_RS_PF=${c#*:} timeout 60 ./bin/vllm run --device cuda --model $M \
        --prompt-ids "$ids" --max-tokens 32 --ignore-eos --temperature 0 --print-ids >$L/ids_${c/:/_}.txt 2>/dev/null
    cmp -s $L/ids_2_1.txt $L/ids_${c/:/_}.txt && echo "greedy ids 2:1 == $c" || echo "greedy ids 2:1 != $c"
done
el() { echo $(( $(date +%s) - t0 )); } # seconds since the start (gpu_common's t0)
say memcheck
if [ "$(el)" -lt 400 ]; then
for t in test_mk test_mk_attn; do
    (cd bin && VLLM_TEST_ONLY=$t timeout 75 $SAN --tool memcheck ./test_cuda_mk) >$L/memcheck_$t.log 2>&1
    echo "memcheck test_cuda_mk $t exit $? $(grep -E 'ERROR SUMMARY' $L/memcheck_$t.log | tail -1)"
done
if [ $PS_OK = 1 ]; then
    (cd bin && VLLM_TEST_FILTER=test_flash_long VLLM_TEST_FLASH_ONLY=fa3ps VLLM_CUDA_SPEED=0 timeout 90 $SAN \
        --tool memcheck ./test_cuda_flash) >$L/memcheck_fa3ps.log 2>&1
    echo "memcheck fa3ps test_flash_long exit $? $(grep -E 'ERROR SUMMARY' $L/memcheck_fa3ps.log | tail -1)"
fi
(cd bin && VLLM_TEST_ONLY=test_rope_pf_cases timeout 60 $SAN --tool memcheck ./test_cuda_rope_pf) >$L/memcheck_rope.log 2>&1
echo "memcheck test_cuda_rope_pf exit $? $(grep -E 'ERROR SUMMARY' $L/memcheck_rope.log | tail -1)"
else
    echo "memcheck skipped: $(el) s gone"
fi
[ "$(el)" -lt 480 ] || { say "ncu skipped: $(el) s gone"; exit 0; }
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
say "ncu --set full: k_flash_fa3 (6th call, engine, warm L2)"
VLLM_CUDA_FLASH_WG=2 timeout 90 $NCU -k regex:k_flash_fa3 --launch-skip 5 --launch-count 1 --cache-control none --set full \
    ./bin/vllm run --device cuda --model $M --prompt-ids "$ids" --max-tokens 1 --ignore-eos --temperature 0 \
    >$L/ncu_fa3.txt 2>&1
echo "ncu exit $?"
grep -E "Duration|DRAM Throughput|L1/TEX Cache Throughput|L2 Cache Throughput|Compute \(SM\) Throughput|Issued Warp|Eligible Warps|Active Warps Per|L2 Hit Rate|Mem Busy|Max Bandwidth|Executed Ipc|SM Busy|Tensor|stall|Stall" \
    $L/ncu_fa3.txt | cut -c1-170 | head -40
say done
