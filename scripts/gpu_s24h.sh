#!/usr/bin/env bash
# gpu_s24h.sh — session 24, call 8 (nvidia-h200, ~5 min): serving side by
# side, `vllm serve` against llama.cpp's `llama-server` (the same vendored
# llama.cpp as gpu_s24c.sh: bench/build_llama_cpp_cuda.sh with the
# llama-server target, carried as llama-server.xz) on the same GGUF files
# (random Llama-3.2-1B shape, bf16 and Q4_0, made here), both driven by
# our `vllm bench serve` (random 1024-token id prompts, 128 streamed
# tokens, --vocab-size 32000: llama-server has no /detokenize probing of
# ours) at concurrency 1 / 16 / 64. Ours: --max-num-seqs 64
# --max-num-batched-tokens 8192, sync and --async-scheduling; llama.cpp:
# 64 slots (-np 64) of 1,280 tokens (-c 81920), flash attention, all layers
# on the GPU, its default batch sizes.
#   bash scripts/gpu_snap.sh s24h vllm
#   cp /tmp/lcpp/llama-server.xz .gpu-snap-s24h/
#   run carry [".gpu-snap-s24h"] "cd .gpu-snap-s24h && OUT=$OUT bash scripts/gpu_s24h.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s24h
gpu_bin
xz -dc llama-server.xz >bin/llama-server && chmod +x bin/llama-server
for q in bf16 q4_0; do
    [ -f /tmp/rand-llama-1b-$q.gguf ] || $PY tools/make_random_gguf.py --shape llama-1b --qtype $q \
        --out /tmp/rand-llama-1b-$q.gguf >$L/make_$q.log 2>&1
done
up() { # wait for /health on port $1 (pid $2)
    local i
    for i in $(seq 240); do curl -sf http://127.0.0.1:$1/health >/dev/null 2>&1 && return 0; kill -0 $2 2>/dev/null || return 1; sleep 0.5; done
    return 1
}
benches() { # TAG PORT
    local c n
    for c in 1 16 64; do
        n=$((c < 8 ? 8 : 2 * c))
        timeout 200 ./bin/vllm bench serve --base-url http://127.0.0.1:$2 --num-prompts $n --random-input-len 1024 \
            --random-output-len 128 --max-concurrency $c --seed 0 --vocab-size 32000 >$L/bs_$1_$c.log 2>&1
        echo "$1 c $c: $(grep -E 'Successful|Output token throughput|Mean TTFT|P99 TTFT|Mean TPOT' $L/bs_$1_$c.log | tr -s ' ' | tr '\n' ';')"
        grep -m2 "HTTP" $L/bs_$1_$c.log
    done
}
for q in bf16 q4_0; do
    M=/tmp/rand-llama-1b-$q.gguf
    for mode in sync async; do
        say "ours $q $mode"
        ./bin/vllm serve --device cuda --model $M --port 8765 --max-num-seqs 64 --max-num-batched-tokens 8192 \
            --max-model-len 2048 $([ $mode = async ] && echo --async-scheduling || echo --no-async-scheduling) >$L/serve_${q}_$mode.log 2>&1 &
        pid=$!
        if up 8765 $pid; then benches ours_${q}_$mode 8765; else echo "ours $q $mode: not up"; tail -3 $L/serve_${q}_$mode.log; fi
        kill -INT $pid; wait $pid
    done
    say "llama-server $q"
    ./bin/llama-server -m $M --port 8766 -ngl 99 -fa on -np 64 -c 81920 >$L/lserve_$q.log 2>&1 &
    pid=$!
    if up 8766 $pid; then benches llama_$q 8766; else echo "llama-server $q: not up"; tail -5 $L/lserve_$q.log; fi
    kill -INT $pid; wait $pid
done
say done
