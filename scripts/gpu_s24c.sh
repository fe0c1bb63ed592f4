#!/usr/bin/env bash
# gpu_s24c.sh — session 24, call 3 (nvidia-h200, ~8 min): (1) the warm-up's
# budget forward in several sequences (engine_warm.c) on the device:
# test_engine_warmup, concurrency 64 traced (its first 8,192-token step
# should queue like the later ones) and 2 rounds; (2) vllm.c vs llama.cpp
# (CUDA) side by side on the same GGUF files: random Llama-3.1-8B-shaped
# bf16 and Q4_K_M (our quantize) and a Llama-3.2-1B-shaped Q4_0
# (tools/make_random_gguf.py), batch-1 decode of 256 tokens after a
# 512-token prompt and a 2048-token prefill, interleaved (round 1 here,
# round 2 in gpu_s24d.sh on the same warm machine); (3)
# `vllm serve` (never run on the GPU before; no --device: the new auto
# default should pick cuda) under `vllm bench
# serve` (0.6B with the real Qwen3 tokenizer of shared/, carried as tok/),
# concurrency 1 / 64 / 256, sync and async scheduling, against the offline
# `vllm bench` at 64; a streamed chat completion with curl; the server log
# checked for errors.
# llama.cpp: llama-bench of llama-cpp-python 0.3.36's vendored llama.cpp,
# built on the development machine (sm_90, static, GGML_CUDA_GRAPHS on:
# bench/build_llama_cpp_cuda.sh) and carried as llama-bench.xz.
#   bash bench/build_llama_cpp_cuda.sh   (then copy its llama-bench.xz into the snapshot)
#   bash scripts/gpu_snap.sh s24c vllm quantize test_engine_warmup
#   cp /tmp/lcpp/llama-bench.xz .gpu-snap-s24c/
#   mkdir -p .gpu-snap-s24c/tok && cp ../shared/tokenizers/qwen3/*.xz .gpu-snap-s24c/tok/
#   run carry [".gpu-snap-s24c"] "cd .gpu-snap-s24c && OUT=$OUT bash scripts/gpu_s24c.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s24c
G=/tmp/rand-llama-8b-gguf
( [ -f /tmp/rand-llama-1b-q4_0.gguf ] || $PY tools/make_random_gguf.py --shape llama-1b --qtype q4_0 \
      --out /tmp/rand-llama-1b-q4_0.gguf
  [ -f $G-bf16.gguf ] || $PY tools/make_random_gguf.py --shape llama-8b --qtype bf16 --out $G-bf16.gguf
  echo "exit $?" ) >$L/make_gguf.log 2>&1 &
gpu_bin
( [ -f $M6/config.json ] || $PY scripts/gpu_hf.py make --shape qwen3-0.6b --out $M6; echo "exit $?" ) >$L/make6.log 2>&1 &
gpu_fixtures
xz -dc llama-bench.xz >bin/llama-bench && chmod +x bin/llama-bench
./bin/llama-bench --help >/dev/null 2>&1 || echo "llama-bench does not start: $(./bin/llama-bench --help 2>&1 | head -3)"
D2D=$(gpu_d2d)
echo "d2d $D2D GB/s"

if [ "${PART:-1}" = 1 ]; then
say "warm-up"
gpu_model_wait 6
gpu_test warm 120 VLLM_TEST_DEVICE=cuda VLLM_TEST_ASYNC_MODEL=$M6 ./test_engine_warmup
echo "c64 traced: $(VLLM_STEP_TRACE=1 gpu_c64 $FINAL/c64_trace.log)"
grep -E "warm-up" $FINAL/c64_trace.log
grep -E "^step trace: 8192" $FINAL/c64_trace.log | head -3 | cut -c1-200
$PY tools/step_trace.py $FINAL/c64_trace.log --list 8 | tail -10
for r in 1 2; do echo "c64 round $r: $(gpu_c64 $L/c64_$r.log)"; done

say "serve"
M6T=/tmp/rand-qwen3-0.6b-tok
mkdir -p $M6T && for f in $M6/*; do ln -sfn $f $M6T/; done
for f in tok/*.xz; do xz -dc $f >$M6T/$(basename $f .xz); done
serve_run() { # serve_run TAG [serve flags]: start, wait for /health, bench at 1 / 64 / 256, stop
    local tag=$1 pid i
    shift
    ./bin/vllm serve --model $M6T --port 8765 --max-num-seqs 256 --max-num-batched-tokens 8192 \
        --max-model-len 2048 "$@" >$L/serve_$tag.log 2>&1 &
    pid=$!
    for i in $(seq 120); do curl -sf http://127.0.0.1:8765/health >/dev/null 2>&1 && break; sleep 0.5; done
    curl -sf http://127.0.0.1:8765/health >/dev/null || { echo "serve $tag: not up"; tail -5 $L/serve_$tag.log; kill $pid; return; }
    for c in 1 64 256; do
        n=$((c < 8 ? 8 : 2 * c))
        timeout 200 ./bin/vllm bench serve --base-url http://127.0.0.1:8765 --num-prompts $n --random-input-len 1024 \
            --random-output-len 128 --max-concurrency $c --seed 0 >$L/bs_${tag}_$c.log 2>&1
        echo "serve $tag c $c: $(grep -E 'Successful|Output token throughput|Mean TTFT|P99 TTFT|Mean TPOT' $L/bs_${tag}_$c.log | tr -s ' ' | tr '\n' ';')"
    done
    curl -sN http://127.0.0.1:8765/v1/chat/completions -H 'Content-Type: application/json' \
        -d '{"model": "'$M6T'", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 16, "stream": true}' \
        >$L/chat_$tag.txt 2>&1
    echo "chat stream $tag: $(grep -c '^data: ' $L/chat_$tag.txt) events, last: $(tail -c 80 $L/chat_$tag.txt | tr '\n' ' ')"
    kill -INT $pid; wait $pid
    echo "serve $tag exit $?; log: $(grep -ciE 'error|abort|fail' $L/serve_$tag.log) error lines; $(grep -E 'device:|warm-up' $L/serve_$tag.log | head -3 | tr '\n' ' ')"
    grep -iE 'error|abort|fail' $L/serve_$tag.log | head -3
}
serve_run sync --no-async-scheduling  # (sync was the default when this ran; the flag since)
serve_run async --async-scheduling
echo "offline c64 (same model): $(gpu_c64 $L/c64_off.log)"

fi

say "gguf files"
while ! grep -q exit $L/make_gguf.log 2>/dev/null; do sleep 1; done; tail -1 $L/make_gguf.log
[ -f $G-q4_K_M.gguf ] || ./bin/quantize $G-bf16.gguf $G-q4_K_M.gguf q4_K_M --threads "$(nproc)" >$L/quant.log 2>&1 ||
    tail -3 $L/quant.log
ls -la $G-bf16.gguf $G-q4_K_M.gguf /tmp/rand-llama-1b-q4_0.gguf

# ours: decode of 256 tokens after a 512-token prompt (vllm run, greedy),
# 2048-token prefill (gpu_pf: median TTFT of 8 one at a time)
ours() {
    local m=$1 tag=$2 V ids dec ttft
    V=$($PY -c "import gguf; r = gguf.GGUFReader('$m'); print(len(r.fields['tokenizer.ggml.tokens'].data))")
    ids=$($PY -c "import random; random.seed(0); print(','.join(str(random.randrange($V // 100, $V)) for _ in range(512)))")
    timeout 120 ./bin/vllm run --device cuda --model $m --prompt-ids "$ids" --max-tokens 256 --ignore-eos \
        --temperature 0 >/dev/null 2>$L/run_$tag.err
    dec=$(rate decode <$L/run_$tag.err)
    gpu_pf vllm $m $L/pf_$tag.log
    ttft=$(gpu_med $L/pf_$tag.log)
    $PY -c "t = float('${ttft:-0}' or 0); print(f'ours  $tag: decode ${dec:-?} tok/s; 2048 prefill TTFT {t} ms = {2048e3 / t if t else 0:.0f} tok/s')"
}
# llama.cpp: llama-bench, all layers on the GPU, flash attention on; tg256
# at depth 512 (decode after a 512-token context), pp2048 at the default
# micro-batch (512) and at 2048
theirs() {
    local m=$1 tag=$2
    timeout 200 ./bin/llama-bench -m $m -ngl 99 -fa 1 -p 0 -n 256 -d 512 -r 3 -o json >$L/lb_tg_$tag.json 2>$L/lb_tg_$tag.err
    timeout 200 ./bin/llama-bench -m $m -ngl 99 -fa 1 -p 2048 -n 0 -ub 512,2048 -b 2048 -r 3 -o json \
        >$L/lb_pp_$tag.json 2>$L/lb_pp_$tag.err
    $PY - $L/lb_tg_$tag.json $L/lb_pp_$tag.json "$tag" <<'EOF'
import json, sys
out = []
for f in sys.argv[1:3]:
    try:
        for r in json.load(open(f)):
            kind = f"tg{r['n_gen']}@d{r.get('n_depth', 0)}" if r["n_gen"] else f"pp{r['n_prompt']} ub{r['n_ubatch']}"
            out.append(f"{kind} {r['avg_ts']:.1f} tok/s (+-{r['stddev_ts']:.1f})")
    except Exception as e:
        out.append(f"{f}: {e}")
print(f"llama {sys.argv[3]}: " + "; ".join(out))
EOF
}
for r in ${ROUNDS:-1}; do
    say "round $r"
    ours $G-bf16.gguf 8b_bf16_$r
    theirs $G-bf16.gguf 8b_bf16_$r
    ours $G-q4_K_M.gguf 8b_q4km_$r
    theirs $G-q4_K_M.gguf 8b_q4km_$r
    ours /tmp/rand-llama-1b-q4_0.gguf 1b_q40_$r
    theirs /tmp/rand-llama-1b-q4_0.gguf 1b_q40_$r
done
grep -h -E "CUDA|device|build" $L/lb_tg_8b_bf16_1.err | head -5
for m in $G-bf16.gguf $G-q4_K_M.gguf /tmp/rand-llama-1b-q4_0.gguf; do
    echo "$(basename $m): $($PY scripts/gguf_step_bytes.py $m) bytes a decode step"
done
say done
