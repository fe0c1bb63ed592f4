#!/usr/bin/env bash
# build_llama_cpp_cuda.sh — llama.cpp's llama-bench and llama-server with the
# CUDA backend, for the GPU side-by-sides (scripts/gpu_s24c.sh, gpu_s24h.sh):
# the llama.cpp that llama-cpp-python LLAMA_CPP_PY_VERSION vendors (the same source as the CPU
# side-by-side, bench_vs_llamacpp.sh), from its PyPI source archive. Built
# on this machine (nvcc; no GPU needed) for sm_90 only, statically linked
# (the CUDA runtime and cuBLAS come from the GPU machine's /usr/local/cuda),
# CUDA graphs on (llama.cpp's default), stripped and xz-compressed for the
# device call's carry:
#   bash bench/build_llama_cpp_cuda.sh [WORKDIR]   -> WORKDIR/llama-bench.xz, llama-server.xz
# WORKDIR defaults to /tmp/lcpp; ~40 min on 2 cores (the ggml-cuda kernels).
set -euo pipefail
V=${LLAMA_CPP_PY_VERSION:-0.3.36}
W=${1:-/tmp/lcpp}
mkdir -p "$W"
cd "$W"
[ -f "llama_cpp_python-$V.tar.gz" ] || pip download --no-deps --no-binary :all: "llama-cpp-python==$V" -d .
[ -d "llama_cpp_python-$V" ] || tar xzf "llama_cpp_python-$V.tar.gz"
S=llama_cpp_python-$V/vendor/llama.cpp
cmake -S "$S" -B "$S/build-cuda" -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DGGML_CUDA_NCCL=OFF -DGGML_NATIVE=OFF \
    -DCMAKE_BUILD_TYPE=Release >"$W/cmake.log"
cmake --build "$S/build-cuda" -j"$(nproc)" --target llama-bench llama-server >"$W/build.log"
for b in llama-bench llama-server; do
    strip -o "$W/$b" "$S/build-cuda/bin/$b"
    xz -T1 -9 -c "$W/$b" >"$W/$b.xz"
    ls -la "$W/$b" "$W/$b.xz"
done
