#!/usr/bin/env bash
# gpu_s25b.sh — session 25, call 2 (nvidia-h200, ~4 min): where the time
# goes, before choosing the next lever of issue 6. On branch s24-x16's
# vllm (= main + the bf16 residual stream in prefill steps):
#  1. ncu per-kernel time of the 0.6B's 2048-token prefill with the bf16
#     residual and with f32 (VLLM_BF16_RESIDUAL=0): call 1 measured the
#     same TTFT both ways (4.97 / 4.96-5.03 ms) though the norms read half
#     the bytes; which kernels moved?
#  2. serving's decode step: the 0.6B at concurrency 64 (64 x 1024-token
#     prompts, 16 out, 64 sequences, 8192 tokens a step, sync): per-op GPU
#     time of eager steps (VLLM_CUDA_PROFILE=1 VLLM_CUDA_GRAPHS=0; the
#     9-64-row class = the decode steps), then ncu over the graphed steps
#     (node by node, launches 3000-5999: past the prefill steps), cut into
#     steps by tools/ncu_summary.py; the CSV comes back for other cuts.
#   bash scripts/gpu_snap.sh s24j vllm test_cuda_ops test_model_last_rows test_capi   (call 1's snapshot)
#   run carry [".gpu-snap-s24j"] "cd .gpu-snap-s24j && OUT=$OUT bash scripts/gpu_s25b.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s25b
gpu_bin
( [ -f $M6/config.json ] || $PY scripts/gpu_hf.py make --shape qwen3-0.6b --out $M6; echo "exit $?" ) >$L/make6.log 2>&1
tail -1 $L/make6.log
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
ids=$($PY -c "import json, random; random.seed(1); V = json.load(open('$M6/config.json'))['vocab_size'];
print(','.join(str(random.randrange(V // 100, min(V, 100000))) for _ in range(2048)))")
for r in 16 32; do
    v=1; [ $r = 32 ] && v=0
    say "ncu prefill, residual $r"
    VLLM_BF16_RESIDUAL=$v timeout 150 $NCU --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
        --clock-control none --graph-profiling node --csv --print-units base --launch-count 1500 \
        ./bin/vllm run --device cuda --model $M6 --prompt-ids "$ids" --max-tokens 2 --ignore-eos \
        --temperature 0 >$L/ncu_pf$r.csv 2>$L/ncu_pf$r.err
    echo "ncu exit $?"
    $PY tools/ncu_summary.py $L/ncu_pf$r.csv | head -24
    gzip -f $L/ncu_pf$r.csv; cp $L/ncu_pf$r.csv.gz $FINAL/
done
B64="--device cuda --model $M6 --num-prompts 64 --input-len 1024 --output-len 16 --concurrency 64 --max-num-seqs 64 --max-num-batched-tokens 8192 --no-async-scheduling"
say "per-op GPU time, eager, concurrency 64"
VLLM_CUDA_PROFILE=1 VLLM_CUDA_GRAPHS=0 timeout 120 ./bin/vllm bench $B64 >$L/prof64.log 2>&1
echo "exit $?"; grep -A60 "cuda profile" $L/prof64.log | head -70
say "graphed, concurrency 64 (no ncu): $(timeout 120 ./bin/vllm bench $B64 >$L/b64.log 2>&1; tp $L/b64.log)"
say "ncu over concurrency 64, launches 3000-5999"
timeout 240 $NCU --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
    --clock-control none --graph-profiling node --csv --print-units base --launch-skip 3000 --launch-count 3000 \
    ./bin/vllm bench $B64 >$L/ncu_c64.csv 2>$L/ncu_c64.err
echo "ncu exit $?"
$PY tools/ncu_summary.py $L/ncu_c64.csv | head -40
gzip -f $L/ncu_c64.csv; cp $L/ncu_c64.csv.gz $FINAL/
say done
