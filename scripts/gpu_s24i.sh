#!/usr/bin/env bash
# gpu_s24i.sh — session 24, call 9 (nvidia-h200, ~2 min): the new CLI
# defaults on the device: `vllm bench` and `vllm serve` with no --device
# and no scheduling flag (expect cuda and async scheduling, logged),
# against --no-async-scheduling; concurrency 64 on the 0.6B.
#   bash scripts/gpu_snap.sh s24i vllm
#   run carry [".gpu-snap-s24i"] "cd .gpu-snap-s24i && OUT=$OUT bash scripts/gpu_s24i.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s24i
gpu_bin
( [ -f $M6/config.json ] || $PY scripts/gpu_hf.py make --shape qwen3-0.6b --out $M6; echo "exit $?" ) >$L/make6.log 2>&1
tail -1 $L/make6.log
for mode in default no; do
    timeout 150 ./bin/vllm bench --model $M6 --num-prompts 128 --input-len 1024 --output-len 128 --concurrency 64 \
        --max-num-seqs 64 --max-num-batched-tokens 8192 $([ $mode = no ] && echo --no-async-scheduling) >$L/b_$mode.log 2>&1
    echo "bench $mode: $(grep -E 'device:|async scheduling:' $L/b_$mode.log | tr '\n' ' ') $(grep -E 'Output token throughput|Mean TTFT|Mean TPOT' $L/b_$mode.log | tr -s ' ' | tr '\n' ';')"
done
./bin/vllm serve --model $M6 --port 8765 >$L/serve.log 2>&1 &
pid=$!
for i in $(seq 120); do curl -sf http://127.0.0.1:8765/health >/dev/null 2>&1 && break; sleep 0.5; done
curl -s http://127.0.0.1:8765/v1/completions -H 'Content-Type: application/json' \
    -d '{"model": "'$M6'", "prompt": [1000, 2000, 3000], "max_tokens": 8, "temperature": 0}' | head -c 300; echo
timeout 100 ./bin/vllm bench serve --base-url http://127.0.0.1:8765 --num-prompts 128 --random-input-len 1024 \
    --random-output-len 128 --max-concurrency 64 --vocab-size 151000 >$L/bs.log 2>&1
echo "serve default: $(grep -E 'Successful|Output token throughput|Mean TTFT|Mean TPOT' $L/bs.log | tr -s ' ' | tr '\n' ';')"
kill -INT $pid; wait $pid
echo "serve exit $?: $(grep -E 'device:|async scheduling:' $L/serve.log | tr '\n' ' ')"
say done
