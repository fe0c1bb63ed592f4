#!/usr/bin/env bash
# gpu_s12a.sh — prepared in session 11 for session 12's first device call
# (nvidia-h200, ~7 min): issue 6's scorecard on the session's main, and a
# GGUF row measured in the same run.
#   1. `scripts/gpu_bench.sh` (8B and 0.6B bf16: decode and prefill vs the
#      same-run ceilings, concurrency 1 / 16 / 64 / 256, HF side by side,
#      the HF oracle, async == sync); its files in $OUT/bench/;
#   2. a random Llama-3.1-8B-shaped GGUF (tools/make_random_gguf.py
#      --shape llama-8b f16, made during step 1; our quantize to Q4_K_M):
#      `vllm run` batch-1 greedy decode (512-token prompt + 256) as a
#      fraction of its roofline = bytes one step reads
#      (scripts/gguf_step_bytes.py) / the d2d copy rate of step 1's roof
#      (same run); `vllm bench` 1024-in / 128-out at c = 1, 16.
#   OUT=$OUT bash scripts/gpu_s12a.sh
# Local dry run of step 2 (CPU, tiny GGUF, no scorecard):
#   VLLM_S12A_DEVICE=cpu VLLM_S12A_SHAPE=tiny VLLM_S12A_BENCH=0 VLLM_S12A_BUILD=build VLLM_S12A_INLEN=512 \
#       bash scripts/gpu_s12a.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s12a
DEV=${VLLM_S12A_DEVICE:-cuda} SHAPE=${VLLM_S12A_SHAPE:-llama-8b} B=${VLLM_S12A_BUILD:-build-gpu}
G=$L/rand-$SHAPE
( $PY tools/make_random_gguf.py --shape $SHAPE --qtype f16 --out $G-f16.gguf >$L/make_gguf.log 2>&1
  echo "exit $?" >>$L/make_gguf.log ) &
mkdir -p "$FINAL/bench"
if [ "${VLLM_S12A_BENCH:-1}" != 0 ]; then
    say "scorecard (gpu_bench.sh)"
    OUT=$FINAL/bench timeout 480 bash scripts/gpu_bench.sh 2>&1 | tail -60
fi
say "gguf $SHAPE Q4_K_M"
cmake --build $B -j"$(nproc)" --target vllm quantize >$L/build_q.log 2>&1 || { tail -5 $L/build_q.log; exit 1; }
while ! grep -q exit $L/make_gguf.log 2>/dev/null; do sleep 1; done; tail -1 $L/make_gguf.log
./$B/quantize $G-f16.gguf $G-q4_K_M.gguf q4_K_M --threads "$(nproc)" >$L/quant.log 2>&1 || { tail -3 $L/quant.log; exit 1; }
rm -f $G-f16.gguf
V=$($PY -c "import gguf; r = gguf.GGUFReader('$G-q4_K_M.gguf'); print(len(r.fields['tokenizer.ggml.tokens'].data))")
ids=$($PY -c "import random; random.seed(0); print(','.join(str(random.randrange($V // 100, $V)) for _ in range(512)))")
./$B/vllm run --device $DEV --model $G-q4_K_M.gguf --prompt-ids "$ids" --max-tokens 256 --ignore-eos \
    --temperature 0 >/dev/null 2>$L/run.err
dec=$(rate decode <$L/run.err)
bytes=$($PY scripts/gguf_step_bytes.py $G-q4_K_M.gguf)
d2d=$($PY -c "import json; print(json.load(open('$FINAL/bench/roof_llama-8b.json'))['d2d_GBps'])" 2>/dev/null)
$PY -c "d, b, c = float('${dec:-0}'), $bytes, float('${d2d:-0}' or 0); r = c * 1e9 / b if c else 0
print(f'$SHAPE Q4_K_M batch-1 decode {d:.1f} tok/s; {b / 1e9:.3f} GB/step; d2d {c:.0f} GB/s (same run) -> roofline {r:.1f} tok/s; fraction {d / r if r else 0:.3f}')"
for c in 1 16; do
    ./$B/vllm bench --device $DEV --model $G-q4_K_M.gguf --num-prompts $((c * 2)) --input-len ${VLLM_S12A_INLEN:-1024} --output-len 128 \
        --concurrency $c --max-num-seqs $c --max-num-batched-tokens 16384 >$L/b_c$c.log 2>&1
    echo "$SHAPE Q4_K_M bench conc $c: $(tp $L/b_c$c.log)"
done
say done
