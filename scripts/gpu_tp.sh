#!/usr/bin/env bash
# gpu_tp.sh — issue 8's run on a machine with several GPUs (one device call):
#   - test_cuda_comm: NCCL all_reduce / all_gather at world 1 .. min(4, GPUs);
#   - a random-weight Llama-3.1-8B-shaped bf16 checkpoint (gpu_hf.py make);
#   - `vllm run --device cuda -tp N` for N = 1, 2, 4 (as many as the GPUs
#     allow): 128 greedy tokens after a 512-token prompt, compared with
#     TP=1; where they differ, the near-tie rule decides (HF transformers
#     teacher-forced on each sequence, gpu_hf.py hf: every token HF's top or
#     within 0.5 nat of it);
#   - speed per N: prefill of an 8,000-token prompt (median TTFT of 3
#     requests through the engine, warm) and batch-1 decode (`vllm run`),
#     and the scaling vs TP=1 (target: prefill >= 1.8x at TP=2).
# Logs into $OUT. VLLM_TP_SIZES overrides the list ("1 2 4").
# VLLM_TP_PROMPT_LEN: the greedy prompt's length (default 512; 1024 or more
# runs the two-half overlapped prefill of arch_llama.c in the greedy check).
# VLLM_TP_GREEDY=0 skips the greedy runs (speed only).
# VLLM_TP_GREEDY_ENV="NAME=VALUE[,NAME=VALUE...]": for TP > 1 one more
# greedy run under that environment (a candidate default), checked like the
# plain one (equal to TP=1, else the near-tie rule against HF).
# VLLM_TP_AB="A B ...": for TP > 1 one more prefill measurement per word
# (after the greedy checks; each limited to VLLM_TP_AB_T seconds, 90),
# each word NAME=VALUE[,NAME=VALUE...] of environment (e.g.
# "VLLM_TP_OVERLAP=0 VLLM_TP_BF16_SUMS=0,VLLM_TP_OVERLAP=0").
# With 2+ GPUs, tools/tp_probe times the pieces of a TP=2 prefill step
# (all-reduce bf16/f32, a rank's gate|up GEMM, both overlapped, ADD_RMSNORM,
# the sequence-parallel reduce-scatter / all-gather); VLLM_TP_PROBE_AB="A B"
# runs it again per word of NAME=VALUE[,NAME=VALUE] environment (e.g.
# "VLLM_TP_SYM=1,VLLM_TP_NCCL_CTA=zero").
# VLLM_TP_BUILD: the build directory (default build-gpu).
# VLLM_TP_SKIP_COMM=1: no test_cuda_comm run (a caller that ran it already).
# VLLM_TP_EXTRA_TESTS: CUDA test executables to build and run after
# test_cuda_comm (e.g. "test_cuda_fused test_cuda_gemm").
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
t0=$(date +%s)
say() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
PY=${PYTHON:-python3}
BUILD=${VLLM_TP_BUILD:-build-gpu} # a build dir outside the copied tree survives between calls
source scripts/gpu_deps.sh || exit 1
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
say "$ngpu GPU(s)"
cmake -S . -B $BUILD -DVLLM_CUDA=ON -DCMAKE_BUILD_TYPE=Release >"$OUT/tp_configure.log" 2>&1 ||
    { tail -30 "$OUT/tp_configure.log"; exit 1; }
cmake --build $BUILD -j"$(nproc)" --target vllm test_cuda_comm tp_probe ${VLLM_TP_EXTRA_TESTS:-} ${VLLM_TP_EXTRA_TARGETS:-} \
    >"$OUT/tp_build.log" 2>&1 ||
    { grep -E "error" "$OUT/tp_build.log" | head -30; exit 1; }
V=$BUILD/vllm
if [ "${VLLM_TP_SKIP_COMM:-0}" != 1 ]; then
say "NCCL collectives (test_cuda_comm)"
(cd $BUILD && timeout 120 ./test_cuda_comm) >"$OUT/test_cuda_comm.log" 2>&1
echo "test_cuda_comm exit $?: $(grep -E 'nccl world|nccl symmetric|GPU\(s\)|tp bf16|FAILED|ERROR' "$OUT/test_cuda_comm.log" | tr '\n' ';')"
fi
for t in ${VLLM_TP_EXTRA_TESTS:-}; do
    (cd $BUILD && timeout 300 ./"$t") >"$OUT/$t.log" 2>&1
    echo "$t exit $?: $(grep -E 'PASSED|FAILED|ERROR' "$OUT/$t.log" | tr '\n' ';')"
done
if [ "$ngpu" -ge 2 ]; then
    say "tp_probe (TP=2 step pieces)"
    timeout 120 $BUILD/tp_probe --tp 2 2>&1 | tee "$OUT/tp_probe.log"
    for pe in ${VLLM_TP_PROBE_AB:-}; do
        echo "tp_probe with $pe:"
        env ${pe//,/ } timeout 60 $BUILD/tp_probe --tp 2 2>&1 | tee -a "$OUT/tp_probe.log"
    done
fi

M=/tmp/rand-llama-8b
say "checkpoint"
[ -f $M/config.json ] || $PY scripts/gpu_hf.py make --shape llama-8b --out $M >"$OUT/tp_make.log" 2>&1 ||
    { tail -20 "$OUT/tp_make.log"; exit 1; }
ids() { $PY -c "import random; random.seed($2); print(','.join(str(random.randrange(1000, 100000)) for _ in range($1)))"; }
PL=${VLLM_TP_PROMPT_LEN:-512}
ids $PL 0 >"$OUT/tp_p512.ids"
ids 8000 2 >"$OUT/tp_p8k.ids"
sizes=${VLLM_TP_SIZES:-"1 2 4"}
declare -A PF DEC
for n in $sizes; do
    if [ "$n" -gt "$ngpu" ]; then echo "TP=$n: only $ngpu GPU(s), skipped"; continue; fi
    if [ "${VLLM_TP_GREEDY:-1}" = 0 ]; then echo "TP=$n: greedy run skipped (VLLM_TP_GREEDY=0)"; else
    say "TP=$n: greedy $PL + 128, decode speed"
    $V run --device cuda -tp $n --model $M --prompt-ids "$(cat "$OUT/tp_p512.ids")" --max-tokens 128 --ignore-eos \
        --temperature 0 --print-ids >"$OUT/tp$n.ids" 2>"$OUT/tp$n.err" || { tail -3 "$OUT/tp$n.err"; continue; }
    grep "prompt:" "$OUT/tp$n.err"
    DEC[$n]=$(sed -n 's/.*decode: [0-9]* tokens, \([0-9.]*\) tok\/s.*/\1/p' "$OUT/tp$n.err")
    fi
    say "TP=$n: prefill of 8,000 tokens (engine, warm: median TTFT of 3 requests of 8000 in / 1 out)"
    $V bench --device cuda -tp $n --model $M --num-prompts 3 --input-len 8000 --output-len 1 --concurrency 1 \
        --max-num-seqs 1 --max-num-batched-tokens 8192 >"$OUT/tp${n}_pf.log" 2>&1 || tail -3 "$OUT/tp${n}_pf.log"
    ttft=$(sed -n 's/^Median TTFT (ms): *\([0-9.]*\).*/\1/p' "$OUT/tp${n}_pf.log" | head -1)
    PF[$n]=$([ -n "$ttft" ] && $PY -c "print(round(8000 / ($ttft / 1e3), 1))")
    echo "prefill 8000: ${ttft:-?} ms = ${PF[$n]:-?} tok/s"
    grep -m1 -o "tensor parallel prefill.*" "$OUT/tp${n}_pf.log"
    ge=${VLLM_TP_GREEDY_ENV:-}
    if [ "$n" != 1 ] && [ -n "$ge" ] && [ "${VLLM_TP_GREEDY:-1}" != 0 ]; then
        say "TP=$n: greedy $PL + 128 with $ge"
        env ${ge//,/ } timeout 180 $V run --device cuda -tp $n --model $M --prompt-ids "$(cat "$OUT/tp_p512.ids")" --max-tokens 128 \
            --ignore-eos --temperature 0 --print-ids >"$OUT/tp${n}g.ids" 2>"$OUT/tp${n}g.err" || tail -3 "$OUT/tp${n}g.err"
        grep -m2 -o "tensor parallel.*" "$OUT/tp${n}g.err"
        grep "prompt:" "$OUT/tp${n}g.err" | sed 's/^/  with the environment: /'
    fi
    if [ "$n" != 1 ] && [ -f "$OUT/tp1.ids" ]; then
        hf_checked=
        for v in $n ${ge:+${n}g}; do
            [ -s "$OUT/tp$v.ids" ] || continue
            if cmp -s "$OUT/tp1.ids" "$OUT/tp$v.ids"; then echo "TP=$v greedy ids == TP=1"; continue; fi
            echo "TP=$v greedy ids differ from TP=1: near-tie check against HF"
            for k in ${hf_checked:-1} $v; do
                $PY scripts/gpu_hf.py hf --model $M --prompt-ids "$OUT/tp_p512.ids" --ours "$OUT/tp$k.ids" \
                    --max-tokens 128 >"$OUT/tp${k}_hf.json" 2>/dev/null
                echo "  TP=$k vs HF: exit $? $(cut -c1-300 "$OUT/tp${k}_hf.json" | grep -o '"check": "[A-Za-z]*"')"
            done
            hf_checked=" "
        done
    fi
    # the A/B rows last: a row that hangs (its time limit) cannot cost the checks above
    k=0
    for ab in ${VLLM_TP_AB:-}; do
        [ "$n" != 1 ] || break
        k=$((k + 1))
        env ${ab//,/ } timeout "${VLLM_TP_AB_T:-90}" $V bench --device cuda -tp $n --model $M --num-prompts 3 \
            --input-len 8000 --output-len 1 --concurrency 1 --max-num-seqs 1 --max-num-batched-tokens 8192 \
            >"$OUT/tp${n}_pf_ab$k.log" 2>&1 ||
            tail -3 "$OUT/tp${n}_pf_ab$k.log"
        ttft=$(sed -n 's/^Median TTFT (ms): *\([0-9.]*\).*/\1/p' "$OUT/tp${n}_pf_ab$k.log" | head -1)
        echo "prefill 8000 with $ab: ${ttft:-?} ms$(grep -q . <<<"$ttft" || echo ' (no result: see the log; a hang ends at VLLM_TP_AB_T)')"
        grep -m2 -o "tensor parallel: xn in symmetric.*\|tensor parallel: no symmetric.*" "$OUT/tp${n}_pf_ab$k.log"
    done
done
for n in $sizes; do
    [ -n "${PF[$n]:-}" ] && [ -n "${PF[1]:-}" ] &&
        echo "TP=$n: prefill 8000 ${PF[$n]} tok/s ($(python3 -c "print(round(${PF[$n]}/${PF[1]},2))")x TP=1), decode ${DEC[$n]:-?} tok/s ($(python3 -c "print(round(${DEC[$n]:-0}/${DEC[1]:-1},2))")x)"
done
say "done"
