#!/bin/sh
# Tokenizer load time and encode throughput on the real tokenizers.
#   bench/bench_tokenizer.sh [BUILD_DIR]   (default: build; needs ../shared)
# Builds bench/bench_tokenizer.c against BUILD_DIR/libvllmcore.a, unpacks
# the xz tokenizers into a temp folder and prints one line per tokenizer.
set -e
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
shared=${VLLM_SHARED_DIR:-$here/../shared}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc -std=c11 -O2 -D_GNU_SOURCE -I"$here/src" "$here/bench/bench_tokenizer.c" "$build/libvllmcore.a" \
   $(pkg-config --libs jansson libpcre2-8 libutf8proc) -lpthread -lm -o "$tmp/bench_tokenizer"
for d in "$shared"/tokenizers/*/; do
  m=$(basename "$d")
  mkdir -p "$tmp/$m"
  for f in tokenizer.json tokenizer_config.json; do
    [ -f "$d/$f.xz" ] && xz -dc "$d/$f.xz" > "$tmp/$m/$f"
  done
  "$tmp/bench_tokenizer" "$tmp/$m"
done
for g in "$shared"/models/ggml-vocab/*.gguf; do
  [ -f "$g" ] && "$tmp/bench_tokenizer" "$g"
done
