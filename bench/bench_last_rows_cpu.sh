#!/usr/bin/env bash
# bench_last_rows_cpu.sh — the last layer on the logit rows on the CPU
# (session 22): `vllm run` prompt rate of a 512-token prompt (random ids,
# seed 1; one token generated) with VLLM_LAST_ROWS=1 (default) and =0 (the
# whole last layer), REPS rounds in turn (default 3). MODEL: a .gguf or HF
# folder (default: the default model). Run from the repository root after
# scripts/build.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD:-build}
ids=$(python3 -c "import random; random.seed(1); print(','.join(str(random.randrange(100, 40000)) for _ in range(512)))")
for r in $(seq "${REPS:-3}"); do
    for e in 1 0; do
        echo "round $r VLLM_LAST_ROWS=$e: $(VLLM_LAST_ROWS=$e "$B/vllm" run ${MODEL:+--model "$MODEL"} --prompt-ids "$ids" \
            --max-tokens 1 --temperature 0 --ignore-eos 2>&1 | grep -o 'prompt: [0-9]* tokens, [0-9.]* tok/s')"
    done
done
