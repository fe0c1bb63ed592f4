#!/usr/bin/env bash
# gpu_s19a.sh — prepared in session 18 for session 19's first call
# (nvidia-h200, ~4 min), on main as merged in session 18:
#   0. test_cuda_gemm and test_cuda_sample: both cluster kernels now launch
#      through cuda_launch_cluster (session 18's review mend, not run on
#      the device before), plus memcheck of test_gemm_glu_fused;
#   1. 8B concurrency-64 serving (1024 / 128,
#      chunked prefill steps of up to 8192 rows take the fused GEMM-GLU by
#      default) default vs VLLM_CUDA_GEMM_GLU=0, alternated twice;
#   2. ncu source profiles (gpu_ncu_src) of the merged k_gemm_glu in the
#      engine: the 8B prefill (default) and the 0.6B prefill (forced, =1,
#      where it is 53.7 us vs nvjet 36.8 + k_glu 11.9): which SASS lines
#      hold the stall samples (the mbarrier waits, the HGMMA issue, the
#      epilogue) and what keeps the tensor pipe at 81% (nvjet 93%).
#   bash scripts/gpu_snap.sh s19a vllm test_cuda_gemm test_cuda_sample
#   run carry [".gpu-snap-s19a"], "cd .gpu-snap-s19a && OUT=$OUT bash scripts/gpu_s19a.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s19a
gpu_bin
gpu_models
say "tests: test_cuda_gemm, test_cuda_sample"
gpu_test tg 240 ./test_cuda_gemm
gpu_test ts 240 ./test_cuda_sample
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
(cd bin && VLLM_TEST_ONLY=test_gemm_glu_fused VLLM_CUDA_SPEED=0 timeout 120 $SAN --tool memcheck ./test_cuda_gemm) >$L/mc.log 2>&1
echo "memcheck exit $? $(grep -E 'ERROR SUMMARY|PASSED|FAILED' $L/mc.log | tr '\n' ' ')"
gpu_model_wait 6
gpu_model_wait 8
say "8B conc 64: default / =0"
for r in 1 2; do
    for m in d 0; do
        env $([ $m = 0 ] && echo VLLM_CUDA_GEMM_GLU=0) timeout 60 ./bin/vllm bench --device cuda --model $M8 --num-prompts 128 \
            --input-len 1024 --output-len 128 --concurrency 64 --max-num-seqs 64 --max-num-batched-tokens 8192 \
            --gpu-memory-utilization 0.9 >$L/c64_${m}_$r.log 2>&1
        echo "round $r $m: $(grep -E 'Output token throughput|Mean TTFT|Mean TPOT' $L/c64_${m}_$r.log | tr -s ' ' | tr '\n' ';')"
    done
done
for mdl in 8 6; do
    eval M=\$M$mdl
    ids=$($PY -c "import json, random; random.seed(1); V = json.load(open('$M/config.json'))['vocab_size'];
print(','.join(str(random.randrange(V // 100, min(V, 100000))) for _ in range(2048)))")
    say "ncu source profile: k_gemm_glu in the model-$mdl prefill"
    VLLM_CUDA_GEMM_GLU=1 gpu_ncu_src gg$mdl "k_gemm_glu" 5 1 ./bin/vllm run --device cuda --model $M --prompt-ids $ids \
        --max-tokens 1 --ignore-eos --temperature 0
done
say done
