#!/usr/bin/env bash
# gpu_s16g.sh — session 16, call 7 (nvidia-h200, ~3 min): k_flash_fa3 with
# its wgmma descriptors built in uniform registers (a base word per tile
# plus a constant per k-step: flw_desc_lo / flw_desc_mk; the warpgroup
# index and tile counts shuffled from lane 0 so the compiler knows them
# warp-uniform): 210 instead of 292 register-to-uniform moves, ~4 uniform
# instructions per wgmma instead of ~12 vector ones (cuobjdump here);
# producer / consumer registers 64 / 216 (no spill). Against main at
# bf90f49 (*_base2, carried as base2.txz):
#   1. test_cuda_flash (new): every case on every variant against the CPU
#      op, then its speed lines; the base binary's speed lines after it;
#   2. greedy ids, 2048-token prompt + 32 tokens, new vs base;
#   3. warm 2048-token prefill TTFT (median of 8), base / new alternated,
#      three rounds, random Qwen3-0.6B and Llama-3.1-8B bf16;
#   4. memcheck of test_flash_gqa / _block_sizes / _long on fa3 and wg;
#      ncu duration of one k_flash_fa3 in the 0.6B engine, new vs base.
#   bash scripts/gpu_snap.sh g vllm test_cuda_flash && (cd /tmp && cp vllm_base2 vllm_old && cp test_cuda_flash_base2 test_cuda_flash_old && strip vllm_old test_cuda_flash_old && tar cJf /work/main/.gpu-snap-g/old.txz vllm_old test_cuda_flash_old)
#   run carry [".gpu-snap-g"] "cd .gpu-snap-g && OUT=$OUT bash scripts/gpu_s16g.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s16g
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
