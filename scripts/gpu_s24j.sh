#!/usr/bin/env bash
# gpu_s24j.sh — session 24, call 10 (nvidia-h200, ~2.5 min; the device
# time's last 249 s): branch s24-x16, the bf16 residual stream in prefill
# steps (arch_llama.c bf16_residual; ops: RMSNORM over bf16 x, MATMUL_ADD
# into bf16, EMBED into bf16): test_cuda_ops (the new bf16 cases against
# the CPU), test_model_last_rows on the GPU, greedy ids of a 2048-token
# prompt + 32 with and without (VLLM_BF16_RESIDUAL=0), the 0.6B 2048-token
# TTFT A/B x 2. Also main's CLI / C API defaults written after session
# 24's device time: `vllm bench` with no device / budget / scheduling
# flags (expect cuda, async on, 256 sequences, 8192 tokens, logged) and
# test_capi on the GPU machine (device 0 = auto -> the GPU).
#   bash scripts/gpu_snap.sh s24j vllm test_cuda_ops test_model_last_rows test_capi
#   run carry [".gpu-snap-s24j"] "cd .gpu-snap-s24j && OUT=$OUT bash scripts/gpu_s24j.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s24j
gpu_bin
( [ -f $M6/config.json ] || $PY scripts/gpu_hf.py make --shape qwen3-0.6b --out $M6; echo "exit $?" ) >$L/make6.log 2>&1 &
gpu_fixtures
gpu_test ops 60 VLLM_CUDA_SPEED=0 ./test_cuda_ops
grep -E "FAILED|ERROR|error" $L/ops.log | head -5
gpu_test lr 60 VLLM_TEST_DEVICE=cuda ./test_model_last_rows
grep -E "ERROR|differ" $L/lr.log | head -5
gpu_model_wait 6
gpu_greedy vllm $M6 $L/g16.txt
VLLM_BF16_RESIDUAL=0 gpu_greedy vllm $M6 $L/g32.txt
$PY -c "a = open('$L/g16.txt').read().split(); b = open('$L/g32.txt').read().split()
same = sum(x == y for x, y in zip(a, b)); first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
print(f'greedy ids bf16 residual vs f32: {same}/{len(a)} equal, first difference {first}')"
for r in 1 2; do
    gpu_pf vllm $M6 $L/pf16_$r.log
    VLLM_BF16_RESIDUAL=0 gpu_pf vllm $M6 $L/pf32_$r.log
    echo "round $r: 2048 TTFT bf16 residual $(gpu_med $L/pf16_$r.log) ms, f32 $(gpu_med $L/pf32_$r.log) ms"
done
timeout 120 ./bin/vllm bench --model $M6 --num-prompts 64 --input-len 512 --output-len 32 >$L/defaults.log 2>&1
echo "bench, no flags: exit $? $(grep -E 'device:|async scheduling:|on a GPU of' $L/defaults.log | tr '\n' ' ')"
grep -E 'Output token throughput' $L/defaults.log
gpu_test capi 120 ./test_capi
say done
