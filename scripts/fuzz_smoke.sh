#!/usr/bin/env bash
# fuzz_smoke.sh — build the libFuzzer targets (fuzz/fuzz_*.c) with clang in a
# separate build dir and run each one for a short while on a fresh seed
# corpus. Exits non-zero if a target crashes (ASan/UBSan report, abort,
# timeout, out of memory) or the build fails.
#
#   scripts/fuzz_smoke.sh                 # 30 s per target
#   FUZZ_SECONDS=300 scripts/fuzz_smoke.sh
#
# Environment: FUZZ_SECONDS (default 30), FUZZ_CC (default clang),
# FUZZ_BUILD_DIR (default build-fuzz), FUZZ_JOBS (default 2),
# VLLM_SHARED_DIR (default ../shared; its GGUF files join the gguf seeds).
# Seeds: each target writes its own synthetic seeds when run with
# VLLM_FUZZ_EMIT_SEEDS=DIR. Crash inputs are kept in BUILD/artifacts/.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${FUZZ_BUILD_DIR:-$ROOT/build-fuzz}
SECS=${FUZZ_SECONDS:-30}
SHARED=${VLLM_SHARED_DIR:-$ROOT/../shared}
JOBS=${FUZZ_JOBS:-2}

targets=()
for src in "$ROOT"/fuzz/fuzz_*.c; do
    [ -e "$src" ] || continue
    targets+=("$(basename "$src" .c)")
done
if [ ${#targets[@]} -eq 0 ]; then
    echo "fuzz_smoke: no fuzz/fuzz_*.c targets" >&2
    exit 1
fi

CC=${FUZZ_CC:-clang} cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
    -DVLLM_FUZZ=ON -DVLLM_TESTS=OFF >/dev/null
cmake --build "$BUILD" -j"$JOBS" --target "${targets[@]}"

export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}

failed=()
for t in "${targets[@]}"; do
    seeds=$BUILD/seeds/$t corpus=$BUILD/corpus/$t art=$BUILD/artifacts/$t
    rm -rf "$seeds" "$corpus"
    mkdir -p "$seeds" "$corpus" "$art"
    # Targets that support it write seeds and exit; -runs=0 keeps any other
    # target from fuzzing here.
    (cd "$art" && VLLM_FUZZ_EMIT_SEEDS=$seeds "$BUILD/$t" -runs=0 >/dev/null 2>&1) || true
    if [ "$t" = fuzz_gguf ] && [ -d "$SHARED/models" ]; then
        find "$SHARED/models" -name '*.gguf' -size -4M -exec cp {} "$seeds/" \; 2>/dev/null || true
    fi
    echo "== $t: $(ls "$seeds" | wc -l) seeds, ${SECS}s"
    if ! "$BUILD/$t" -max_total_time="$SECS" -timeout=20 -rss_limit_mb=4096 \
            -artifact_prefix="$art/" -print_final_stats=1 "$corpus" "$seeds" \
            >"$BUILD/$t.log" 2>&1; then
        echo "!! $t FAILED (log: $BUILD/$t.log, inputs: $art/)" >&2
        tail -40 "$BUILD/$t.log" >&2
        failed+=("$t")
    else
        grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$BUILD/$t.log" | tr '\n' ' '
        echo
    fi
done

if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz_smoke: FAILED: ${failed[*]}" >&2
    exit 1
fi
echo "fuzz_smoke: ok (${targets[*]})"
