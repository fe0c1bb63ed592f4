"""Parity of `vllm tokenize` with HF `tokenizers` on real tokenizers.

The five tokenizer.json files in ../shared/tokenizers (xz) and the two
llama.cpp vocab GGUFs are checked over a multilingual corpus: ids (with and
without special tokens), pieces, decode with and without skipping special
tokens, and the streaming detokenizer (pieces pushed one id at a time must
concatenate to the full decode). `vllm tokenize --jsonl` runs the whole
corpus in one process.
"""
import json
import lzma
import pathlib
import random
import subprocess

import pytest

tokenizers = pytest.importorskip("tokenizers")

MODELS = ["qwen3", "llama3_1", "gemma3", "llama2", "deepseek_v3"]

CORPUS = [
    "",
    " ",
    "  ",
    "Hello world",
    "Hello, world! How are you today?",
    " leading space",
    "trailing space ",
    "   three leading and trailing   ",
    "multiple     spaces    between words",
    "tabs\tand\t\ttabs",
    "newlines\nand\n\nmore\n\n\nnewlines\r\nwindows\r\n",
    "\n\n\n",
    "\t \n \t",
    "Ünïcödé àccénts: café, naïve, résumé, Ångström, ﬁ ligature, Ａｂｃ full width",
    "Straße Œuvre ÆØÅ æøå ß ÿ İstanbul ıi",
    "e\u0301 (e + combining acute) vs é; A\u030a vs Å",
    "中文测试：你好，世界！这是一个测试句子。",
    "日本語のテキスト、カタカナ、ひらがな。東京タワー",
    "한국어 텍스트입니다. 안녕하세요!",
    "Русский текст: Привет, мир! Ёлка.",
    "العربية: مرحبا بالعالم",
    "עברית: שלום עולם",
    "हिन्दी: नमस्ते दुनिया",
    "ไทย: สวัสดีชาวโลก",
    "Ελληνικά: Γειά σου Κόσμε",
    "Tiếng Việt: Xin chào thế giới",
    "emoji 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ 🇫🇷🇯🇵",
    "🤖🧠💡🚀",
    "def foo(x):\n    return x ** 2  # comment\n\nclass Bar:\n\tpass\n",
    "int main(void) { printf(\"%d\\n\", 42); return 0; }",
    "for (let i = 0; i < 10; i++) { console.log(`i=${i}`); }",
    "<html><body><p class=\"x\">Hi &amp; bye</p></body></html>",
    "SELECT * FROM users WHERE id = 1;",
    "{\"key\": [1, 2.5, -3e10, true, null], \"nested\": {\"a\": \"b\"}}",
    "1 12 123 1234 12345 123456 1234567 12345678 123456789 1234567890",
    "3.14159265358979 -42 +7 1e-9 0x1F 1,000,000 ٣٤٥ ०१२ ½ ² Ⅻ",
    "I'm you're he's we've they'll I'd CAN'T Won'T",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "<s>hello</s> <s> </s>",
    "<|eot_id|><|begin_of_text|><|start_header_id|>system<|end_header_id|>",
    "<bos><eos><start_of_turn>model\nhi<end_of_turn>",
    "<｜begin▁of▁sentence｜>hi<｜end▁of▁sentence｜><｜User｜>q<｜Assistant｜>",
    "<think>\nreasoning\n</think>\n\nanswer",
    "<|im_start|",
    "<unk> <pad> <mask>",
    "▁ already has metaspace ▁▁",
    "Ġ and Ċ look like byte-level chars",
    "a" * 300,
    "ab " * 100,
    "The quick brown fox jumps over the lazy dog. " * 5,
    "!!!???...,,,;;;:::---___***",
    "mixed中文and English混合text",
    "zero\u200bwidth\u200djoiner\ufeffbom",
    "\u00a0nbsp\u2003em space\u3000ideographic",
    "control \x01\x02\x7f chars",
    "a\u0085b\u2028c\u2029d",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕞𝕒𝕥𝕙 𝟙𝟚𝟛",
    "\U0001F600\U0010FFFF\U00020000",
]


def _corpus():
    rng = random.Random(1234)
    pool = "".join(CORPUS[3:40])
    extra = []
    for _ in range(20):
        n = rng.randint(1, 80)
        extra.append("".join(rng.choice(pool) for _ in range(n)))
    return CORPUS + extra


@pytest.fixture(scope="module")
def tokdirs(shared_dir, tmp_path_factory):
    """Decompressed tokenizer folders (tmp), keyed by model name."""
    out = {}
    root = tmp_path_factory.mktemp("tokenizers")
    for m in MODELS:
        src = shared_dir / "tokenizers" / m
        if not (src / "tokenizer.json.xz").exists():
            continue
        dst = root / m
        dst.mkdir()
        for name in ("tokenizer.json", "tokenizer_config.json"):
            xz = src / (name + ".xz")
            if xz.exists():
                (dst / name).write_bytes(lzma.decompress(xz.read_bytes()))
        out[m] = dst
    return out


def run_jsonl(vllm_bin, model, lines, tmp_path, extra=()):
    f = tmp_path / "in.jsonl"
    f.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    r = subprocess.run([str(vllm_bin), "tokenize", "--model", str(model), "--jsonl", str(f), *extra],
                       capture_output=True, timeout=600)
    assert r.returncode == 0, r.stderr.decode()
    # not splitlines(): U+0085/U+2028 inside strings are line breaks to it
    out = [json.loads(l) for l in r.stdout.decode("utf-8").split("\n") if l]
    assert len(out) == len(lines)
    return out


def check_parity(vllm_bin, model_path, oracle, tmp_path):
    corpus = _corpus()
    got = run_jsonl(vllm_bin, model_path, corpus, tmp_path)
    got_ns = run_jsonl(vllm_bin, model_path, corpus, tmp_path, ["--no-special"])
    for text, g, gns in zip(corpus, got, got_ns):
        enc = oracle.encode(text)
        assert g["ids"] == enc.ids, f"ids differ for {text!r}"
        assert g["pieces"] == enc.tokens, f"pieces differ for {text!r}"
        assert gns["ids"] == oracle.encode(text, add_special_tokens=False).ids, f"ids (no special) for {text!r}"
        full = oracle.decode(enc.ids, skip_special_tokens=False)
        assert g["decoded"] == full, f"decode differs for {text!r}"
        assert g["decoded_skip"] == oracle.decode(enc.ids, skip_special_tokens=True), text
        # incremental detokenization concatenates to the full decode
        assert g["stream"] == g["decoded"], text
        assert g["stream_skip"] == g["decoded_skip"], text
    return got


def check_decode_ids(vllm_bin, model_path, oracle, tmp_path, vocab_size):
    """Arbitrary id sequences (byte tokens that do not form UTF-8, specials)."""
    rng = random.Random(7)
    seqs = [[rng.randrange(vocab_size) for _ in range(rng.randint(1, 40))] for _ in range(60)]
    byte_ids = [oracle.token_to_id(f"<0x{b:02X}>") for b in (0xE4, 0xBD, 0xA0, 0xF0, 0x9F, 0x98, 0x80, 0x41)]
    if all(i is not None for i in byte_ids):
        seqs += [byte_ids, byte_ids[:2], byte_ids[3:6] + byte_ids[:3], byte_ids[::-1]]
    got = run_jsonl(vllm_bin, model_path, seqs, tmp_path)
    for ids, g in zip(seqs, got):
        assert g["decoded"] == oracle.decode(ids, skip_special_tokens=False), ids
        assert g["decoded_skip"] == oracle.decode(ids, skip_special_tokens=True), ids
        assert g["stream"] == g["decoded"], ids
        assert g["stream_skip"] == g["decoded_skip"], ids


@pytest.mark.parametrize("model", MODELS)
def test_tokenizer_json_parity(vllm_bin, tokdirs, model, tmp_path):
    if model not in tokdirs:
        pytest.skip(f"{model} not in ../shared")
    oracle = tokenizers.Tokenizer.from_file(str(tokdirs[model] / "tokenizer.json"))
    check_parity(vllm_bin, tokdirs[model], oracle, tmp_path)
    check_decode_ids(vllm_bin, tokdirs[model], oracle, tmp_path, oracle.get_vocab_size())


def _read_gguf_metadata(path, full_arrays=()):
    """Stand-in for transformers' GGUF metadata reader (which imports torch,
    absent in CI), built on the `gguf` package: scalars as Python values,
    arrays as lists (every array in full; the tokenizer builder needs the
    scores too)."""
    import gguf
    r = gguf.GGUFReader(str(path))
    meta = {}
    for key, f in r.fields.items():
        t = f.types[0] if f.types else None
        if t == gguf.GGUFValueType.ARRAY:
            meta[key] = [f.contents(i) for i in range(len(f.data))]
        else:
            meta[key] = f.contents()
    return meta, None


def _gguf_oracle(path):
    """HF tokenizer for a vocab GGUF through transformers' own GGUF tokenizer
    conversion (convert_gguf_tokenizer), with its metadata reader swapped for
    one that needs no torch.

    For the SentencePiece vocab the pipeline is set to Llama-2's legacy
    tokenizer.json (Prepend + Replace normalizer, no pre-tokenizer), which
    is what sentencepiece and llama.cpp do (a "▁" prefix on every text
    segment, spaces kept)."""
    import sys
    import types
    pytest.importorskip("gguf")
    pytest.importorskip("transformers")
    from tokenizers import normalizers
    fake = types.ModuleType("transformers.integrations.gguf.reader")
    fake.read_gguf_metadata = _read_gguf_metadata
    saved = sys.modules.get(fake.__name__)
    sys.modules[fake.__name__] = fake
    try:
        from transformers.integrations.gguf.gguf_tokenizer_mapping import (convert_gguf_tokenizer,
                                                                           get_gguf_tokenizer)
        arch, tdict, tconf = get_gguf_tokenizer(str(path))
        bt, _ = convert_gguf_tokenizer(arch, tdict)
    finally:
        if saved is None:
            del sys.modules[fake.__name__]
        else:
            sys.modules[fake.__name__] = saved
    if "spm" in path.name:
        bt.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        bt.pre_tokenizer = None
    # BOS/EOS as the tokenizer class would add them (add_bos_token /
    # add_eos_token from the file, which AutoTokenizer applies on top).
    from tokenizers import processors
    bos, eos = tconf.get("bos_token"), tconf.get("eos_token")
    add_bos, add_eos = bool(tconf.get("add_bos_token")), bool(tconf.get("add_eos_token"))
    if add_bos or add_eos:
        single = (f"{bos}:0 " if add_bos else "") + "$A:0" + (f" {eos}:0" if add_eos else "")
        pair = single + (f" {bos}:1 " if add_bos else " ") + "$B:1" + (f" {eos}:1" if add_eos else "")
        special = [(t, bt.token_to_id(t)) for t, on in ((bos, add_bos), (eos, add_eos)) if on]
        bt.post_processor = processors.TemplateProcessing(single=single, pair=pair, special_tokens=special)
    return bt


@pytest.mark.parametrize("name", ["ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf"])
def test_gguf_vocab_parity(vllm_bin, shared_dir, name, tmp_path):
    path = shared_dir / "models" / "ggml-vocab" / name
    if not path.exists():
        pytest.skip(f"{name} not in ../shared")
    oracle = _gguf_oracle(path)
    check_parity(vllm_bin, path, oracle, tmp_path)
    check_decode_ids(vllm_bin, path, oracle, tmp_path, oracle.get_vocab_size())


def test_cli_text_mode(vllm_bin, tokdirs):
    if "qwen3" not in tokdirs:
        pytest.skip("qwen3 not in ../shared")
    r = subprocess.run([str(vllm_bin), "tokenize", "--model", str(tokdirs["qwen3"]), "Hello <|im_end|>"],
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    oracle = tokenizers.Tokenizer.from_file(str(tokdirs["qwen3"] / "tokenizer.json"))
    enc = oracle.encode("Hello <|im_end|>")
    assert out == {"ids": enc.ids, "pieces": enc.tokens}


def test_cli_errors(vllm_bin, tmp_path):
    r = subprocess.run([str(vllm_bin), "tokenize", "--model", str(tmp_path / "missing"), "x"], capture_output=True)
    assert r.returncode == 1 and b"missing" in r.stderr
    r = subprocess.run([str(vllm_bin), "tokenize", "--bogus-flag", "x"], capture_output=True)
    assert r.returncode == 2
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "tokenizer.json").write_text('{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [')
    r = subprocess.run([str(vllm_bin), "tokenize", "--model", str(bad), "x"], capture_output=True)
    assert r.returncode == 1 and b"tokenizer.json" in r.stderr


CHAT_MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Hi there! 你好 <s> 😀"},
    {"role": "assistant", "content": "Hello! How can I help?"},
    {"role": "user", "content": "What is 2+2?\n\nAnswer briefly."},
]


@pytest.mark.parametrize("model", ["qwen3", "llama3_1", "gemma3", "deepseek_v3"])
@pytest.mark.parametrize("gen_prompt", [True, False])
def test_cli_chat_parity(vllm_bin, tokdirs, model, gen_prompt, tmp_path):
    """--messages renders like transformers' apply_chat_template and encodes
    the prompt without adding special tokens again (tokenize=True)."""
    transformers = pytest.importorskip("transformers")
    if model not in tokdirs:
        pytest.skip(f"{model} not in ../shared")
    msgs = tmp_path / "messages.json"
    msgs.write_text(json.dumps(CHAT_MESSAGES), encoding="utf-8")
    cmd = [str(vllm_bin), "tokenize", "--model", str(tokdirs[model]), "--messages", str(msgs)]
    if not gen_prompt:
        cmd.append("--no-generation-prompt")
    r = subprocess.run(cmd, capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode()
    got = json.loads(r.stdout)
    tok = transformers.AutoTokenizer.from_pretrained(str(tokdirs[model]))
    want_prompt = tok.apply_chat_template(CHAT_MESSAGES, tokenize=False, add_generation_prompt=gen_prompt)
    want_ids = tok.apply_chat_template(CHAT_MESSAGES, tokenize=True, add_generation_prompt=gen_prompt)
    if hasattr(want_ids, "keys"):
        want_ids = want_ids["input_ids"]
    assert got["prompt"] == want_prompt
    assert got["ids"] == list(want_ids)


def test_cli_chat_errors(vllm_bin, tokdirs, tmp_path):
    if "llama2" not in tokdirs or "qwen3" not in tokdirs:
        pytest.skip("tokenizers not in ../shared")
    msgs = tmp_path / "m.json"
    msgs.write_text(json.dumps(CHAT_MESSAGES[1:2]))
    # llama2's tokenizer_config has no chat template
    r = subprocess.run([str(vllm_bin), "tokenize", "--model", str(tokdirs["llama2"]), "--messages", str(msgs)],
                       capture_output=True)
    assert r.returncode == 1 and b"chat template" in r.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = subprocess.run([str(vllm_bin), "tokenize", "--model", str(tokdirs["qwen3"]), "--messages", str(bad)],
                       capture_output=True)
    assert r.returncode == 1 and b"bad.json" in r.stderr
    r = subprocess.run([str(vllm_bin), "tokenize", "--model", str(tokdirs["qwen3"]), "--messages", str(msgs),
                        "--template-kwargs", "[1]"], capture_output=True)
    assert r.returncode == 1
