#!/usr/bin/env bash
# gpu_s14b.sh — prepared in session 13: issue 6's scorecard on prebuilt
# binaries (nvidia-h200, ~7 min; the bf16 rows last ran in session 10):
#   bash scripts/gpu_snap.sh b vllm test_engine_async_64 quantize
#   run: carry [".gpu-snap-b"], "cd .gpu-snap-b && OUT=$OUT bash scripts/gpu_s14b.sh"
#   1. scripts/gpu_bench.sh with VLLM_BENCH_PREBUILT=1 (8B and 0.6B bf16:
#      decode and prefill vs the same-run ceilings, concurrency 1 / 16 / 64
#      / 256, HF side by side, the HF oracle, async == sync) into $OUT/bench;
#   2. the 8B Q4_K_M GGUF row (made during step 1): batch-1 greedy decode
#      (512 + 256) as a fraction of its roofline (4.617 GB a step / step 1's
#      d2d rate), `vllm bench` 1024-in / 128-out at c = 1 and 16.
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s14b
G=$L/rand-llama-8b
( $PY tools/make_random_gguf.py --shape llama-8b --qtype f16 --out $G-f16.gguf >$L/make_gguf.log 2>&1
  echo "exit $?" >>$L/make_gguf.log ) &
gpu_bin
mkdir -p "$FINAL/bench"
say "scorecard (gpu_bench.sh, prebuilt)"
VLLM_BENCH_PREBUILT=1 VLLM_BENCH_BUILD=bin OUT=$FINAL/bench timeout 480 bash scripts/gpu_bench.sh 2>&1 | tail -60
say "gguf 8B Q4_K_M"
while ! grep -q exit $L/make_gguf.log 2>/dev/null; do sleep 1; done; tail -1 $L/make_gguf.log
./bin/quantize $G-f16.gguf $G-q4_K_M.gguf q4_K_M --threads "$(nproc)" >$L/quant.log 2>&1 || { tail -3 $L/quant.log; exit 1; }
rm -f $G-f16.gguf
M=$G-q4_K_M.gguf
V=$($PY -c "import gguf; r = gguf.GGUFReader('$M'); print(len(r.fields['tokenizer.ggml.tokens'].data))")
ids=$($PY -c "import random; random.seed(0); print(','.join(str(random.randrange($V // 100, $V)) for _ in range(512)))")
./bin/vllm run --device cuda --model $M --prompt-ids "$ids" --max-tokens 256 --ignore-eos --temperature 0 \
    >/dev/null 2>$L/run.err
dec=$(rate decode <$L/run.err)
bytes=$($PY scripts/gguf_step_bytes.py $M)
d2d=$($PY -c "import json; print(json.load(open('$FINAL/bench/roof_llama-8b.json'))['d2d_GBps'])" 2>/dev/null)
$PY -c "d, b, c = float('${dec:-0}'), $bytes, float('${d2d:-0}' or 0); r = c * 1e9 / b if c else 0
print(f'8B Q4_K_M batch-1 decode {d:.1f} tok/s; {b / 1e9:.3f} GB/step; d2d {c:.0f} GB/s (same run) -> roofline {r:.1f} tok/s; fraction {d / r if r else 0:.3f}')"
for c in 1 16; do
    ./bin/vllm bench --device cuda --model $M --num-prompts $((c * 2)) --input-len 1024 --output-len 128 \
        --concurrency $c --max-num-seqs $c --max-num-batched-tokens 16384 >$L/b_c$c.log 2>&1
    echo "8B Q4_K_M bench conc $c: $(tp $L/b_c$c.log)"
done
say done
