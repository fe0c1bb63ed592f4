#!/usr/bin/env bash
# gpu_s17b.sh — session 17, call 2 (nvidia-h200, ~4 min): source-level
# profiles (Nsight Compute --set full, per-SASS-instruction stall samples
# by tools/ncu_sass_top.py) of main after the s16-producer merge:
#   - the 0.6B prefill's own kernels in `vllm run` (2048-token prompt):
#     k_flash_fa3 (after the producer change), k_norm_vec (ADD_RMSNORM of
#     2048 rows), k_glu, k_qk_rope_store_pf;
#   - the 8B decode GEMVs (`vllm run` 512 + 64, graphs): the three
#     k_gemv_half_u instances (KS 1 / KS 4, the GLU one) — call 1's regex
#     did not match the demangled names.
# Make: bash scripts/gpu_snap.sh s17b vllm; run carry [".gpu-snap-s17b"]
#   "cd .gpu-snap-s17b && OUT=$OUT bash scripts/gpu_s17b.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s17b
gpu_bin
gpu_models
gpu_model_wait 6
ids6=$($PY -c "import random; random.seed(1); print(','.join(str(random.randrange(1000, 100000)) for _ in range(2048)))")
run6="./bin/vllm run --device cuda --model $M6 --prompt-ids $ids6 --max-tokens 2 --ignore-eos --temperature 0"
say "0.6B prefill kernels"
gpu_ncu_src fa3 "k_flash_fa3" 20 1 $run6
gpu_ncu_src norm "k_norm_vec" 30 1 $run6
gpu_ncu_src glu "k_glu" 20 1 $run6
gpu_ncu_src rope "k_qk_rope_store_pf" 20 1 $run6
gpu_model_wait 8
ids8=$($PY -c "import random; random.seed(0); print(','.join(str(random.randrange(1000, 100000)) for _ in range(512)))")
run8="./bin/vllm run --device cuda --model $M8 --prompt-ids $ids8 --max-tokens 64 --ignore-eos --temperature 0"
say "8B decode GEMVs"
gpu_ncu_src gemv_ks1 "k_gemv_half_u<.*\(int\)1, \(int\)2" 300 2 $run8
gpu_ncu_src gemv_ks4 "k_gemv_half_u<.*\(int\)4, \(int\)2, \(bool\)0" 300 1 $run8
gpu_ncu_src gemv_glu "k_gemv_half_u<.*\(bool\)1" 300 1 $run8
say done
