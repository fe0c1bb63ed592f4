#!/usr/bin/env bash
# gpu_s17a.sh — prepared in session 16 for session 17's first call
# (nvidia-h200, ~4 min): two changes prepared without a device, each on its
# branch, against main (binaries built here and carried):
#   - s16-producer: k_flash_fa3's producer issues every block's four TMA
#     boxes from one elected lane with warp-uniform operands (block ids
#     broadcast by shuffles) instead of each lane issuing its own through
#     the compiler's loop over distinct lane values (cuobjdump: 49 instead
#     of 210 register-to-uniform moves, no BRA.U.ANY loops); session 16's
#     last profile had 7.3% of the consumers' stall samples waiting for a
#     stage; and k_flash_wg's warpgroup index shuffled from lane 0 (its
#     descriptors in uniform registers: 80 register-to-uniform moves -> 1;
#     the "tile wg" speed lines);
#   - s16-rope: k_qk_rope_store_pf issues its first rows' loads before the
#     slot, position and angles (the wave of blocks then streams rows
#     while it computes its angles), and with bf16 rows keeps a ring of 4
#     rows in flight (a slot refilled as soon as its row is widened)
#     instead of batches of 4 with none in flight during the work (session
#     16's last profile: 36% of its stall samples on the rows' loads).
# Binaries in bin/: vllm, test_cuda_flash, test_cuda_rope_pf (main); vllm_p,
# test_cuda_flash_p (s16-producer); vllm_r, test_cuda_rope_pf_r (s16-rope).
#   1. test_cuda_flash_p (every case on every variant against the CPU op,
#      speed lines) and main's speed lines; test_cuda_rope_pf_r (cases +
#      speed) and main's;
#   2. greedy ids 2048 + 32 of vllm_p and vllm_r vs main, 0.6B and 8B;
#      warm 2048-token TTFT (median of 8): main / p / r, three rounds;
#   3. memcheck: test_cuda_flash_p (test_flash_gqa / _block_sizes / _long on
#      fa3, fa3pp), test_cuda_rope_pf_r cases; ncu durations of
#      k_flash_fa3 and k_qk_rope_store_pf in the 0.6B engine, main vs
#      branch;
#   4. for the 8B decode plan: Nsight Compute --set full with source
#      counters of two decode GEMVs (KS 1, U 2: Wo 4096 x 4096 and down
#      4096 x 14336) and one k_fd in `vllm run` (8B, 512 + 64 tokens,
#      graphs), summarised per SASS instruction (tools/ncu_sass_top.py).
# Make (here, from /work/main, main checked out and clean):
#   B=build-cuda; T="vllm test_cuda_flash test_cuda_rope_pf"
#   bash scripts/gpu_snap.sh s17a $T && D=.gpu-snap-s17a && mkdir -p /tmp/s17 && \
#   for br in p:s16-producer r:s16-rope; do git checkout -q ${br#*:} && (cd $B && cmake . >/dev/null && make -j2 $T >/dev/null) && \
#     for t in $T; do strip -o /tmp/s17/${t}_${br%%:*} $B/$t; done; done; git checkout -q main && (cd $B && cmake . >/dev/null && make -j2 $T >/dev/null) && \
#   (cd /tmp/s17 && tar cJf /work/main/$D/branches.txz vllm_p test_cuda_flash_p vllm_r test_cuda_rope_pf_r) && du -sm $D
#   run carry [".gpu-snap-s17a"] "cd .gpu-snap-s17a && OUT=$OUT bash scripts/gpu_s17a.sh"
# Merge rule, per branch: its tests and memcheck pass, greedy ids equal
# main's, its kernel faster alone and in the engine, TTFT not slower in any
# round.
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s17a
gpu_bin
tar xJf branches.txz -C bin
gpu_models
say "test_cuda_flash (s16-producer), then main's speed lines"
gpu_test flash_p 200 ./test_cuda_flash_p
grep -E "LINE|Failure|did not run|FAILED" $L/flash_p.log | cut -c1-200 | head -8
grep -E "speed: flash.*(fa3|wg \()" $L/flash_p.log | cut -c1-170 | head -8
gpu_test flash_main 120 VLLM_TEST_FILTER=test_flash_speed ./test_cuda_flash
grep -E "speed: flash.*(fa3|wg \()" $L/flash_main.log | cut -c1-170 | head -8
say "test_cuda_rope_pf (s16-rope), then main's"
gpu_test rope_r 120 ./test_cuda_rope_pf_r
grep -E "LINE|Failure|FAILED|qk_rope_store 2048" $L/rope_r.log | cut -c1-200 | head -6
gpu_test rope_main 120 VLLM_TEST_ONLY=test_rope_pf_speed ./test_cuda_rope_pf
grep -E "qk_rope_store 2048" $L/rope_main.log | cut -c1-200
for m in 6 8; do
    M=/tmp/rand-$([ $m = 6 ] && echo qwen3-0.6b || echo llama-8b)
    gpu_model_wait $m
    for b in vllm vllm_p vllm_r; do gpu_greedy $b $M $L/ids_${m}_$b.txt; done
    for b in vllm_p vllm_r; do
        cmp -s $L/ids_${m}_vllm.txt $L/ids_${m}_$b.txt && echo "$m: greedy ids $b == main" || echo "$m: greedy ids $b != main"
    done
    say "prefill 2048 TTFT, shape $m: main / p / r"
    for r in 1 2 3; do
        line="shape $m round $r:"
        for b in vllm vllm_p vllm_r; do gpu_pf $b $M $L/pf${m}_${b}_$r.log; line="$line $b $(gpu_med $L/pf${m}_${b}_$r.log)"; done
        echo "$line ms"
    done
done
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
say memcheck
for t in test_flash_gqa test_flash_block_sizes test_flash_long; do
    (cd bin && VLLM_TEST_FILTER=$t VLLM_TEST_FLASH_ONLY=fa3,fa3pp VLLM_CUDA_SPEED=0 timeout 100 $SAN --tool memcheck \
        ./test_cuda_flash_p) >$L/memcheck_$t.log 2>&1
    echo "memcheck s16-producer $t exit $? $(grep -E 'ERROR SUMMARY' $L/memcheck_$t.log | tail -1)"
done
(cd bin && VLLM_TEST_ONLY=test_rope_pf_cases timeout 90 $SAN --tool memcheck ./test_cuda_rope_pf_r) >$L/mc_rope.log 2>&1
echo "memcheck s16-rope test_rope_pf_cases exit $? $(grep -E 'ERROR SUMMARY' $L/mc_rope.log | tail -1)"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for b in vllm vllm_p vllm_r; do
    timeout 120 $NCU -k regex:"k_flash_fa3|k_qk_rope_store_pf" --launch-skip 80 --launch-count 2 --cache-control none \
        --section SpeedOfLight ./bin/$b bench --device cuda --model $M6 --num-prompts 3 --input-len 2048 --output-len 1 \
        --concurrency 1 --max-num-seqs 1 --max-num-batched-tokens 8192 >$L/ncu_$b.txt 2>&1
    echo "ncu $b: $(grep -E '^  [a-z_]+|^ *Duration' $L/ncu_$b.txt | sed 's/(rs_args.*\|(CUtensorMap.*//' | tr -s ' ' | tr '\n' ' ')"
done
say "ncu source counters: 8B decode GEMVs and k_fd (main)"
ids=$($PY -c "import random; random.seed(0); print(','.join(str(random.randrange(1000, 100000)) for _ in range(512)))")
for k in "k_gemv_half_u<.*, 1, 2, false>:300:2" "k_fd<:100:1"; do
    re=${k%%:*} rest=${k#*:}; skip=${rest%%:*} cnt=${rest#*:}; name=$(echo "$re" | cut -c1-12 | tr -c 'a-z0-9_\n' '_')
    timeout 150 $NCU --kernel-name-base demangled -k regex:"$re" --launch-skip $skip --launch-count $cnt --cache-control none \
        --set full -o $L/$name -f ./bin/vllm run --device cuda --model $M8 --prompt-ids "$ids" --max-tokens 64 \
        --ignore-eos --temperature 0 >$L/ncu_run_$name.txt 2>&1
    echo "ncu $re exit $?"
    $NCU --import $L/$name.ncu-rep --page details --section SpeedOfLight --section WarpStateStats >$L/$name.txt 2>&1
    grep -E "^  [a-z_]+|Duration|DRAM Throughput|Issued Warp|Warp Cycles Per Issued" $L/$name.txt | cut -c1-110 | head -10
    $NCU --import $L/$name.ncu-rep --page source --csv --print-source sass >$L/${name}_sass.csv 2>/dev/null
    $PY tools/ncu_sass_top.py $L/${name}_sass.csv 14
    cp $L/${name}_sass.csv $FINAL/ 2>/dev/null
done
say done
