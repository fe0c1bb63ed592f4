#!/usr/bin/env bash
# gpu_decode_bench.sh — batch-1 decode on the H200 in one short device call
# (issue 6): build a tree with the CUDA backend, run the fused-op, op and
# model tests, make the random Qwen3-0.6B-shaped bf16 checkpoint of
# gpu_e2e.sh, then test_cuda_speed (GEMV GB/s per 8B / 0.6B shape and GEMV
# variant, model-path decode and prefill, per-op GPU profile) and greedy ids
# cuda vs cpu. With a second tree (BASE), its test_cuda_speed runs on the
# same checkpoint in the same call, for before/after numbers.
#
#   bash scripts/gpu_decode_bench.sh [SRC [BASE]]   # from the .deps folder's parent
#
# SRC (default .): the tree to measure; BASE: optional tree to compare with.
# Builds in build-decode-<name> beside them; logs into $OUT.
set -u -o pipefail
SRC=${1:-.}
BASE=${2:-}
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
t0=$(date +%s)
say() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
source "$SRC/scripts/gpu_deps.sh" || exit 1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader || true

M=/tmp/qwen3-0.6b-rand
# the checkpoint is made while the build runs
( [ -f $M/config.json ] || python3 - <<'PY' ) >"$OUT/make_model.log" 2>&1 &
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM
torch.manual_seed(0)
c = Qwen3Config(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                head_dim=128, intermediate_size=3072, vocab_size=151936, tie_word_embeddings=True,
                max_position_embeddings=4096, rope_theta=1e6)
Qwen3ForCausalLM(c).to(torch.bfloat16).save_pretrained("/tmp/qwen3-0.6b-rand", safe_serialization=True)
PY
pm=$!
B_NEW=build-decode-new
B_OLD=build-decode-base
say "configure + build (new${BASE:+ and base, in parallel})"
cmake -S "$SRC" -B $B_NEW -DVLLM_CUDA=ON -DCMAKE_BUILD_TYPE=Release >"$OUT/configure_new.log" 2>&1 ||
    { tail -30 "$OUT/configure_new.log"; exit 1; }
cmake --build $B_NEW -j12 --target test_cuda_fused test_cuda_ops test_cuda_model test_cuda_speed vllm \
    >"$OUT/build_new.log" 2>&1 &
pn=$!
if [ -n "$BASE" ]; then
    (cmake -S "$BASE" -B $B_OLD -DVLLM_CUDA=ON -DCMAKE_BUILD_TYPE=Release >"$OUT/configure_base.log" 2>&1 &&
        cmake --build $B_OLD -j6 --target test_cuda_speed >"$OUT/build_base.log" 2>&1) &
    pb=$!
fi
wait $pn || { grep -E "error" "$OUT/build_new.log" | head -30; exit 1; }
say "tests"
rc=0
for t in test_cuda_fused test_cuda_ops test_cuda_model; do
    (cd $B_NEW && VLLM_CUDA_SPEED=0 timeout 150 ./$t) >"$OUT/$t.log" 2>&1
    r=$?
    echo "$t exit $r: $(grep -cE '^\[       OK \]' "$OUT/$t.log") ok, $(grep -cE '^\[  FAILED  \] test' "$OUT/$t.log") failed"
    grep -E "^\[  FAILED|cuda vs cpu: (add_rmsnorm|qk_rope)|Error|error:" "$OUT/$t.log" | head -8
    [ $r -eq 0 ] || rc=1
done
say "checkpoint"
wait $pm || { tail -20 "$OUT/make_model.log"; exit 1; }
say "test_cuda_speed (new)"
(cd $B_NEW && VLLM_CUDA_BENCH_MODEL=$M VLLM_CUDA_PROFILE=1 timeout 150 ./test_cuda_speed) >"$OUT/speed_new.log" 2>&1
echo "exit $?"
grep -E "speed:|FAIL|rror" "$OUT/speed_new.log"
grep -E "cuda profile|^  [a-z]" "$OUT/speed_new.log" | head -24
if [ -n "$BASE" ]; then
    say "test_cuda_speed (base)"
    if wait $pb; then
        (cd $B_OLD && VLLM_CUDA_BENCH_MODEL=$M VLLM_CUDA_PROFILE=1 timeout 100 ./test_cuda_speed) >"$OUT/speed_base.log" 2>&1
        echo "exit $?"
        grep -E "speed: (model|decode|prefill)|FAIL|rror" "$OUT/speed_base.log"
        grep -E "cuda profile|^  [a-z]" "$OUT/speed_base.log" | head -24
    else
        echo "base build failed"; grep -E "error" "$OUT/build_base.log" | head -10
    fi
fi
say "greedy ids cuda vs cpu (512-token prompt, 128 tokens, bf16 KV cache on both)"
ids=$(python3 -c "import random; random.seed(0); print(','.join(str(random.randrange(1000, 100000)) for _ in range(512)))")
for dev in cuda cpu; do
    VLLM_KV_CACHE_DTYPE=bf16 timeout 90 ./$B_NEW/vllm run --device $dev --threads 16 --model $M --prompt-ids "$ids" \
        --max-tokens 128 --ignore-eos --temperature 0 --print-ids 2>"$OUT/run_$dev.err" >"$OUT/run_$dev.ids"
    echo "$dev: exit $? $(grep -E 'prompt:' "$OUT/run_$dev.err")"
done
if cmp -s "$OUT/run_cuda.ids" "$OUT/run_cpu.ids"; then echo "greedy ids: cuda == cpu"
else echo "greedy ids: cuda != cpu (first difference at token $(python3 -c "a=open('$OUT/run_cuda.ids').read().split();b=open('$OUT/run_cpu.ids').read().split();print(next((i for i,(x,y) in enumerate(zip(a,b)) if x!=y),min(len(a),len(b))))"))"; fi
say "done (tests rc=$rc)"
exit $rc
