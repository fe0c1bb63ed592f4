#!/usr/bin/env bash
# gpu_s15d.sh — session 15, call 4 (nvidia-h200, ~2 min): why the lab's
# consumers are slow (call 3: k_mk_chain2 streams the 8B chain at 0.55 of
# d2d with its arithmetic, 0.92 without): ncu --set full of the 8B chain's
# kernel (mode 32, 16 KB stages; the 12th launch of test_mk_speed's chain
# part: 1 + 10 of the 0.6B chain first), details and the raw stall
# metrics; and the 8B chain under mode 33 again (call 3: its launch
# failed; the message now printed).
#   bash scripts/gpu_snap.sh d test_cuda_mk
#   run carry [".gpu-snap-d"] "cd .gpu-snap-d && OUT=$OUT bash scripts/gpu_s15d.sh"
# (k_mk_chain2, modes 32-37, was removed after call 9: slower than k_mk_chain
# at 64 KB stages; this file records the call's numbers.)
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s15d
gpu_bin
say "mode 33 (no arithmetic) at 16 KB"
gpu_test speed_33 60 VLLM_MK_MODE=33 VLLM_MK_SB=16384 VLLM_MK_SPEED=chain VLLM_TEST_ONLY=test_mk_speed ./test_cuda_mk
grep -E "speed: mk|ERROR|mk run|mk plan" $L/speed_33.log | cut -c1-220
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
say "ncu --set full: k_mk_chain2, 8B chain, mode 32, 16 KB"
(cd bin && VLLM_MK_MODE=32 VLLM_MK_SB=16384 VLLM_MK_SPEED=chain VLLM_TEST_ONLY=test_mk_speed timeout 240 $NCU \
    -k regex:k_mk_chain2 --launch-skip 11 --launch-count 1 --set full --import-source no -o $L/mk32 -f ./test_cuda_mk) \
    >$L/ncu_run.txt 2>&1
echo "ncu exit $?"
$NCU --import $L/mk32.ncu-rep --page details >$L/ncu_details.txt 2>&1
$NCU --import $L/mk32.ncu-rep --page raw >$L/ncu_raw.txt 2>&1
grep -E "Duration|DRAM Throughput|L1/TEX Cache|L2 Cache Throughput|Compute \(SM\)|Executed Ipc|Issued Warp|Eligible|Active Warps Per|Mem Busy|Max Bandwidth|Bank|bank|Registers|Warp Cycles Per" \
    $L/ncu_details.txt | cut -c1-160 | head -40
grep -E "smsp__average_warp(s_issue_stalled|_latency_issue_stalled)_[a-z_]*_per_issue_active.ratio|smsp__pcsamp_warps_issue_stalled_[a-z_]+ " $L/ncu_raw.txt \
    | awk '{print $1, $NF}' | sort -k2 -g -r | head -24
grep -E "l1tex__data_bank_conflicts_pipe_lsu_mem_shared|l1tex__data_pipe_lsu_wavefronts_mem_shared |smsp__inst_executed.sum |sm__cycles_elapsed.avg |smsp__inst_executed_op_shared" $L/ncu_raw.txt | awk '{print $1, $(NF-1), $NF}' | head
say done
