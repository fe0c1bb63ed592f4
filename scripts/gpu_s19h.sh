#!/usr/bin/env bash
# gpu_s19h.sh — session 19, call 8 (nvidia-h200, ~5 min): sliding windows
# in the wgmma prefill kernels (k_flash_wg, k_flash_fa3: the first key tile
# of a segment from its first row's window, keys before a row's first
# masked). Before, any window > 0 sent the call to the mma.sync kernel,
# also where the prompt is shorter than the window (Mistral-7B-v0.1's
# config: sliding_window 4096).
#   1. test_cuda_flash (every case vs the CPU on every variant; the fa3
#      launch check now covers the window cases; two new hd-128 window
#      cases), memcheck of test_flash_window_softcap;
#   2. warm TTFT, bin/vllm (this build) vs bin/vllm_old (main before it,
#      session 19's call-6 binary), alternated: the 0.6B and 8B without a
#      window at 2048 tokens (no change expected), the 8B with
#      sliding_window 4096 at 2048 tokens and with 1024 at 4096 tokens;
#      greedy ids old vs new on the 8B with window 1024 (2048 + 32).
#   bash scripts/gpu_snap.sh s19h vllm test_cuda_flash, then
#   tar xJf .gpu-snap-s19f/bin.txz -C /tmp/s19f ./vllm && cp /tmp/s19f/vllm .gpu-snap-s19h/vllm_old
#   run carry [".gpu-snap-s19h"], "cd .gpu-snap-s19h && OUT=$OUT bash scripts/gpu_s19h.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s19h
gpu_bin
cp vllm_old bin/vllm_old
gpu_models
gpu_test fl 400 ./test_cuda_flash
grep -E "win=[1-9].*(wg|fa3)|Failure|did not run" $L/fl.log | head -24
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
(cd bin && VLLM_TEST_ONLY=test_flash_window_softcap VLLM_CUDA_SPEED=0 timeout 150 $SAN --tool memcheck ./test_cuda_flash) >$L/mc.log 2>&1
echo "memcheck exit $? $(grep -E 'ERROR SUMMARY|PASSED|FAILED' $L/mc.log | tr '\n' ' ')"
gpu_model_wait 6
gpu_model_wait 8
for w in 4096 1024; do # windowed copies of the 8B: the same weights, sliding_window in config.json
    d=/tmp/rand-llama-8b-w$w
    mkdir -p $d && for f in $M8/*; do [ "$(basename $f)" = config.json ] || ln -sf $f $d/; done
    $PY -c "import json; c = json.load(open('$M8/config.json')); c['sliding_window'] = $w; json.dump(c, open('$d/config.json', 'w'))"
done
say "TTFT new / old, no window"
for mdl in 6 8; do
    eval M=\$M$mdl
    for r in 1 2; do
        gpu_pf vllm $M $L/pf${mdl}_n_$r.log
        gpu_pf vllm_old $M $L/pf${mdl}_o_$r.log
        echo "model $mdl round $r: $(gpu_med $L/pf${mdl}_n_$r.log) / $(gpu_med $L/pf${mdl}_o_$r.log) ms"
    done
done
say "TTFT new / old, 8B with a window"
for cfg in 4096:2048 1024:4096; do
    w=${cfg%:*} len=${cfg#*:}
    for r in 1 2; do
        gpu_pf vllm /tmp/rand-llama-8b-w$w $L/pfw${w}_n_$r.log --input-len $len
        gpu_pf vllm_old /tmp/rand-llama-8b-w$w $L/pfw${w}_o_$r.log --input-len $len
        echo "window $w, $len tokens, round $r: $(gpu_med $L/pfw${w}_n_$r.log) / $(gpu_med $L/pfw${w}_o_$r.log) ms"
    done
done
gpu_greedy vllm /tmp/rand-llama-8b-w1024 $L/idsw_n.txt
gpu_greedy vllm_old /tmp/rand-llama-8b-w1024 $L/idsw_o.txt
cmp -s $L/idsw_n.txt $L/idsw_o.txt && echo "8B window 1024: greedy ids new == old ($(wc -w <$L/idsw_n.txt) words)" || { echo "8B window 1024: greedy ids differ"; head -c 300 $L/idsw_n.txt; echo; head -c 300 $L/idsw_o.txt; echo; }
say done
