#!/usr/bin/env bash
# CPU speed of `vllm run`: prefill of a 512-token prompt and decode of 128
# tokens (greedy, EOS ignored), at 1 and 2 threads, median of REPS runs.
#
#   bench/bench_cpu.sh [MODEL.gguf ...]
#
# Without arguments: the default model (SmolLM2-135M-Instruct Q4_1) and a
# random-weight 1B-shaped Llama in Q4_0 (made by tools/make_random_gguf.py
# into models/ if missing). Prints a markdown table for docs/BENCHMARKS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-3}
PROMPT_LEN=${PROMPT_LEN:-512}
GEN=${GEN:-128}
PY=${PYTHON:-.venv/bin/python}
[ -x build/vllm ] || scripts/build.sh

models=("$@")
if [ ${#models[@]} -eq 0 ]; then
  models=("$(scripts/fetch_model.sh)")
  rand=models/rand-llama-1b-q4_0.gguf
  [ -f "$rand" ] || "$PY" tools/make_random_gguf.py --shape llama-1b --qtype q4_0 --out "$rand" >/dev/null
  models+=("$rand")
fi
ids=$(python3 -c "import random; random.seed(0); print(','.join(str(random.randrange(300, 900)) for _ in range($PROMPT_LEN)))")

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "| model | threads | prefill tok/s ($PROMPT_LEN) | decode tok/s ($GEN) |"
echo "|---|---|---|---|"
for m in "${models[@]}"; do
  for t in 1 2; do
    pf=(); dc=()
    for _ in $(seq "$REPS"); do
      line=$(./build/vllm run --model "$m" --prompt-ids "$ids" --max-tokens "$GEN" --ignore-eos \
             --temperature 0 --threads "$t" --print-ids 2>&1 >/dev/null | grep '^prompt:')
      pf+=("$(echo "$line" | sed -E 's/.*tokens, ([0-9.]+) tok\/s \| decode.*/\1/')")
      dc+=("$(echo "$line" | sed -E 's/.*decode: [0-9]+ tokens, ([0-9.]+) tok\/s.*/\1/')")
    done
    echo "| $(basename "$m") | $t | $(printf '%s\n' "${pf[@]}" | median) | $(printf '%s\n' "${dc[@]}" | median) |"
  done
done
