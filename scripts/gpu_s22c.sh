#!/usr/bin/env bash
# gpu_s22c.sh — session 22 (nvidia-h200, ~4 min): why the ping-pong GEMMs
# run longer in the engine than alone (0.6B QKV 34.5 vs 31.6 us, GLU 43.4
# vs 38.1, session 22 calls 1-3; nvjet's Wo / down too). Nsight Compute
# with the SM clock, cycles, L2 sectors and DRAM bytes per launch, clocks
# left alone, of the same kernels (1) alone in test_cuda_gemm's timing
# graphs (QKV at 2048 rows: VLLM_TEST_RS_N=2048; GLU: the 0.6B's shape)
# and (2) in one 2048-token 0.6B prefill; each with the caches as the
# previous kernel left them (--cache-control none) and flushed before
# every launch (all): equal times with flushed caches would put the gap
# on the L2 state, equal cycles at a lower clock on the clock.
#   bash scripts/gpu_snap.sh s22c vllm test_cuda_gemm
#   run carry [".gpu-snap-s22c"] "cd .gpu-snap-s22c && OUT=$OUT bash scripts/gpu_s22c.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s22c
gpu_bin
gpu_models
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
M=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__cycles_elapsed.max,lts__t_sectors_op_read.sum
M=$M,lts__t_sectors_op_write.sum,lts__t_sector_hit_rate.pct,dram__bytes_read.sum,dram__bytes_write.sum
nc() { # nc LOG CACHE KERNEL-REGEX COUNT CMD...: ncu of CMD (in bin/) into $L/LOG.csv
    local log=$1 cache=$2 re=$3 cnt=$4
    shift 4
    (cd bin && timeout 200 "$NCU" --metrics $M --clock-control none --cache-control $cache --csv --print-units base \
        -k regex:"$re" --launch-count $cnt "$@") >$L/$log.csv 2>$L/$log.err
    echo "ncu $log ($cache) exit $?"
}
for c in none all; do
    say "alone, caches $c"
    nc q_$c $c k_gemm_qkv_pp 400 env VLLM_TEST_ONLY=test_matmul_rope_store VLLM_TEST_RS_N=2048 ./test_cuda_gemm
    $PY tools/ncu_runs.py $L/q_$c.csv 20 --all
    nc g_$c $c k_gemm_glu_pp 200 env VLLM_TEST_ONLY=test_gemm_glu_fused VLLM_CUDA_SPEED=2 ./test_cuda_gemm
    $PY tools/ncu_runs.py $L/g_$c.csv 20 --all
done
gpu_model_wait 6
ids=$($PY -c "import json, random; random.seed(1); V = json.load(open('$M6/config.json'))['vocab_size'];
print(','.join(str(random.randrange(V // 100, min(V, 100000))) for _ in range(2048)))")
for c in none all; do
    say "engine, caches $c"
    nc e_$c $c . 400 ./vllm run --device cuda --model $M6 --prompt-ids "$ids" --max-tokens 1 --ignore-eos --temperature 0
    $PY tools/ncu_runs.py $L/e_$c.csv 0 --all --grep "gemm|fa3|nvjet|norm_vec<0"
done
say done
