#!/usr/bin/env bash
# gpu_e2e.sh — on the H200 machine: the CUDA op/model tests (gpu_run.sh),
# then the whole engine on the GPU with a random-weight Qwen3-0.6B-shaped
# bf16 checkpoint made there with transformers: `vllm run` (512-token
# prefill + 128 greedy decode) and `vllm bench` (offline). Logs into $OUT.
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
VLLM_GPU_SANITIZE=${VLLM_GPU_SANITIZE:-0} bash scripts/gpu_run.sh
source scripts/gpu_deps.sh
cmake --build build-gpu -j"$(nproc)" --target vllm >"$OUT/build_vllm.log" 2>&1 || { tail -30 "$OUT/build_vllm.log"; exit 1; }
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
ids=$(python3 -c "import random; random.seed(0); print(','.join(str(random.randrange(1000, 100000)) for _ in range(512)))")
for dev in cuda cpu; do
  echo "== vllm run --device $dev (512 prompt, 128 decode)"
  ./build-gpu/vllm run --device $dev --threads 16 --model /tmp/qwen3-0.6b-rand --prompt-ids "$ids" --max-tokens 128 \
      --ignore-eos --temperature 0 --print-ids 2>&1 >"$OUT/run_$dev.ids" | tail -2
done
cmp -s "$OUT/run_cuda.ids" "$OUT/run_cpu.ids" && echo "greedy ids: cuda == cpu" || echo "greedy ids: cuda != cpu (see run_*.ids)"
echo "== vllm bench --device cuda"
./build-gpu/vllm bench --device cuda --model /tmp/qwen3-0.6b-rand --num-prompts 64 --input-len 256 --output-len 64 \
    --max-num-seqs 64 --max-num-batched-tokens 4096 --kv-cache-memory 8000000000 2>&1 | tail -30
