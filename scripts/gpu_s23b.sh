#!/usr/bin/env bash
# gpu_s23b.sh — prepared in session 22 (nvidia-h200, ~3 min; branch
# s22-l2res, compiled, never run): the residual stream kept in L2 during a
# prefill (rt_backend_keep_cached: an access-policy window with persisting
# hits over m->x, VLLM_CUDA_KEEP_CACHED=1; off by default). Session 22's
# ncu: the RMSNORM after nvjet's beta-add reads the residual from DRAM (L2
# hit 42%, 6.8 us x 56 a 0.6B prefill), nvjet itself 13.5 MB from DRAM.
#   1. greedy ids on / off (the hint changes no arithmetic: identical);
#   2. 0.6B warm TTFT at 2048 (4 rounds) and 8190 tokens (2), 8B at 2048
#      (2), concurrency 64 (2 rounds), on / off;
#   (session 23: with VLLM_CUDA_MATMUL_ADD=0 too, the residual add in the norm)
#   3. ncu (clock, cycles, L2, DRAM) of one 0.6B prefill with it on.
#   bash scripts/gpu_snap.sh s23b vllm
#   run carry [".gpu-snap-s23b"] "cd .gpu-snap-s23b && OUT=$OUT bash scripts/gpu_s23b.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s23b
gpu_bin
gpu_models
gpu_model_wait 6
gpu_greedy vllm $M6 $L/g_off.txt
VLLM_CUDA_KEEP_CACHED=1 gpu_greedy vllm $M6 $L/g_on.txt
echo "greedy ids on vs off: $(cmp -s $L/g_on.txt $L/g_off.txt && echo identical || echo differ)"
for r in 1 2 3 4; do
    gpu_pf vllm $M6 $L/pf_off_$r.log
    VLLM_CUDA_KEEP_CACHED=1 gpu_pf vllm $M6 $L/pf_on_$r.log
    VLLM_CUDA_MATMUL_ADD=0 gpu_pf vllm $M6 $L/pf_ma0_$r.log
    VLLM_CUDA_MATMUL_ADD=0 VLLM_CUDA_KEEP_CACHED=1 gpu_pf vllm $M6 $L/pf_ma0on_$r.log
    echo "2048 round $r: off $(gpu_med $L/pf_off_$r.log) / on $(gpu_med $L/pf_on_$r.log) / MATMUL_ADD=0 $(gpu_med $L/pf_ma0_$r.log) / MATMUL_ADD=0 on $(gpu_med $L/pf_ma0on_$r.log) ms"
done
pf8k() { timeout 90 ./bin/vllm bench --device cuda --model $M6 --num-prompts 8 --input-len 8190 --output-len 1 \
    --concurrency 1 --max-num-seqs 1 --max-num-batched-tokens 8192 >$1 2>&1; }
for r in 1 2; do
    pf8k $L/pf8k_off_$r.log
    VLLM_CUDA_KEEP_CACHED=1 pf8k $L/pf8k_on_$r.log
    echo "8190 round $r: off $(gpu_med $L/pf8k_off_$r.log) / on $(gpu_med $L/pf8k_on_$r.log) ms"
done
c64() { timeout 150 ./bin/vllm bench --device cuda --model $M6 --num-prompts 128 --input-len 1024 --output-len 128 \
    --concurrency 64 --max-num-seqs 64 --max-num-batched-tokens 8192 >$1 2>&1
    echo "$(grep -E 'Output token throughput|Mean TTFT|Mean TPOT' $1 | tr -s ' ' | tr '\n' ';')"; }
for r in 1 2; do
    echo "c64 round $r off: $(c64 $L/c64_off_$r.log)"
    echo "c64 round $r on: $(VLLM_CUDA_KEEP_CACHED=1 c64 $L/c64_on_$r.log)"
done
ids=$($PY -c "import json, random; random.seed(1); V = json.load(open('$M6/config.json'))['vocab_size'];
print(','.join(str(random.randrange(V // 100, min(V, 100000))) for _ in range(2048)))")
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
M=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__cycles_elapsed.max,lts__t_sectors_op_read.sum
M=$M,lts__t_sectors_op_write.sum,lts__t_sector_hit_rate.pct,dram__bytes_read.sum,dram__bytes_write.sum
for k in 0 1; do
    VLLM_CUDA_KEEP_CACHED=$k timeout 200 "$NCU" --metrics $M --clock-control none --cache-control none --csv \
        --print-units base --launch-count 300 ./bin/vllm run --device cuda --model $M6 --prompt-ids "$ids" \
        --max-tokens 1 --ignore-eos --temperature 0 >$L/ncu_$k.csv 2>$L/ncu_$k.err
    echo "ncu keep_cached=$k exit $?"
    $PY tools/ncu_runs.py $L/ncu_$k.csv 0 --all --grep "gemm|fa3|nvjet|norm_vec<0"
done
gpu_model_wait 8
for r in 1 2; do
    gpu_pf vllm $M8 $L/pf8b_off_$r.log
    VLLM_CUDA_KEEP_CACHED=1 gpu_pf vllm $M8 $L/pf8b_on_$r.log
    echo "8B 2048 round $r: off $(gpu_med $L/pf8b_off_$r.log) / on $(gpu_med $L/pf8b_on_$r.log) ms"
done
say done
