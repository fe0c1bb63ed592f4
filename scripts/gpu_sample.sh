#!/usr/bin/env bash
# gpu_sample.sh — on the H200 machine, device sampling (issue 6) in one call:
#   - test_cuda_sample (SAMPLE on CUDA vs the CPU op under each kernel:
#     the cluster kernel, default, and the one-block-per-row kernel,
#     VLLM_CUDA_TOPP=0; distribution; speed: one line per batch, vocab and
#     setting with both kernels' times, block vs cluster, top_p alone on
#     flat and on peaked rows at B = 1, 16, 64, V = 128256 and 151936, and
#     B = 256 at 151936, where the cluster kernel runs one CTA a row and its
#     rows without top_p run k_sample's row code: "own" = without that
#     routing, VLLM_CUDA_TOPP_BLOCKROWS=0; the B = 256 lines again as
#     cluster / block ratios);
#   - `vllm bench --device cuda` on the random Qwen3-0.6B-shaped bf16
#     checkpoint of gpu_e2e.sh (made here, in the background while the rest
#     runs), temperature 1 (bench's default), host sampling
#     (VLLM_DEVICE_SAMPLING=0, the old path) vs device sampling (default),
#     64 x (256 in, 64 out) at 64 sequences and 256 x (256 in, 64 out) at 256;
#   - the engine gates on the GPU (VLLM_TEST_DEVICE=cuda): device == host
#     sampling, async == sync, batch invariance and seeds.
# GPU_SAMPLE_QUICK=1 instead: test_cuda_sample, then ncu's kernel times of
# its top_p speed lines (VLLM_CUDA_SPEED=topp: block, cluster in turn) and
# compute-sanitizer memcheck of the cluster kernel, auto size and 8 CTAs a row
# (VLLM_CUDA_CFG=02; small-vocab, top_k and top_p path tests); no model, no bench.
# Logs into $OUT. VLLM_PREBUILT=DIR takes the binaries from DIR (built with
# -DVLLM_CUDA=ON elsewhere, same CUDA major) instead of building here.
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
t0=$(date +%s)
say() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
source scripts/gpu_deps.sh || exit 1
QUICK=${GPU_SAMPLE_QUICK:-0}
M=/tmp/qwen3-0.6b-rand
MPID=
if [ "$QUICK" != 1 ]; then
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
fi
B=${VLLM_PREBUILT:-}
runs() { # the prebuilt binaries run here (no missing library)
    if [ "$QUICK" = 1 ]; then [ -x "$B/test_cuda_sample" ] && ! ldd "$B/test_cuda_sample" | grep -q "not found"
    else "$B/vllm" --help >/dev/null 2>&1; fi
}
if [ -z "$B" ] || ! runs; then
    [ -n "$B" ] && echo "prebuilt binaries do not run here: building"
    B=build-gpu
    say "build"
    T="test_cuda_sample vllm test_engine_devsample test_engine_async test_engine"
    [ "$QUICK" = 1 ] && T=test_cuda_sample
    cmake -S . -B $B -DVLLM_CUDA=ON -DCMAKE_BUILD_TYPE=Release >"$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
    cmake --build $B -j"$(nproc)" --target $T >"$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head -30; exit 1; }
fi
say "test_cuda_sample"
(cd $B && timeout ${SAMPLE_TIMEOUT:-150} ./test_cuda_sample) >"$OUT/test_cuda_sample.log" 2>&1
echo "test_cuda_sample exit $?"
grep -E "differ|nucleus|distribution|speed|FAILED|ERROR|OK \]|^\[ *(SKIPPED|PASSED)" "$OUT/test_cuda_sample.log" \
    | grep -vE ": 0 differ \(|: 0 rows differ" | head -80
echo "comparisons with no differing row (vs the CPU op, vs the block kernel): $(grep -cE ': 0 differ \(|: 0 rows differ' "$OUT/test_cuda_sample.log")"
# B = 256 (one CTA a row): cluster / block, and own / block (before the routing of rows without top_p)
grep -E "^speed: sample B=256" "$OUT/test_cuda_sample.log" | awk '{
    n = ""; b = c = o = "";
    for (i = 5; i <= NF; i++) {
        if ($i == "block") { b = $(i + 1); i++ } else if ($i == "cluster") { c = $(i + 1); i++ }
        else if ($i == "own:") { o = $(i + 1); i++ } else if (b == "") n = n " " $i
    }
    sub(/\)$/, "", o);
    if (b > 0) printf "B=256%s: cluster/block %.2f (%s / %s us), own/block %s\n", n, c / b, c, b, o != "" ? sprintf("%.2f", o / b) : "-"
}'
if [ "$QUICK" = 1 ]; then
    say "ncu: top_p speed lines (kernel us: block, cluster auto, cluster 16, cluster match-aggregated bins)"
    (cd $B && VLLM_TEST_FILTER=test_speed VLLM_CUDA_SPEED=topp timeout 60 /usr/local/cuda/bin/ncu -k regex:k_sample \
        --metrics gpu__time_duration.sum --clock-control none --csv --print-units base ./test_cuda_sample) \
        >"$OUT/ncu.csv" 2>"$OUT/ncu.err"
    echo "ncu exit $?"
    grep -E "^speed" "$OUT/ncu.csv" | head -12
    python3 - "$OUT/ncu.csv" <<'PY'
import csv, sys
rows = list(csv.reader(l for l in open(sys.argv[1]) if l.startswith('"')))
if rows:
    h = rows[0]
    k, v = h.index("Kernel Name"), h.index("Metric Value")
    out = ["%s %.1f" % (r[k].split("(")[0].split("<")[0], float(r[v].replace(",", "")) / 1e3) for r in rows[1:] if len(r) > v]
    for i in range(0, len(out), 4):
        print("ncu us: " + "  ".join(out[i:i + 4]))
PY
    say "compute-sanitizer memcheck (cluster kernel: auto size, 8 CTAs a row)"
    (cd $B && VLLM_CUDA_SPEED=0 VLLM_CUDA_CFG=02 VLLM_TEST_SKIP=test_large_vocab,test_distribution,test_speed timeout 60 \
        /usr/local/cuda/bin/compute-sanitizer --tool memcheck ./test_cuda_sample) >"$OUT/memcheck.log" 2>&1
    echo "memcheck exit $?"
    grep -E "ERROR SUMMARY|FAILED|OK \]" "$OUT/memcheck.log" | head -12
    say "done"
    exit 0
fi
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
