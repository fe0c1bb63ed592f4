#!/usr/bin/env bash
# gpu_bench.sh — issue 6's speed and oracle run, one device call on the H200:
# for each random-weight bf16 checkpoint of a real shape (VLLM_BENCH_SHAPES,
# default "qwen3-0.6b llama-8b"; made there by scripts/gpu_hf.py make):
#   - ceilings measured in this run with torch (gpu_hf.py roof): the
#     device-to-device copy bandwidth and the cuBLAS bf16 GEMM time of the
#     model's own matmuls for a 2048-token prefill, as a 5-layer burst and
#     sustained (a whole forward's matmuls, median of 8 back to back);
#   - ours: `vllm run --device $DEV` batch-1 greedy decode (512-token prompt,
#     256 tokens) and the prefill of a 2048-token prompt (median TTFT of
#     `vllm bench` 2048-in / 1-out at concurrency 1), as fractions of those
#     ceilings;
#   - ours: `vllm bench --device $DEV` on random 1024-in / 128-out at
#     concurrency 1, 16, 64, 256 (throughput, TTFT, TPOT), and at 16 again
#     with temperature 0.8 + top_p 0.9 (the device sampler's nucleus path);
#   - HF transformers on the same checkpoint (gpu_hf.py hf): greedy
#     generate (decode tok/s), prefill of the same 2048 tokens, a batch-16
#     1024/128 generate, and the oracle check: our 128 greedy tokens vs HF
#     teacher-forced on our sequence (equal to HF's top token, or within
#     0.5 nat of it);
#   - the async engine == the sync engine over 64 requests at concurrency
#     16 on this model (tests/engine/test_engine_async_64.c);
#   - for VLLM_BENCH_ASYNC_SHAPES (default qwen3-0.6b): `vllm bench
#     --async-scheduling` at concurrency 64 with the device mirror on / off.
# Logs and JSON into $OUT; a summary table at the end. Environment:
# VLLM_BENCH_SHAPES, VLLM_BENCH_CONC (default "1 16 64 256"), VLLM_BENCH_HF=0
# skips the HF side, VLLM_BENCH_BUILD (default build-gpu; a folder holding
# prebuilt vllm and test_engine_async_64 with VLLM_BENCH_PREBUILT=1, e.g.
# the bin/ that gpu_bin unpacks from a gpu_snap.sh snapshot: no build on
# the device).
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
t0=$(date +%s)
say() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
SHAPES=${VLLM_BENCH_SHAPES:-"qwen3-0.6b llama-8b"}
CONC=${VLLM_BENCH_CONC-"1 16 64 256"} # set and empty: no concurrency rows
BUILD=${VLLM_BENCH_BUILD:-build-gpu}
DEV=${VLLM_BENCH_DEVICE:-cuda} # cpu: a local smoke test of this script (tiny shapes)
PY=${PYTHON:-python3}

source scripts/gpu_deps.sh || exit 1
if [ "${VLLM_BENCH_PREBUILT:-0}" = 1 ]; then
    say "prebuilt binaries in $BUILD"
    "./$BUILD/vllm" --help >/dev/null 2>&1 && [ -x "$BUILD/test_engine_async_64" ] ||
        { echo "gpu_bench: $BUILD/vllm or test_engine_async_64 missing or not runnable"; exit 1; }
else
    say "build (CUDA)"
    cuda=ON; [ "$DEV" = cuda ] || cuda=OFF
    cmake -S . -B "$BUILD" -DVLLM_CUDA=$cuda -DCMAKE_BUILD_TYPE=Release >"$OUT/bench_configure.log" 2>&1 ||
        { tail -30 "$OUT/bench_configure.log"; exit 1; }
    cmake --build "$BUILD" -j"$(nproc)" --target vllm test_engine_async_64 >"$OUT/bench_build.log" 2>&1 ||
        { grep -E "error" "$OUT/bench_build.log" | head -30; exit 1; }
fi
V=./$BUILD/vllm
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.total --format=csv,noheader
# power draw and SM clock once a second for the whole run (the power cap sets
# the clock of long GEMM runs: see the sustained ceiling in gpu_hf.py roof)
if command -v nvidia-smi >/dev/null; then
    nvidia-smi dmon -i 0 -s pc -d 1 >"$OUT/dmon.log" 2>&1 &
    DMON=$!
    trap 'kill $DMON 2>/dev/null' EXIT
fi

rand_ids() { # n seed model: random ids in [V/100, min(V, 100000))
    $PY -c "import json, random; random.seed($2); V = json.load(open('$3/config.json'))['vocab_size'];
print(','.join(str(random.randrange(V // 100, min(V, 100000))) for _ in range($1)))"
}
rate() { sed -n "s/.*$1: [0-9]* tokens, \([0-9.]*\) tok\/s.*/\1/p" | head -1; }

for shape in $SHAPES; do
    M=/tmp/rand-$shape
    rm -f "$OUT/hf_$shape.json" "$OUT/roof_$shape.json"
    say "$shape: make the checkpoint"
    [ -f "$M/config.json" ] || $PY scripts/gpu_hf.py make --shape "$shape" --out "$M" >"$OUT/make_$shape.log" 2>&1 ||
        { tail -20 "$OUT/make_$shape.log"; continue; }
    say "$shape: ceilings (torch: d2d copy, cuBLAS bf16 GEMM of the model's matmuls at 2048 tokens)"
    $PY scripts/gpu_hf.py roof --model "$M" --tokens 2048 >"$OUT/roof_$shape.json" 2>"$OUT/roof_$shape.err" ||
        tail -5 "$OUT/roof_$shape.err"
    cat "$OUT/roof_$shape.json"
    rand_ids 512 0 "$M" >"$OUT/p512.ids"
    rand_ids 2048 1 "$M" >"$OUT/p2048.ids"

    say "$shape: ours, batch-1 greedy decode (512 prompt + 256) and 2048-token prefill"
    $V run --device $DEV --model "$M" --prompt-ids "$(cat "$OUT/p512.ids")" --max-tokens 256 --ignore-eos \
        --temperature 0 --print-ids >"$OUT/ours_$shape.ids" 2>"$OUT/ours_$shape.err"
    grep -E "prompt:" "$OUT/ours_$shape.err"
    dec=$(rate decode <"$OUT/ours_$shape.err")
    # Prefill of a 2048-token prompt: the median TTFT of 8 one-token
    # requests through the engine (warm: the engine warms up at start, and
    # the median drops the first); `vllm run` (a cold process: cuBLAS loads
    # its kernels during the timed forward) for reference.
    # (the sync engine, as in every scorecard before session 24 made async
    # scheduling the GPU's default: --no-async-scheduling; the async rows
    # are below)
    $V bench --device $DEV --model "$M" --num-prompts 8 --input-len 2048 --output-len 1 --concurrency 1 \
        --max-num-seqs 1 --max-num-batched-tokens 8192 --no-async-scheduling >"$OUT/bench_pf_$shape.log" 2>&1
    ttft=$(sed -n 's/^Median TTFT (ms): *\([0-9.]*\).*/\1/p' "$OUT/bench_pf_$shape.log" | head -1)
    pf=$([ -n "$ttft" ] && $PY -c "print(2048 / ($ttft / 1e3))")
    echo "prefill 2048 (engine, median TTFT of 8): ${ttft:-FAILED ($(tail -1 "$OUT/bench_pf_$shape.log"))} ms"
    $V run --device $DEV --model "$M" --prompt-ids "$(cat "$OUT/p2048.ids")" --max-tokens 1 --ignore-eos \
        --temperature 0 --print-ids >/dev/null 2>"$OUT/ours_pf_$shape.err"
    echo "prefill 2048 (vllm run, cold process): $(rate prompt <"$OUT/ours_pf_$shape.err") tok/s"
    say "$shape: async == sync, 64 requests at concurrency 16 (VLLM_TEST_DEVICE=$DEV)"
    (cd "$BUILD" && VLLM_TEST_DEVICE=$DEV VLLM_TEST_ASYNC_MODEL=$M timeout 300 ./test_engine_async_64) \
        >"$OUT/async64_$shape.log" 2>&1
    echo "test_engine_async_64 exit $?: $(grep -E 'async == sync|FAILED|request [0-9]+ ' "$OUT/async64_$shape.log" | head -3)"

    say "$shape: vllm bench, random 1024-in / 128-out"
    for c in $CONC; do
        np=$(( c < 16 ? 8 : (c < 256 ? 2 * c : c) ))
        $V bench --device $DEV --model "$M" --num-prompts $np --input-len 1024 --output-len 128 --concurrency $c \
            --max-num-seqs $c --max-num-batched-tokens 8192 --gpu-memory-utilization 0.9 --no-async-scheduling \
            >"$OUT/bench_${shape}_c$c.log" 2>&1
        echo "conc $c ($np prompts): $(grep -E 'Request throughput|Output token throughput|Mean TTFT|Mean TPOT' \
            "$OUT/bench_${shape}_c$c.log" | sed 's/  */ /g' | tr '\n' ';')"
    done

    # the same at concurrency 16 with nucleus sampling (device sampler's
    # top_p path; the rows above sample at temperature 1 without top_p)
    $V bench --device $DEV --model "$M" --num-prompts 32 --input-len 1024 --output-len 128 --concurrency 16 \
        --max-num-seqs 16 --max-num-batched-tokens 8192 --gpu-memory-utilization 0.9 --temperature 0.8 --top-p 0.9 \
        --no-async-scheduling \
        >"$OUT/bench_${shape}_c16_topp.log" 2>&1
    echo "conc 16, T 0.8 top_p 0.9: $(grep -E 'Output token throughput|Mean TPOT' \
        "$OUT/bench_${shape}_c16_topp.log" | sed 's/  */ /g' | tr '\n' ';')"

    case " ${VLLM_BENCH_ASYNC_SHAPES:-qwen3-0.6b} " in *" $shape "*)
        say "$shape: async scheduling at concurrency 64 (device mirror on / off)"
        for mir in 1 0; do
            VLLM_ASYNC_DEVICE_IDS=$mir $V bench --device $DEV --model "$M" --num-prompts 128 --input-len 1024 \
                --output-len 128 --concurrency 64 --max-num-seqs 64 --max-num-batched-tokens 8192 --async-scheduling \
                --gpu-memory-utilization 0.9 >"$OUT/bench_${shape}_async_m$mir.log" 2>&1
            echo "async, VLLM_ASYNC_DEVICE_IDS=$mir: $(grep -E 'Request throughput|Output token throughput|Mean TTFT|Mean TPOT' \
                "$OUT/bench_${shape}_async_m$mir.log" | sed 's/  */ /g' | tr '\n' ';')"
        done ;;
    esac
    if [ "${VLLM_BENCH_HF:-1}" = 1 ]; then
        say "$shape: HF transformers (bf16, sdpa) on the same checkpoint + oracle check of our greedy ids"
        head -c 100000 "$OUT/ours_$shape.ids" | tr ' ' '\n' | head -128 | tr '\n' ' ' >"$OUT/ours128_$shape.ids"
        $PY scripts/gpu_hf.py hf --model "$M" --prompt-ids "$OUT/p512.ids" --prefill-ids "$OUT/p2048.ids" \
            --ours "$OUT/ours128_$shape.ids" --max-tokens 128 --batch 16 --batch-input 1024 --batch-output 128 \
            >"$OUT/hf_$shape.json" 2>"$OUT/hf_$shape.err"
        echo "gpu_hf.py hf exit $?"
        cat "$OUT/hf_$shape.json"
        tail -3 "$OUT/hf_$shape.err" | grep -iE "error|Traceback" || true
    fi
    $PY - "$OUT" "$shape" "${dec:-0}" "${pf:-0}" <<'PY'
import json, sys, os
out, shape, dec, pf = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
ours16 = None
try:
    for line in open(f"{out}/bench_{shape}_c16.log"):
        if line.startswith("Output token throughput"):
            ours16 = float(line.split()[-1])
except OSError:
    pass
roof = json.load(open(f"{out}/roof_{shape}.json")) if os.path.exists(f"{out}/roof_{shape}.json") else {}
hf = {}
try:
    hf = json.load(open(f"{out}/hf_{shape}.json"))
except Exception:
    pass
print(f"SUMMARY {shape}:")
if roof:
    print(f"  batch-1 decode {dec:.1f} tok/s = {dec / roof['decode_roofline_tok_s']:.3f} of the roofline "
          f"({roof['decode_roofline_tok_s']:.0f} tok/s: {roof['weight_bytes_per_step'] / 1e9:.3f} GB/step at "
          f"{roof['d2d_GBps']:.0f} GB/s d2d)")
    n = roof["prefill_tokens"]
    t = n / pf if pf else float("inf")
    print(f"  prefill {n}: {pf:.0f} tok/s = {t * 1e3:.1f} ms; cuBLAS bf16 for the same matmuls "
          f"{roof['prefill_gemm_ms']:.1f} ms ({roof['prefill_gemm_TFLOPs']} TFLOP/s) -> "
          f"{roof['prefill_gemm_ms'] / 1e3 / t:.3f} of the burst cuBLAS rate")
    if "prefill_gemm_sustained_ms" in roof:
        print(f"  prefill {n}: cuBLAS bf16 sustained (a whole forward's matmuls, median of 8 back to back, like our "
              f"8 requests) {roof['prefill_gemm_sustained_ms']:.1f} ms ({roof['prefill_gemm_sustained_TFLOPs']} TFLOP/s) -> "
              f"ours {roof['prefill_gemm_sustained_ms'] / 1e3 / t:.3f} of the sustained cuBLAS rate")
    if "prefill_gemm_graph_ms" in roof:
        print(f"  prefill {n}: cuBLAS bf16, the forward's matmuls as one CUDA graph (no launch gaps; median of 8) "
              f"{roof['prefill_gemm_graph_ms']:.1f} ms ({roof['prefill_gemm_graph_TFLOPs']} TFLOP/s) -> "
              f"ours {roof['prefill_gemm_graph_ms'] / 1e3 / t:.3f} of the graphed cuBLAS rate")
    if "prefill_attn_flops" in roof:
        # model FLOPs (projections + causal attention products) per second
        # over the cuBLAS rate: the MFU-style reading of the same gate
        mf = 1 + roof["prefill_attn_flops"] / roof["prefill_matmul_flops"]
        line = (f"  prefill {n}: counting the attention products too ({roof['prefill_attn_flops'] / 1e12:.2f} of "
                f"{(roof['prefill_attn_flops'] + roof['prefill_matmul_flops']) / 1e12:.2f} TFLOP): "
                f"{mf * roof['prefill_gemm_ms'] / 1e3 / t:.3f} of the burst rate")
        if "prefill_gemm_sustained_ms" in roof:
            line += f", {mf * roof['prefill_gemm_sustained_ms'] / 1e3 / t:.3f} of the sustained rate"
        if "prefill_gemm_graph_ms" in roof:
            line += f", {mf * roof['prefill_gemm_graph_ms'] / 1e3 / t:.3f} of the graphed rate"
        print(line)
if hf:
    print(f"  HF transformers: decode {hf.get('hf_decode_tok_s')} tok/s (ours {dec / max(hf.get('hf_decode_tok_s', 1), 1e-9):.2f}x), "
          f"prefill 2048 {hf.get('hf_prefill_long_tok_s')} tok/s (ours {pf / max(hf.get('hf_prefill_long_tok_s', 1), 1e-9):.2f}x), "
          f"batch-16 1024/128 {hf.get('hf_batch_out_tok_s')} out tok/s"
          + (f" (ours at concurrency 16: {ours16:.0f}, {ours16 / hf['hf_batch_out_tok_s']:.2f}x)"
             if ours16 and hf.get('hf_batch_out_tok_s') else ""))
    print(f"  oracle: ours == HF greedy: {hf.get('ours_equal_hf_greedy')} (first difference {hf.get('first_difference')}); "
          f"HF top == ours at {hf.get('hf_top_equal')}/{hf.get('positions')} positions, max gap "
          f"{hf.get('max_gap_nats')} nats -> {hf.get('check')}")
PY
done
say "done"
