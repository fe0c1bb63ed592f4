#!/usr/bin/env bash
# gpu_s19j.sh — session 19, call 10 (nvidia-h200, ~3 min): head_dim 256 on
# the mma.sync flash kernel (before: the SIMT prefill kernel).
#   1. test_cuda_flash (the hd-256 cases of test_flash_fallbacks: soft-cap,
#      a window, G 1-8, f16, bf16 q / out, 2048 tokens, chunks; the speed
#      of both paths at 2048 tokens, 8/4 heads), memcheck of
#      test_flash_fallbacks;
#   2. a random Qwen3-family checkpoint with 8/4 heads of 256 (gpu_hf.py
#      make --shape qwen3-hd256): greedy 2048 + 64 by this build (hd-256
#      flash in the prefill) and by main before it (bin/vllm_old: SIMT),
#      each through the HF oracle (gpu_hf.py hf), and warm TTFT both.
#   bash scripts/gpu_snap.sh s19j vllm test_cuda_flash; cp .gpu-snap-s19h/vllm_old .gpu-snap-s19j/
#   run carry [".gpu-snap-s19j"], "cd .gpu-snap-s19j && OUT=$OUT bash scripts/gpu_s19j.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s19j
gpu_bin
cp vllm_old bin/vllm_old
MG=/tmp/rand-qwen3-hd256
( [ -f $MG/config.json ] || $PY scripts/gpu_hf.py make --shape qwen3-hd256 --out $MG >$L/makeg.log 2>&1; echo "exit $?" >>$L/makeg.log ) &
(cd bin && VLLM_TEST_FILTER=test_flash_fallbacks timeout 200 ./test_cuda_flash) >$L/fl.log 2>&1
echo "test_flash_fallbacks exit $? $(grep -E 'PASSED|FAILED' $L/fl.log | head -2 | tr '\n' ' ')"
grep -E "hd=256|Failure" $L/fl.log | grep -E "tile 64|Failure" | head -12
(cd bin && VLLM_TEST_FILTER=test_flash_speed_hd256 timeout 100 ./test_cuda_flash) >$L/sp.log 2>&1
grep -E "speed" $L/sp.log
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
(cd bin && VLLM_TEST_FILTER=test_flash_fallbacks VLLM_TEST_FLASH_ONLY=64 timeout 200 $SAN --tool memcheck ./test_cuda_flash) >$L/mc.log 2>&1
echo "memcheck exit $? $(grep -E 'ERROR SUMMARY|PASSED|FAILED' $L/mc.log | tr '\n' ' ')"
while ! grep -q exit $L/makeg.log 2>/dev/null; do sleep 1; done; tail -2 $L/makeg.log
$PY -c "import json, random; random.seed(5); V = json.load(open('$MG/config.json'))['vocab_size'];
print(' '.join(str(random.randrange(V // 100, min(V, 100000))) for _ in range(2048)))" >$L/p2048.ids
for b in vllm vllm_old; do
    timeout 120 ./bin/$b run --device cuda --model $MG --prompt-ids "$(tr ' ' ',' <$L/p2048.ids)" --max-tokens 64 \
        --ignore-eos --temperature 0 --print-ids >$L/ours_$b.ids 2>$L/ours_$b.err
    echo "$b run exit $?: $(wc -w <$L/ours_$b.ids) ids"
    timeout 200 $PY scripts/gpu_hf.py hf --model $MG --prompt-ids $L/p2048.ids --ours $L/ours_$b.ids --max-tokens 64 \
        >$L/hf_$b.json 2>$L/hf_$b.err
    echo "gpu_hf.py hf ($b) exit $?: $(cat $L/hf_$b.json)"
    tail -3 $L/hf_$b.err | grep -iE "error|Traceback" || true
done
for r in 1 2; do
    gpu_pf vllm $MG $L/pfg_n_$r.log
    gpu_pf vllm_old $MG $L/pfg_o_$r.log
    echo "TTFT 2048 round $r: new $(gpu_med $L/pfg_n_$r.log) / old $(gpu_med $L/pfg_o_$r.log) ms"
done
say done
