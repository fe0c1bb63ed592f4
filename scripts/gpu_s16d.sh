#!/usr/bin/env bash
# gpu_s16d.sh — session 16, call 4 (nvidia-h200, ~5 min): k_flash_fa3 /
# k_flash_wg with Q staged in one round trip (fw_stage_q: every load of a
# thread before its stores) and k_flash_fa3's output through shared memory
# (fa_store_out: 16-byte stores along the rows), against the same kernels
# before (binaries of aef5459 as *_old, built here and carried):
#   1. test_cuda_flash (new): every case on every variant against the CPU
#      op, then its speed lines; the old binary's speed lines after it;
#   2. greedy ids, 2048-token prompt + 32 tokens, new vs old `vllm run`
#      (the outputs should be bit-identical: same values, same rounding);
#   3. warm 2048-token prefill TTFT (median of 8), old / new alternated,
#      three rounds, random Qwen3-0.6B and Llama-3.1-8B bf16;
#   4. compute-sanitizer memcheck of test_flash_gqa / _block_sizes / _long
#      on fa3 and wg; ncu duration of one k_flash_fa3 (as gpu_s16b.sh).
#   bash scripts/gpu_snap.sh d vllm test_cuda_flash && (cd /tmp && strip vllm_old test_cuda_flash_old && tar cJf /work/main/.gpu-snap-d/old.txz vllm_old test_cuda_flash_old)
#   run carry [".gpu-snap-d"] "cd .gpu-snap-d && OUT=$OUT bash scripts/gpu_s16d.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s16d
gpu_bin
tar xJf old.txz -C bin
gpu_models
say "test_cuda_flash (new)"
gpu_test flash_new 200 ./test_cuda_flash
grep -E "LINE|Failure|did not run|FAILED" $L/flash_new.log | cut -c1-200 | head -8
grep -E "speed: flash" $L/flash_new.log | cut -c1-170 | head -12
say "test_cuda_flash speed (old)"
gpu_test flash_old 120 VLLM_TEST_FILTER=test_flash_speed ./test_cuda_flash_old
grep -E "speed: flash" $L/flash_old.log | cut -c1-170 | head -12
for m in 6 8; do
    M=/tmp/rand-$([ $m = 6 ] && echo qwen3-0.6b || echo llama-8b)
    gpu_model_wait $m
    for b in vllm vllm_old; do gpu_greedy $b $M $L/ids_${m}_$b.txt; done
    cmp -s $L/ids_${m}_vllm.txt $L/ids_${m}_vllm_old.txt && echo "$m: greedy ids new == old" || echo "$m: greedy ids new != old"
    say "prefill 2048 TTFT, shape $m: old / new"
    for r in 1 2 3; do
        gpu_pf vllm_old $M $L/pf${m}_old_$r.log; gpu_pf vllm $M $L/pf${m}_new_$r.log
        echo "shape $m round $r: old $(gpu_med $L/pf${m}_old_$r.log) new $(gpu_med $L/pf${m}_new_$r.log) ms"
    done
done
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
say memcheck
for t in test_flash_gqa test_flash_block_sizes test_flash_long; do
    (cd bin && VLLM_TEST_FILTER=$t VLLM_TEST_FLASH_ONLY=fa3,wg VLLM_CUDA_SPEED=0 timeout 100 $SAN --tool memcheck \
        ./test_cuda_flash) >$L/memcheck_$t.log 2>&1
    echo "memcheck $t exit $? $(grep -E 'ERROR SUMMARY' $L/memcheck_$t.log | tail -1)"
done
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for b in vllm vllm_old; do
    timeout 120 $NCU -k regex:k_flash_fa3 --launch-skip 40 --launch-count 1 --cache-control none --section SpeedOfLight \
        --section WarpStateStats ./bin/$b bench --device cuda --model $M6 --num-prompts 3 --input-len 2048 --output-len 1 \
        --concurrency 1 --max-num-seqs 1 --max-num-batched-tokens 8192 >$L/ncu_$b.txt 2>&1
    echo "ncu $b: $(grep -E '^ *Duration' $L/ncu_$b.txt | head -1 | tr -s ' ')"
done
say done
