#!/usr/bin/env bash
# gpu_e2e.sh — on the H200 machine: the CUDA op/model tests (gpu_run.sh),
# then the whole engine on the GPU with a random-weight Qwen3-0.6B-shaped
# bf16 checkpoint made there with transformers:
#   - greedy ids of `vllm run` (512-token prompt + 128 decode) on cuda vs
#     cpu, once with the bf16 KV cache (cuda's default, "auto") on both and
#     once with f32 on both (VLLM_KV_CACHE_DTYPE);
#   - decode / prefill speed: `vllm run` with 1024 decode tokens and a
#     2048-token prompt, and the roofline (weight bytes per step / measured
#     device-to-device copy bandwidth, from test_cuda_ops' speed report);
#   - where the time goes: VLLM_CUDA_PROFILE=1 (GPU time per op from CUDA
#     events) and nsys when installed;
#   - `vllm bench` (offline, 64 prompts).
# Logs into $OUT. VLLM_E2E_SKIP_TESTS=1 skips gpu_run.sh (tests);
# VLLM_E2E_MEMCHECK=1 ends with compute-sanitizer memcheck over the CUDA tests
# in the time left of VLLM_E2E_BUDGET seconds (default 280).
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
t0=$(date +%s)
say() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
if [ "${VLLM_E2E_SKIP_TESTS:-0}" = 1 ]; then
    source scripts/gpu_deps.sh
    cmake -S . -B build-gpu -DVLLM_CUDA=ON -DCMAKE_BUILD_TYPE=Release >"$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
else
    VLLM_GPU_SANITIZE=${VLLM_GPU_SANITIZE:-0} bash scripts/gpu_run.sh
    grep -E "^\[  (FAILED|PASSED) |speed:|cuda vs cpu" "$OUT"/test_cuda_*.log | head -40
    source scripts/gpu_deps.sh
fi
say "build vllm"
cmake --build build-gpu -j"$(nproc)" --target vllm >"$OUT/build_vllm.log" 2>&1 || { grep -E "error" "$OUT/build_vllm.log" | head -30; exit 1; }
say "make model"
python3 - <<'PY' >"$OUT/make_model.log" 2>&1 || { tail -20 "$OUT/make_model.log"; exit 1; }
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM
torch.manual_seed(0)
c = Qwen3Config(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                head_dim=128, intermediate_size=3072, vocab_size=151936, tie_word_embeddings=True,
                max_position_embeddings=4096, rope_theta=1e6)
m = Qwen3ForCausalLM(c).to(torch.bfloat16)
m.save_pretrained("/tmp/qwen3-0.6b-rand", safe_serialization=True)
print("saved")
PY
M=/tmp/qwen3-0.6b-rand
V=./build-gpu/vllm
ids=$(python3 -c "import random; random.seed(0); print(','.join(str(random.randrange(1000, 100000)) for _ in range(512)))")
ids2k=$(python3 -c "import random; random.seed(1); print(','.join(str(random.randrange(1000, 100000)) for _ in range(2048)))")
run() { # dev kv tag [extra args...]: greedy run of the 512-token prompt
    local dev=$1 kv=$2 tag=$3; shift 3
    VLLM_KV_CACHE_DTYPE=$kv $V run --device $dev --threads 16 --model $M --prompt-ids "$ids" --max-tokens 128 \
        --ignore-eos --temperature 0 --print-ids "$@" 2>"$OUT/run_$tag.err" >"$OUT/run_$tag.ids"
    echo "$tag: $(grep -E 'prompt:' "$OUT/run_$tag.err") $(grep -o 'kv cache [a-z0-9]*' "$OUT/run_$tag.err" | head -1)"
}
say "greedy ids cuda vs cpu"
run cuda auto cuda_auto
run cpu bf16 cpu_bf16
run cuda f32 cuda_f32
run cpu f32 cpu_f32
for p in "cuda_auto cpu_bf16" "cuda_f32 cpu_f32" "cuda_auto cuda_f32"; do
    set -- $p
    if cmp -s "$OUT/run_$1.ids" "$OUT/run_$2.ids"; then echo "greedy ids: $1 == $2"
    else echo "greedy ids: $1 != $2 (first difference at token $(python3 -c "import sys;a=open('$OUT/run_$1.ids').read().split();b=open('$OUT/run_$2.ids').read().split();print(next((i for i,(x,y) in enumerate(zip(a,b)) if x!=y),min(len(a),len(b))))"))"; fi
done
say "speed: decode 1024 tokens after a 512 prompt; prefill 2048"
$V run --device cuda --model $M --prompt-ids "$ids" --max-tokens 1024 --ignore-eos --temperature 0 --print-ids \
    2>&1 >/dev/null | grep -E "prompt:|kv cache" | sed 's/.*\(kv cache [a-z0-9]*\).*/\1/'
echo "eager (VLLM_CUDA_GRAPHS=0):"
VLLM_CUDA_GRAPHS=0 $V run --device cuda --model $M --prompt-ids "$ids" --max-tokens 256 --ignore-eos --temperature 0 \
    --print-ids 2>&1 >/dev/null | grep -E "prompt:"
echo "f32 KV cache (VLLM_KV_CACHE_DTYPE=f32):"
VLLM_KV_CACHE_DTYPE=f32 $V run --device cuda --model $M --prompt-ids "$ids" --max-tokens 256 --ignore-eos \
    --temperature 0 --print-ids 2>&1 >/dev/null | grep -E "prompt:"
echo "2048-token prompt:"
$V run --device cuda --model $M --prompt-ids "$ids2k" --max-tokens 2 --ignore-eos --temperature 0 --print-ids \
    2>&1 >/dev/null | grep -E "prompt:"
python3 - "$M" "$OUT" <<'PY'
import json, re, sys, glob, os
m, out = sys.argv[1], sys.argv[2]
c = json.load(open(m + "/config.json"))
d, L, ff, V, h, kvh, hd = c["hidden_size"], c["num_hidden_layers"], c["intermediate_size"], c["vocab_size"], \
    c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
per_layer = d * (h * hd + 2 * kvh * hd) + h * hd * d + 3 * d * ff
wbytes = 2 * (L * per_layer + V * d)  # bf16, lm_head (tied) read once; embedding row negligible
bw = None
for f in glob.glob(out + "/test_cuda_ops.log"):
    mm = re.search(r"d2d copy .*?(\d+) GB/s", open(f).read())
    if mm: bw = float(mm.group(1)) * 1e9
bw = bw or 4.24e12
print(f"roofline: {wbytes/1e9:.3f} GB of weights per decode step, d2d bandwidth {bw/1e12:.2f} TB/s "
      f"-> {bw/wbytes:.0f} tok/s batch-1 decode")
PY
say "model-path speed (test_cuda_speed: batched decode, argmax on device, prefill 2048)"
cmake --build build-gpu -j"$(nproc)" --target test_cuda_speed >"$OUT/build_speed.log" 2>&1 || grep -E "error" "$OUT/build_speed.log" | head
(cd build-gpu && VLLM_CUDA_BENCH_MODEL=$M VLLM_CUDA_PROFILE=1 timeout 120 ./test_cuda_speed) >"$OUT/speed.log" 2>&1
grep -E "speed:|FAIL|Error|error" "$OUT/speed.log"
echo "GPU time per op over the speed test's eager ops (first decode steps of each size, 4 prefills of 2048):"
grep -E "cuda profile|^  [a-z]" "$OUT/speed.log" | head -40
say "GPU time per op (VLLM_CUDA_PROFILE=1, eager: 512 prefill + 64 decode tokens)"
VLLM_CUDA_PROFILE=1 VLLM_CUDA_GRAPHS=0 $V run --device cuda --model $M --prompt-ids "$ids" --max-tokens 64 \
    --ignore-eos --temperature 0 --print-ids 2>&1 >/dev/null | grep -E "cuda profile|^  [a-z]" | head -40
echo "batch-1 decode without programmatic dependent launch (VLLM_CUDA_PDL=0):"
VLLM_CUDA_PDL=0 $V run --device cuda --model $M --prompt-ids "$ids" --max-tokens 256 --ignore-eos --temperature 0 \
    --print-ids 2>&1 >/dev/null | grep -E "prompt:"
if command -v nsys >/dev/null; then
    say "nsys (64 decode tokens)"
    nsys profile -t cuda -o "$OUT/nsys_decode" --force-overwrite true $V run --device cuda --model $M --prompt-ids "$ids" \
        --max-tokens 64 --ignore-eos --temperature 0 --print-ids >"$OUT/nsys_run.log" 2>&1
    nsys stats -r cuda_gpu_kern_sum,cuda_api_sum,cuda_gpu_mem_time_sum "$OUT/nsys_decode.nsys-rep" >"$OUT/nsys_stats.txt" 2>&1
    grep -A22 "cuda_gpu_kern_sum" "$OUT/nsys_stats.txt" | cut -c1-200
    grep -A14 "cuda_api_sum" "$OUT/nsys_stats.txt" | cut -c1-200
    rm -f "$OUT/nsys_decode.nsys-rep" "$OUT"/*.sqlite
else
    echo "nsys: not installed"
fi
say "engine gates on the GPU (VLLM_TEST_DEVICE=cuda): batch invariance, seeds, async == sync"
GATES=(test_engine test_engine_async test_async_engine test_engine_devsample test_engine_async_64 ${VLLM_E2E_EXTRA_GATES:-})
cmake --build build-gpu -j"$(nproc)" --target "${GATES[@]}" >"$OUT/build_engine.log" 2>&1 ||
    grep -E "error" "$OUT/build_engine.log" | head
for t in "${GATES[@]}"; do
    (cd build-gpu && VLLM_TEST_DEVICE=cuda timeout 120 ./$t) >"$OUT/$t.log" 2>&1
    echo "$t on cuda: exit $? $(grep -cE '^\[       OK \]' "$OUT/$t.log") ok, $(grep -cE '^\[  FAILED  \] test' "$OUT/$t.log") failed"
    grep -E "^\[  (FAILED|ERROR|SKIPPED) |error:" "$OUT/$t.log" | head -5
done
say "vllm bench --device cuda"
$V bench --device cuda --model $M --num-prompts 64 --input-len 256 --output-len 64 \
    --max-num-seqs 64 --max-num-batched-tokens 4096 --gpu-memory-utilization 0.9 >"$OUT/bench.log" 2>&1
grep -iE "throughput|tok/s|req/s|Mean TTFT|Mean TPOT" "$OUT/bench.log" | head -12
echo "with --async-scheduling:"
$V bench --device cuda --model $M --num-prompts 64 --input-len 256 --output-len 64 --async-scheduling \
    --max-num-seqs 64 --max-num-batched-tokens 4096 --gpu-memory-utilization 0.9 >"$OUT/bench_async.log" 2>&1
grep -iE "throughput|Mean TTFT|Mean TPOT" "$OUT/bench_async.log" | head -6
if [ "${VLLM_E2E_MEMCHECK:-0}" = 1 ] && command -v compute-sanitizer >/dev/null; then
    # last, with whatever time is left (VLLM_E2E_BUDGET seconds from the start)
    for t in ${VLLM_E2E_MEMCHECK_TESTS:-test_cuda_fused test_cuda_sample test_cuda_flash test_cuda_ops test_cuda_model}; do
        left=$(( ${VLLM_E2E_BUDGET:-280} - ($(date +%s) - t0) ))
        [ $left -gt 20 ] || { echo "memcheck $t: no time left"; continue; }
        say "compute-sanitizer memcheck $t (limit ${left}s)"
        (cd build-gpu && VLLM_CUDA_SPEED=0 timeout $left compute-sanitizer --tool memcheck --error-exitcode 9 ./$t) \
            >"$OUT/memcheck_$t.log" 2>&1
        echo "memcheck $t exit $?"
        grep -E "ERROR SUMMARY|PASSED|FAILED|Invalid" "$OUT/memcheck_$t.log" | head -8
    done
fi
say "done"
