#!/usr/bin/env bash
# gpu_s22e.sh — session 22 (nvidia-h200, ~5 min; main + the last layer on
# the logit rows, model.c upload_last_rows / arch_llama.c last_rows_views):
# past its KV store, a prefill's last layer runs its attention (one query
# a sequence: the decode kernel), Wo, norm and MLP on the rows whose logits
# the step returns. VLLM_LAST_ROWS=0 is the full last layer (A/B).
#   0. test_engine_async_64 (async == sync, 64 requests at concurrency 16,
#      mixed steps) on the device;
#   1. greedy ids of a 2048-token prompt + 32, default vs =0; the HF oracle
#      (64 tokens after a 2048-token prompt) on the default;
#   2. 0.6B warm TTFT at 2048 tokens (4 rounds: default / =0 / default with
#      the GLU in clusters of 2 (call 5: 4 of 4 rounds ahead)) and 8190 (2);
#   3. concurrency 64, 1024 / 128, default / =0, three rounds;
#   4. 8B warm TTFT at 2048 tokens, default / =0, two rounds.
#   bash scripts/gpu_snap.sh s22e vllm test_engine_async_64
#   run carry [".gpu-snap-s22e"] "cd .gpu-snap-s22e && OUT=$OUT bash scripts/gpu_s22e.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh "${GPU_S22E_NAME:-s22e}" # gpu_s22f.sh: s22f
gpu_bin
gpu_models
gpu_model_wait 6
(cd bin && VLLM_TEST_DEVICE=cuda VLLM_TEST_ASYNC_MODEL=$M6 timeout 200 ./test_engine_async_64) >$L/async64.log 2>&1
echo "test_engine_async_64 exit $?: $(grep -E 'async == sync|FAILED|request [0-9]+ ' $L/async64.log | head -3)"
gpu_greedy vllm $M6 $L/g_d.txt
VLLM_LAST_ROWS=0 gpu_greedy vllm $M6 $L/g_0.txt
echo "greedy ids, last layer on the logit row vs all rows: $(cmp -s $L/g_d.txt $L/g_0.txt && echo identical || { echo differ:; head -c 300 $L/g_d.txt; echo; head -c 300 $L/g_0.txt; })"
$PY -c "import json, random; random.seed(5); V = json.load(open('$M6/config.json'))['vocab_size'];
print(' '.join(str(random.randrange(V // 100, min(V, 100000))) for _ in range(2048)))" >$L/p.ids
timeout 120 ./bin/vllm run --device cuda --model $M6 --prompt-ids "$(tr ' ' ',' <$L/p.ids)" --max-tokens 64 \
    --ignore-eos --temperature 0 --print-ids >$L/ours.ids 2>$L/ours.err
timeout 200 $PY scripts/gpu_hf.py hf --model $M6 --prompt-ids $L/p.ids --ours $L/ours.ids --max-tokens 64 >$L/hf.json 2>$L/hf.err
echo "gpu_hf.py hf exit $?: $(cat $L/hf.json)"
for r in 1 2 3 4; do
    gpu_pf vllm $M6 $L/pf_d_$r.log
    VLLM_LAST_ROWS=0 gpu_pf vllm $M6 $L/pf_0_$r.log
    VLLM_CUDA_GEMM_GLU_CL=2 gpu_pf vllm $M6 $L/pf_g2_$r.log
    echo "2048 round $r: default $(gpu_med $L/pf_d_$r.log) / all rows $(gpu_med $L/pf_0_$r.log) / GLU clusters of 2 $(gpu_med $L/pf_g2_$r.log) ms"
done
pf8k() { timeout 90 ./bin/vllm bench --device cuda --model $M6 --num-prompts 8 --input-len 8190 --output-len 1 \
    --concurrency 1 --max-num-seqs 1 --max-num-batched-tokens 8192 >$1 2>&1; }
for r in 1 2; do
    pf8k $L/pf8k_d_$r.log
    VLLM_LAST_ROWS=0 pf8k $L/pf8k_0_$r.log
    echo "8190 round $r: default $(gpu_med $L/pf8k_d_$r.log) / all rows $(gpu_med $L/pf8k_0_$r.log) ms"
done
c64() { timeout 150 ./bin/vllm bench --device cuda --model $M6 --num-prompts 128 --input-len 1024 --output-len 128 \
    --concurrency 64 --max-num-seqs 64 --max-num-batched-tokens 8192 >$1 2>&1
    echo "$(grep -E 'Output token throughput|Mean TTFT|Mean TPOT' $1 | tr -s ' ' | tr '\n' ';')"; }
for r in 1 2 3; do
    echo "c64 round $r default: $(c64 $L/c64_d_$r.log)"
    echo "c64 round $r all rows: $(VLLM_LAST_ROWS=0 c64 $L/c64_0_$r.log)"
done
gpu_model_wait 8
for r in 1 2; do
    gpu_pf vllm $M8 $L/pf8b_d_$r.log
    VLLM_LAST_ROWS=0 gpu_pf vllm $M8 $L/pf8b_0_$r.log
    echo "8B 2048 round $r: default $(gpu_med $L/pf8b_d_$r.log) / all rows $(gpu_med $L/pf8b_0_$r.log) ms"
done
say done
