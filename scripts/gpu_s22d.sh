#!/usr/bin/env bash
# gpu_s22d.sh — session 22 (nvidia-h200, ~2 min; main with s21-gluxs
# merged): call 4 found the tensor-core kernels at ~1,765 MHz in the
# engine and alone alike under ncu (cycles equal), the norm at 1,950: the
# clock, not memory, is the in-engine gap. Here: (1) the SM clock, power
# and throttle reasons sampled every 5 ms (nvidia-smi) through a warm
# 2048-token prefill run; (2) the ping-pong kernels' cluster sizes in the
# engine, where fewer L2 bytes a product may matter more than alone: 0.6B
# warm TTFT, default (QKV 2, GLU 4) / GLU 2 / QKV 4, four rounds.
#   bash scripts/gpu_snap.sh s22d vllm
#   run carry [".gpu-snap-s22d"] "cd .gpu-snap-s22d && OUT=$OUT bash scripts/gpu_s22d.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s22d
gpu_bin
gpu_models
gpu_model_wait 6
gpu_pf vllm $M6 $L/warm.log
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.sw_power_cap,clocks_event_reasons.hw_slowdown,clocks_event_reasons.hw_power_brake_slowdown,clocks_event_reasons.sw_thermal_slowdown,temperature.gpu \
    --format=csv,noheader -lms 5 >$L/smi.csv 2>$L/smi.err &
smi=$!
sleep 0.3
gpu_pf vllm $M6 $L/traced.log
sleep 0.2
kill $smi 2>/dev/null
wait $smi 2>/dev/null
echo "traced prefill: median TTFT $(gpu_med $L/traced.log) ms; nvidia-smi samples (sm MHz, W, sw power cap, hw slowdown, power brake, sw thermal, C):"
awk -F', ' '{print $2, $3, $4, $5, $6, $7, $8}' $L/smi.csv | sort | uniq -c | sort -rn | head -20
for r in 1 2 3 4; do
    gpu_pf vllm $M6 $L/pf_d_$r.log
    VLLM_CUDA_GEMM_GLU_CL=2 gpu_pf vllm $M6 $L/pf_g2_$r.log
    VLLM_CUDA_QKV_CL=4 gpu_pf vllm $M6 $L/pf_q4_$r.log
    echo "round $r: default $(gpu_med $L/pf_d_$r.log) / GLU clusters of 2 $(gpu_med $L/pf_g2_$r.log) / QKV clusters of 4 $(gpu_med $L/pf_q4_$r.log) ms"
done
say done
