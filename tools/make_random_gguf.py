#!/usr/bin/env python3
"""Write a random-weight Llama-architecture GGUF of a real shape, for speed work.

Weights ~ N(0, 0.02) (norms 1), quantized with the `gguf` package's
reference quantizers (bf16: round to nearest even, as the package's). No tokenizer beyond a byte-level placeholder vocabulary
(benchmarks feed token ids).

    python tools/make_random_gguf.py --shape llama-1b --qtype q4_0 --out models/rand-llama-1b-q4_0.gguf

Shapes:
  llama-1b  Llama-3.2-1B-like: hidden 2048, 16 layers, 32 heads / 8 kv heads,
            ffn 8192, vocab 32000 (smaller vocabulary than Llama 3's 128256)
  tiny      hidden 256, 2 layers, 4/2 heads, ffn 512, vocab 1000
  llama-8b  Llama-3.1-8B-like: hidden 4096, 32 layers, 32 / 8 heads, ffn 14336,
            vocab 128256 (f16: 16 GB; made on the GPU machine for speed work)
"""
import argparse
import sys

import numpy as np

try:
    import gguf
except ImportError:
    sys.exit("needs the `gguf` package (pip install gguf)")

SHAPES = {
    "llama-1b": dict(hidden=2048, layers=16, heads=32, kv=8, ff=8192, vocab=32000, ctx=4096),
    "tiny": dict(hidden=256, layers=2, heads=4, kv=2, ff=512, vocab=1000, ctx=1024),
    "llama-8b": dict(hidden=4096, layers=32, heads=32, kv=8, ff=14336, vocab=128256, ctx=8192),
}
QTYPES = {
    "q4_0": gguf.GGMLQuantizationType.Q4_0,
    "q4_1": gguf.GGMLQuantizationType.Q4_1,
    "q8_0": gguf.GGMLQuantizationType.Q8_0,
    "f16": gguf.GGMLQuantizationType.F16,
    "bf16": gguf.GGMLQuantizationType.BF16,
    "f32": gguf.GGMLQuantizationType.F32,
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", choices=SHAPES, default="llama-1b")
    ap.add_argument("--qtype", choices=QTYPES, default="q4_0")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    s = SHAPES[a.shape]
    qt = QTYPES[a.qtype]
    rng = np.random.default_rng(a.seed)
    hd = s["hidden"] // s["heads"]

    w = gguf.GGUFWriter(a.out, "llama")
    w.add_context_length(s["ctx"])
    w.add_embedding_length(s["hidden"])
    w.add_block_count(s["layers"])
    w.add_feed_forward_length(s["ff"])
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv"])
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(500000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(s["vocab"])
    w.add_tokenizer_model("llama")
    toks = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    toks += [f"tok{i}" for i in range(s["vocab"] - len(toks))]
    w.add_token_list(toks)
    w.add_token_scores([0.0] * len(toks))
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * (len(toks) - 259))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)

    def mat(name, rows, cols, quant=True):
        x = (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float32)
        t = qt if quant else gguf.GGMLQuantizationType.F32
        if t == gguf.GGMLQuantizationType.F16:
            w.add_tensor(name, x.astype(np.float16))
        elif t == gguf.GGMLQuantizationType.F32:
            w.add_tensor(name, x)
        else:
            w.add_tensor(name, gguf.quants.quantize(x, t), raw_dtype=t)

    def norm(name, n):
        w.add_tensor(name, np.ones(n, dtype=np.float32))

    d, ff, kvd = s["hidden"], s["ff"], s["kv"] * hd
    mat("token_embd.weight", s["vocab"], d)
    for l in range(s["layers"]):
        p = f"blk.{l}."
        norm(p + "attn_norm.weight", d)
        mat(p + "attn_q.weight", d, d)
        mat(p + "attn_k.weight", kvd, d)
        mat(p + "attn_v.weight", kvd, d)
        mat(p + "attn_output.weight", d, d)
        norm(p + "ffn_norm.weight", d)
        mat(p + "ffn_gate.weight", ff, d)
        mat(p + "ffn_up.weight", ff, d)
        mat(p + "ffn_down.weight", d, ff)
    norm("output_norm.weight", d)
    mat("output.weight", s["vocab"], d)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(a.out)


if __name__ == "__main__":
    main()
