#!/usr/bin/env bash
# gpu_sample.sh — on the H200 machine, device sampling (issue 6) in one call:
#   - test_cuda_sample (SAMPLE on CUDA vs the CPU op, distribution, speed:
#     its speed lines time T 1, greedy, top_k + top_p, and top_p alone on
#     flat rows (the whole-row fallback) and on peaked rows (the top_p
#     candidate cut));
#   - `vllm bench --device cuda` on the random Qwen3-0.6B-shaped bf16
#     checkpoint of gpu_e2e.sh (made here, in the background while the rest
#     runs), temperature 1 (bench's default), host sampling
#     (VLLM_DEVICE_SAMPLING=0, the old path) vs device sampling (default),
#     64 x (256 in, 64 out) at 64 sequences and 256 x (256 in, 64 out) at 256;
#   - the engine gates on the GPU (VLLM_TEST_DEVICE=cuda): device == host
#     sampling, async == sync, batch invariance and seeds.
# Logs into $OUT. VLLM_PREBUILT=DIR takes the binaries from DIR (built with
# -DVLLM_CUDA=ON elsewhere, same CUDA major) instead of building here.
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
t0=$(date +%s)
say() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
source scripts/gpu_deps.sh || exit 1
M=/tmp/qwen3-0.6b-rand
python3 - <<'PY' >"$OUT/make_model.log" 2>&1 &
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM
torch.manual_seed(0)
c = Qwen3Config(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                head_dim=128, intermediate_size=3072, vocab_size=151936, tie_word_embeddings=True,
                max_position_embeddings=4096, rope_theta=1e6)
with torch.device("cuda"):
    m = Qwen3ForCausalLM(c).to(torch.bfloat16)
m.save_pretrained("/tmp/qwen3-0.6b-rand", safe_serialization=True)
print("saved")
PY
MPID=$!
B=${VLLM_PREBUILT:-}
if [ -z "$B" ] || ! "$B/vllm" --help >/dev/null 2>&1; then
    [ -n "$B" ] && echo "prebuilt binaries do not run here: building"
    B=build-gpu
    say "build"
    cmake -S . -B $B -DVLLM_CUDA=ON -DCMAKE_BUILD_TYPE=Release >"$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
    cmake --build $B -j"$(nproc)" --target test_cuda_sample vllm test_engine_devsample test_engine_async test_engine \
        >"$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head -30; exit 1; }
fi
say "test_cuda_sample"
(cd $B && timeout 100 ./test_cuda_sample) >"$OUT/test_cuda_sample.log" 2>&1
echo "test_cuda_sample exit $?"
grep -E "differ|nucleus|distribution|speed|FAILED|ERROR|OK \]" "$OUT/test_cuda_sample.log" | head -60
wait $MPID || { tail -5 "$OUT/make_model.log"; exit 1; }
say "vllm bench: host (VLLM_DEVICE_SAMPLING=0) vs device sampling"
bench() { # tag ds num seqs
    VLLM_DEVICE_SAMPLING=$2 $B/vllm bench --device cuda --model $M --num-prompts $3 --input-len 256 --output-len 64 \
        --max-num-seqs $4 --max-num-batched-tokens 8192 --gpu-memory-utilization 0.9 >"$OUT/bench_$1.log" 2>&1
    echo "$1 (VLLM_DEVICE_SAMPLING=$2, $3 prompts, $4 seqs): exit $? $(grep -E 'Request throughput|Output token thr|Mean TTFT|Mean TPOT' "$OUT/bench_$1.log" | awk -F: '{printf "%s:%s; ", $1, $2}' | tr -s ' ')"
}
bench host64 0 64 64
bench dev64 1 64 64
bench host256 0 256 256
bench dev256 1 256 256
say "engine gates on the GPU"
for t in test_engine_devsample test_engine_async test_engine; do
    (cd $B && VLLM_TEST_DEVICE=cuda timeout 40 ./$t) >"$OUT/$t.log" 2>&1
    echo "$t on cuda: exit $? $(grep -cE '^\[       OK \]' "$OUT/$t.log") ok, $(grep -cE '^\[  FAILED  \] test' "$OUT/$t.log") failed"
    grep -E "^\[  (FAILED|ERROR|SKIPPED) |error:|ERROR" "$OUT/$t.log" | head -5
done
say "done"
