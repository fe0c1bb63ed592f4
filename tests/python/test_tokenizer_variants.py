"""Pipeline pieces the five real tokenizers do not use, checked against HF
`tokenizers`: each variant rewrites a real tokenizer.json (normalizer,
pre-tokenizer, decoder, post-processor, added-token flags) and compares
`vllm tokenize --jsonl` with tokenizers.Tokenizer.from_str on a corpus."""
import copy
import json
import lzma

import pytest

from test_tokenizer import _corpus, run_jsonl

tokenizers = pytest.importorskip("tokenizers")

SPM_DECODER = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False}


def _split(pattern, behavior, invert=False, regex=True):
    return {"type": "Split", "pattern": {"Regex" if regex else "String": pattern}, "behavior": behavior,
            "invert": invert}


def _bytelevel(prefix=False, regex=False):
    return {"type": "ByteLevel", "add_prefix_space": prefix, "trim_offsets": True, "use_regex": regex}


VARIANTS = {
    # SentencePiece via Metaspace instead of Prepend/Replace
    "metaspace_first": ("llama2", {
        "normalizer": None,
        "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False},
        "decoder": SPM_DECODER}),
    "metaspace_always_split": ("llama2", {
        "normalizer": None,
        "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
        "decoder": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}}),
    "metaspace_never": ("llama2", {
        "normalizer": {"type": "NFKD"},
        "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "never", "split": True},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "never", "split": True},
            {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}}),
    "norm_digits_punct": ("qwen3", {
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "NFKC"}, {"type": "Lowercase"}, {"type": "Strip", "strip_left": True, "strip_right": True}]},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True}, {"type": "Punctuation", "behavior": "Isolated"},
            _bytelevel(prefix=True, regex=True)]}}),
    "wssplit_replace": ("qwen3", {
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Replace", "pattern": {"Regex": "\\d"}, "content": "#"},
            {"type": "Prepend", "prepend": "!"}, {"type": "NFD"}]},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "WhitespaceSplit"}, {"type": "Digits", "individual_digits": False}, _bytelevel()]}}),
    "whitespace": ("qwen3", {
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Whitespace"}, _bytelevel()]}}),
    "split_behaviors": ("deepseek_v3", {
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            _split("\\s+", "MergedWithNext"), _split("[aeiou]", "MergedWithPrevious"),
            _split("\\p{N}+", "Contiguous"), _split(",", "Removed", regex=False),
            _split("\\p{Han}+", "Isolated", invert=True), _bytelevel()]},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<｜begin▁of▁sentence｜>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}},
                                      {"SpecialToken": {"id": "<｜end▁of▁sentence｜>", "type_id": 0}}],
                           "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {
                               "<｜begin▁of▁sentence｜>": {"id": "<｜begin▁of▁sentence｜>", "ids": [0],
                                                          "tokens": ["<｜begin▁of▁sentence｜>"]},
                               "<｜end▁of▁sentence｜>": {"id": "<｜end▁of▁sentence｜>", "ids": [1],
                                                        "tokens": ["<｜end▁of▁sentence｜>"]}}}}),
    "roberta_post": ("qwen3", {
        "post_processor": {"type": "RobertaProcessing", "sep": ["<|im_end|>", 151645],
                           "cls": ["<|im_start|>", 151644], "trim_offsets": True, "add_prefix_space": False}}),
}


def _added_flags(j):
    """Turn on lstrip/rstrip/single_word/normalized on some added tokens."""
    for a in j["added_tokens"]:
        if a["content"] == "<|im_start|>":
            a["lstrip"] = True
        elif a["content"] == "<|im_end|>":
            a["rstrip"] = True
        elif a["content"] == "<think>":
            a["single_word"] = True
        elif a["content"] == "</think>":
            a["normalized"] = True
            a["lstrip"] = a["rstrip"] = True
    j["normalizer"] = {"type": "Lowercase"}
    # a normalized added token not in the model vocab (ids of contents the
    # model knows are taken from the model by tokenizers)
    j["added_tokens"].append({"id": 151669, "content": "hellothere", "single_word": True, "lstrip": False,
                              "rstrip": False, "normalized": True, "special": False})
    return j


@pytest.fixture(scope="module")
def base_json(shared_dir):
    cache = {}

    def get(name):
        if name not in cache:
            xz = shared_dir / "tokenizers" / name / "tokenizer.json.xz"
            if not xz.exists():
                pytest.skip(f"{name} not in ../shared")
            cache[name] = json.loads(lzma.decompress(xz.read_bytes()))
        return copy.deepcopy(cache[name])
    return get


EXTRA = ["Hello hello HELLO hello", "HelloThere hellothere xhellothere hellotherex", "x<|im_start|>  y  <|im_end|>  z", "a<think>b <think> c",
         " </think> ,</think>,", "1,234,567 and 89", "ＡＢＣ ｆｕｌｌ", "hello,world hello"]


@pytest.mark.parametrize("variant", sorted(VARIANTS) + ["added_flags"])
def test_variant_parity(vllm_bin, base_json, variant, tmp_path):
    if variant == "added_flags":
        j = _added_flags(base_json("qwen3"))
    else:
        base, changes = VARIANTS[variant]
        j = base_json(base)
        j.update(changes)
    text = json.dumps(j, ensure_ascii=False)
    try:
        oracle = tokenizers.Tokenizer.from_str(text)
    except Exception as e:  # the installed tokenizers may not know a field
        pytest.skip(f"tokenizers cannot load variant {variant}: {e}")
    d = tmp_path / variant
    d.mkdir()
    (d / "tokenizer.json").write_text(text, encoding="utf-8")
    corpus = _corpus() + EXTRA
    got = run_jsonl(vllm_bin, d, corpus, tmp_path)
    for s, g in zip(corpus, got):
        enc = oracle.encode(s)
        assert g["ids"] == enc.ids, f"{variant}: ids differ for {s!r}"
        assert g["decoded"] == oracle.decode(enc.ids, skip_special_tokens=False), f"{variant}: {s!r}"
        assert g["decoded_skip"] == oracle.decode(enc.ids, skip_special_tokens=True), f"{variant}: {s!r}"
        assert g["stream"] == g["decoded"] and g["stream_skip"] == g["decoded_skip"], f"{variant}: {s!r}"
