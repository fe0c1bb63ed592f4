#!/usr/bin/env bash
# gpu_s12e.sh — session 12: GGUF serving on the H200 with cuda_mmq_bf.cu /
# cuda_mmq.cu as merged (nvidia-h200; prebuilt binaries in bin.txz as
# gpu_s12b.sh, plus test_engine_async_64):
#   1. test_cuda_mmq, test_cuda_gemm, test_cuda_ops (VLLM_CUDA_SPEED=0);
#   2. the d2d copy rate (torch, as gpu_hf.py roof: 1 GiB, bytes read +
#      written) for the roofline;
#   3. a random Llama-3.1-8B-shaped GGUF (make_random_gguf --shape llama-8b
#      f16, our quantize to Q4_K_M): batch-1 greedy decode (512-token
#      prompt + 256) as a fraction of its roofline = bytes a step reads
#      (scripts/gguf_step_bytes.py) / the d2d rate of step 2;
#   4. `vllm bench` 512-in / 128-out, one wave at c = 16, 32, 64: default
#      (bf16 kernel), VLLM_CUDA_MMQ=int8, VLLM_CUDA_MMQ=0 (cuBLAS over the
#      per-call dequantized copy, the path before this session);
#   5. test_engine_async_64 on the GGUF (async == sync, 64 requests at
#      concurrency 16: decode steps of 16 rows through the kernel, graphed).
#   OUT=$OUT bash scripts/gpu_s12e.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s12e
G=$L/rand-llama-8b
( $PY tools/make_random_gguf.py --shape llama-8b --qtype f16 --out $G-f16.gguf >$L/make.log 2>&1; echo "exit $?" >>$L/make.log ) &
mkdir -p bin && tar xJf bin.txz -C bin
[ -f /opt/deps/usr/lib/x86_64-linux-gnu/libcmocka.so.0 ] || for f in .deps/libcmocka0*.deb; do dpkg -x "$f" /opt/deps; done
say tests
for t in test_cuda_mmq test_cuda_gemm test_cuda_ops; do
    (cd bin && VLLM_CUDA_SPEED=0 timeout 240 ./$t) >$L/$t.log 2>&1
    echo "$t exit $? $(grep -E 'PASSED|FAILED' $L/$t.log | head -2 | tr '\n' ' ')"
done
grep -E "ERROR|LINE|did not run|wrong kernel" $L/*.log | head
say d2d
d2d=$($PY -c "
import time, torch
n = 1 << 28
x = torch.empty(n, dtype=torch.int32, device='cuda'); y = torch.empty_like(x); y.copy_(x); torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(10): y.copy_(x)
torch.cuda.synchronize(); print(round(2 * 4 * n / ((time.perf_counter() - t0) / 10) / 1e9, 1))")
echo "d2d $d2d GB/s"
say "gguf 8B Q4_K_M"
while ! grep -q exit $L/make.log 2>/dev/null; do sleep 1; done; tail -1 $L/make.log
./bin/quantize $G-f16.gguf $G-q4_K_M.gguf q4_K_M --threads "$(nproc)" >$L/quant.log 2>&1 || { tail -3 $L/quant.log; exit 1; }
rm -f $G-f16.gguf
V=$($PY -c "import gguf; r = gguf.GGUFReader('$G-q4_K_M.gguf'); print(len(r.fields['tokenizer.ggml.tokens'].data))")
ids=$($PY -c "import random; random.seed(0); print(','.join(str(random.randrange($V // 100, $V)) for _ in range(512)))")
./bin/vllm run --device cuda --model $G-q4_K_M.gguf --prompt-ids "$ids" --max-tokens 256 --ignore-eos --temperature 0 \
    >/dev/null 2>$L/run.err
dec=$(rate decode <$L/run.err)
bytes=$($PY scripts/gguf_step_bytes.py $G-q4_K_M.gguf)
$PY -c "d, b, c = float('${dec:-0}'), $bytes, float('${d2d:-0}' or 0); r = c * 1e9 / b if c else 0
print(f'8B Q4_K_M batch-1 decode {d:.1f} tok/s; {b / 1e9:.3f} GB/step; d2d {c:.0f} GB/s (same run) -> roofline {r:.1f} tok/s; fraction {d / r if r else 0:.3f}')"
for c in 16 32 64; do
    for k in dflt int8 copy; do
        env $(case $k in int8) echo VLLM_CUDA_MMQ=int8;; copy) echo VLLM_CUDA_MMQ=0;; *) echo X=1;; esac) \
            ./bin/vllm bench --device cuda --model $G-q4_K_M.gguf --num-prompts $c --input-len 512 --output-len 128 \
            --concurrency $c --max-num-seqs $c --max-num-batched-tokens 16384 >$L/b_c${c}_$k.log 2>&1
    done
    echo "8B Q4_K_M conc $c: default $(tp $L/b_c${c}_dflt.log); int8 $(tp $L/b_c${c}_int8.log); copy $(tp $L/b_c${c}_copy.log)"
done
say "async == sync (GGUF)"
(cd bin && VLLM_TEST_DEVICE=cuda VLLM_TEST_ASYNC_MODEL=$G-q4_K_M.gguf timeout 300 ./test_engine_async_64) >$L/async64.log 2>&1
echo "test_engine_async_64 exit $?: $(grep -E 'async == sync|FAILED|request [0-9]+ ' $L/async64.log | head -3)"
say done
