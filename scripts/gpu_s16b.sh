#!/usr/bin/env bash
# gpu_s16b.sh — session 16, call 2 (nvidia-h200, ~4 min): the KV cache's
# page size against the prefill attention, with the new `--block-size`:
#   1. warm 2048-token prefill (median TTFT of 8, as gpu_bench.sh) on random
#      Qwen3-0.6B and Llama-3.1-8B bf16 checkpoints at --block-size 16 / 32
#      / 64 / 128, two rounds; vllm bench 1024 / 128 at concurrency 64
#      (0.6B) at 16 / 64 (the decode kernels read pages too);
#   2. Nsight Compute of k_flash_fa3 in the 0.6B engine at block 16 and 128
#      (6th launch, L2 warm): duration, issue, tensor pipe, and the warp
#      stall reasons (cycles a warp spends stalled per issued instruction).
# The k_flash_fa3 producer issues 2 x 2 x (128 / B) TMA boxes a key tile
# (32 at B = 16, 4 at B = 128); if the box count limits the kernel, larger
# pages show it.
#   bash scripts/gpu_snap.sh b vllm
#   run carry [".gpu-snap-b"] "cd .gpu-snap-b && OUT=$OUT bash scripts/gpu_s16b.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s16b
gpu_bin
gpu_models
gpu_model_wait 6
say "0.6B prefill 2048, median TTFT by --block-size"
for r in 1 2; do
    line="0.6B round $r:"
    for b in 16 32 64 128; do gpu_pf vllm $M6 $L/pf6_${b}_$r.log --block-size $b; line="$line B$b $(gpu_med $L/pf6_${b}_$r.log)"; done
    echo "$line ms"
done
say "0.6B vllm bench 1024 / 128 at concurrency 64"
for b in 16 64 16 64; do
    timeout 90 ./bin/vllm bench --device cuda --model $M6 --num-prompts 128 --input-len 1024 --output-len 128 \
        --concurrency 64 --max-num-seqs 64 --max-num-batched-tokens 16384 --block-size $b >$L/c64_$b.log 2>&1
    echo "B$b: $(tp $L/c64_$b.log)"
done
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
ids=$($PY -c "import json, random; random.seed(1); V = json.load(open('$M6/config.json'))['vocab_size'];
print(','.join(str(random.randrange(V // 100, min(V, 100000))) for _ in range(2048)))")
# vllm run has no --block-size: the engine's bench with one prompt and ncu skipping the warm-up launches
for b in 16 128; do
    say "ncu k_flash_fa3, block $b"
    timeout 120 $NCU -k regex:k_flash_fa3 --launch-skip 40 --launch-count 1 --cache-control none \
        --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
        --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active \
        ./bin/vllm bench --device cuda --model $M6 --num-prompts 3 --input-len 2048 --output-len 1 --concurrency 1 \
        --max-num-seqs 1 --max-num-batched-tokens 8192 --block-size $b >$L/ncu_$b.txt 2>&1
    echo "ncu exit $?"
    grep -E "Duration|Issued Warp|Eligible Warps|Active Warps Per|Compute \(SM\) Throughput|L1/TEX Cache Throughput|L2 Cache Throughput|pipe_tensor" $L/ncu_$b.txt | cut -c1-150 | head -12
    grep -E "issue_stalled" $L/ncu_$b.txt | awk '{print $NF, $1}' | sort -rn | head -10
done
gpu_model_wait 8
say "8B prefill 2048, median TTFT by --block-size"
for r in 1 2; do
    line="8B round $r:"
    for b in 16 32 64 128; do gpu_pf vllm $M8 $L/pf8_${b}_$r.log --block-size $b; line="$line B$b $(gpu_med $L/pf8_${b}_$r.log)"; done
    echo "$line ms"
done
say done
