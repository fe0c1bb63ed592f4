#!/usr/bin/env bash
# gpu_s16f.sh — session 16, call 6 (nvidia-h200, ~5 min): two prefill row
# kernels after session 16's source-level ncu (gpu_s16e.sh):
#   - k_qk_rope_store_pf: the rows loaded ahead kept raw (bf16: 4 registers
#     a row), 4 blocks an SM with bf16 activations (64 registers, no spill):
#     2048 tokens = 512 blocks in one wave of 528 instead of 1.29 waves;
#   - k_glu_flat: the GLU over the flat chunk list, 2 chunks a thread with
#     every load first (VLLM_CUDA_GLU_FLAT=0: the row kernel).
# Against main at a041579 (bin/vllm_base, carried as base.txz):
#   1. test_cuda_gemm (test_glu_flat_same: bits equal to the row kernel),
#      test_cuda_rope_pf (cases + speed), test_cuda_fused, test_cuda_ops;
#   2. greedy ids 2048 + 32, new vs base; warm 2048-token prefill TTFT
#      (median of 8), base / new / new with GLU_FLAT=0, three rounds, 0.6B
#      and 8B; 3. ncu durations of both kernels in the 0.6B engine, new vs
#      base; 4. memcheck of test_cuda_rope_pf cases and test_glu_flat_same.
#   bash scripts/gpu_snap.sh f vllm test_cuda_gemm test_cuda_rope_pf test_cuda_fused test_cuda_ops && (cd /tmp && cp vllm_base x && strip x && mv x vllm_base_s && tar cJf /work/main/.gpu-snap-f/base.txz vllm_base_s)
#   run carry [".gpu-snap-f"] "cd .gpu-snap-f && OUT=$OUT bash scripts/gpu_s16f.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s16f
gpu_bin
tar xJf base.txz -C bin && mv bin/vllm_base_s bin/vllm_base
gpu_models
for t in test_cuda_gemm test_cuda_rope_pf test_cuda_fused test_cuda_ops; do
    gpu_test $t 150 VLLM_CUDA_SPEED=0 ./$t
    grep -E "LINE|Failure|glu flat|FAILED" $L/$t.log | cut -c1-160 | head -6
done
grep -E "qk_rope_store 2048" $L/test_cuda_rope_pf.log | cut -c1-200
for m in 6 8; do
    M=/tmp/rand-$([ $m = 6 ] && echo qwen3-0.6b || echo llama-8b)
    gpu_model_wait $m
    for b in vllm vllm_base; do gpu_greedy $b $M $L/ids_${m}_$b.txt; done
    cmp -s $L/ids_${m}_vllm.txt $L/ids_${m}_vllm_base.txt && echo "$m: greedy ids new == base" || echo "$m: greedy ids new != base"
    say "prefill 2048 TTFT, shape $m: base / new / new GLU_FLAT=0"
    for r in 1 2 3; do
        gpu_pf vllm_base $M $L/pf${m}_b_$r.log; gpu_pf vllm $M $L/pf${m}_n_$r.log
        VLLM_CUDA_GLU_FLAT=0 gpu_pf vllm $M $L/pf${m}_g_$r.log
        echo "shape $m round $r: base $(gpu_med $L/pf${m}_b_$r.log) new $(gpu_med $L/pf${m}_n_$r.log) glu0 $(gpu_med $L/pf${m}_g_$r.log) ms"
    done
done
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for b in vllm vllm_base; do
    timeout 120 $NCU -k regex:"k_qk_rope_store_pf|k_glu" --launch-skip 80 --launch-count 4 --cache-control none \
        --section SpeedOfLight --section Occupancy ./bin/$b bench --device cuda --model $M6 --num-prompts 3 \
        --input-len 2048 --output-len 1 --concurrency 1 --max-num-seqs 1 --max-num-batched-tokens 8192 >$L/ncu_$b.txt 2>&1
    echo "ncu $b:"; grep -E "^  [a-z_]+|^ *Duration|DRAM Throughput|Achieved Occupancy" $L/ncu_$b.txt | cut -c1-90 | head -16
done
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
(cd bin && VLLM_TEST_ONLY=test_rope_pf_cases timeout 90 $SAN --tool memcheck ./test_cuda_rope_pf) >$L/mc_rope.log 2>&1
echo "memcheck test_cuda_rope_pf exit $? $(grep -E 'ERROR SUMMARY' $L/mc_rope.log | tail -1)"
(cd bin && VLLM_TEST_ONLY=test_glu_flat_same timeout 90 $SAN --tool memcheck ./test_cuda_gemm) >$L/mc_glu.log 2>&1
echo "memcheck test_glu_flat_same exit $? $(grep -E 'ERROR SUMMARY' $L/mc_glu.log | tail -1)"
say done
