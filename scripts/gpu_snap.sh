#!/usr/bin/env bash
# gpu_snap.sh — make the snapshot a device call carries (the prebuilt-binary
# pattern of sessions 10-13): builds the named targets in build-cuda (so no
# stale binary travels), then writes .gpu-snap-NAME/ with
#   scripts/ and tools/ (tracked and untracked-but-not-ignored files),
#   .deps/ (our Debian libraries and libcmocka0, see gpu_deps.sh) and
#   .wheels/ (the gguf wheel) when present here,
#   bin.txz: the targets, stripped (the device scripts unpack it: gpu_bin),
# and prints the size (the carry limit is 64 MiB) and the call to make.
#   bash scripts/gpu_snap.sh NAME TARGET...     e.g.
#   bash scripts/gpu_snap.sh a vllm quantize test_cuda_gemv_xr
#   run: carry [".gpu-snap-a"], command "cd .gpu-snap-a && OUT=$OUT bash scripts/gpu_sNNx.sh"
# VLLM_SNAP_NOBUILD=1 skips the build (the binaries as they are).
set -eu -o pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { sed -n '2,14p' "$0"; exit 2; }
name=$1
shift
B=build-cuda
[ -d $B ] || { echo "gpu_snap: no $B (cmake -S . -B $B -DVLLM_CUDA=ON -DCMAKE_BUILD_TYPE=Release)" >&2; exit 1; }
if [ "${VLLM_SNAP_NOBUILD:-0}" != 1 ]; then
    # a failed build must stop here: an older binary of the same name would
    # otherwise pass the checks below and travel
    log=$(mktemp)
    if ! (cd $B && cmake . >/dev/null && cmake --build . -j"$(nproc)" --target "$@") >"$log" 2>&1; then
        grep -E "error|Error" "$log" | head -30 >&2
        rm -f "$log"
        echo "gpu_snap: the build failed" >&2
        exit 1
    fi
    grep -E "warning: " "$log" | head -10 || true
    rm -f "$log"
fi
S=.gpu-snap-$name
rm -rf "$S"
mkdir -p "$S/bin"
git ls-files -co --exclude-standard scripts tools | tar cf - -T - | tar xf - -C "$S"
for d in .deps .wheels; do [ -d $d ] && cp -r $d "$S/"; done
for t in "$@"; do
    [ -x "$B/$t" ] || { echo "gpu_snap: $B/$t missing" >&2; exit 1; }
    strip -o "$S/bin/$t" "$B/$t"
done
(cd "$S/bin" && tar cJf ../bin.txz .)
rm -rf "$S/bin"
size=$(du -sm "$S" | cut -f1)
echo "$S: ${size} MiB ($(ls "$S" | tr '\n' ' ')); binaries built $(date -r "$B/$1" +%H:%M:%S)"
[ "$size" -lt 64 ] || echo "gpu_snap: over the 64 MiB carry limit" >&2
grep -q '^/.gpu-snap-\*/$' .git/info/exclude 2>/dev/null || echo "gpu_snap: add /.gpu-snap-*/ to .git/info/exclude" >&2
