#!/usr/bin/env bash
# gpu_s19i.sh — session 19, call 9 (nvidia-h200, ~3 min): the HF oracle
# for sliding windows in the wgmma prefill kernels. The 8B-shaped random
# checkpoint as MistralForCausalLM with sliding_window 256 (HF applies the
# window in its sdpa mask: key j visible to row i when i - j < 256, as
# ours); a 2048-token prompt (the window active over almost all of it) and
# 64 greedy tokens by this build (bin/vllm: windowed k_flash_fa3 in the
# prefill) and by main before it (bin/vllm_old: the mma.sync kernel), each
# checked by gpu_hf.py hf (teacher-forced HF on our sequence: each token
# HF's top one or within 0.5 nat of it).
#   the call-8 snapshot (.gpu-snap-s19h: bin.txz + vllm_old) with this script:
#   cp scripts/gpu_s19i.sh .gpu-snap-s19h/scripts/
#   run carry [".gpu-snap-s19h"], "cd .gpu-snap-s19h && OUT=$OUT bash scripts/gpu_s19i.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s19i
gpu_bin
cp vllm_old bin/vllm_old
[ -f $M8/config.json ] || $PY scripts/gpu_hf.py make --shape llama-8b --out $M8 >$L/make8.log 2>&1
echo "make 8B exit $?"
MW=/tmp/rand-mistral-8b-w256
mkdir -p $MW && for f in $M8/*; do [ "$(basename $f)" = config.json ] || ln -sf $f $MW/; done
$PY -c "import json; c = json.load(open('$M8/config.json')); c.update(model_type='mistral', architectures=['MistralForCausalLM'], sliding_window=256); json.dump(c, open('$MW/config.json', 'w'))"
$PY -c "import json, random; random.seed(3); V = json.load(open('$MW/config.json'))['vocab_size'];
print(' '.join(str(random.randrange(V // 100, min(V, 100000))) for _ in range(2048)))" >$L/p2048.ids
for b in vllm vllm_old; do
    timeout 120 ./bin/$b run --device cuda --model $MW --prompt-ids "$(tr ' ' ',' <$L/p2048.ids)" --max-tokens 64 \
        --ignore-eos --temperature 0 --print-ids >$L/ours_$b.ids 2>$L/ours_$b.err
    echo "$b run exit $?: $(wc -w <$L/ours_$b.ids) ids"
    timeout 200 $PY scripts/gpu_hf.py hf --model $MW --prompt-ids $L/p2048.ids --ours $L/ours_$b.ids --max-tokens 64 \
        >$L/hf_$b.json 2>$L/hf_$b.err
    echo "gpu_hf.py hf ($b) exit $?: $(cat $L/hf_$b.json)"
    tail -3 $L/hf_$b.err | grep -iE "error|Traceback" || true
done
say done
