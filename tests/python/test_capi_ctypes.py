"""libvllm.so loaded the way a foreign host (LocalAI through purego) loads
it: dlopen + structs declared from vllm.cpp's ABI v5 layout, not from our
header. Runs stories260K (converted to GGUF with tools/llama2c_convert)."""
import ctypes as C
import json

import pytest

from test_stories260k import EXPECTED


class ModelParams(C.Structure):  # vllm.cpp v5 vllm_model_params
    _fields_ = [("model_path", C.c_char_p), ("tokenizer_config_path", C.c_char_p),
                ("block_size", C.c_int32), ("num_blocks", C.c_int32), ("max_model_len", C.c_int32),
                ("max_num_seqs", C.c_int32), ("tool_parser", C.c_char_p), ("reasoning_parser", C.c_char_p)]


class SamplingParams(C.Structure):  # vllm.cpp v5 vllm_sampling_params
    _fields_ = [("temperature", C.c_float), ("top_p", C.c_float), ("top_k", C.c_int32), ("min_p", C.c_float),
                ("max_tokens", C.c_int32), ("seed", C.c_uint64), ("has_seed", C.c_int32),
                ("presence_penalty", C.c_float), ("frequency_penalty", C.c_float),
                ("repetition_penalty", C.c_float), ("min_tokens", C.c_int32), ("ignore_eos", C.c_int32),
                ("stop", C.POINTER(C.c_char_p)), ("n_stop", C.c_int32), ("structured_json", C.c_char_p),
                ("structured_regex", C.c_char_p), ("structured_choice", C.POINTER(C.c_char_p)),
                ("n_structured_choice", C.c_int32), ("structured_grammar", C.c_char_p),
                ("structured_json_object", C.c_int32)]


class Completion(C.Structure):
    _fields_ = [("text", C.c_void_p), ("finish_reason", C.c_char_p), ("prompt_tokens", C.c_int32),
                ("completion_tokens", C.c_int32)]


CB = C.CFUNCTYPE(C.c_bool, C.c_char_p, C.c_bool, C.c_void_p)


@pytest.fixture(scope="module")
def lib(build_dir):
    path = build_dir / "libvllm.so"
    if not path.exists():
        pytest.skip(f"no {path}")
    L = C.CDLL(str(path))
    L.vllm_model_params_default.restype = ModelParams
    L.vllm_sampling_params_default.restype = SamplingParams
    L.vllm_engine_load.argtypes = [C.POINTER(ModelParams), C.POINTER(C.c_void_p)]
    L.vllm_complete.argtypes = [C.c_void_p, C.c_char_p, C.POINTER(SamplingParams), C.POINTER(Completion)]
    L.vllm_complete_stream.argtypes = [C.c_void_p, C.c_char_p, C.POINTER(SamplingParams), CB, C.c_void_p]
    L.vllm_complete_tokens.argtypes = [C.c_void_p, C.POINTER(C.c_int32), C.c_int32, C.POINTER(SamplingParams),
                                       C.POINTER(C.c_int32), C.c_int32, C.POINTER(C.c_int32),
                                       C.POINTER(Completion)]
    L.vllm_chat.argtypes = [C.c_void_p, C.c_char_p, C.POINTER(C.c_void_p)]
    L.vllm_string_free.argtypes = [C.c_void_p]
    L.vllm_completion_free.argtypes = [C.POINTER(Completion)]
    L.vllm_engine_free.argtypes = [C.c_void_p]
    L.vllm_last_error.restype = C.c_char_p
    L.vllm_version.restype = C.c_char_p
    return L


@pytest.fixture(scope="module")
def engine(lib, stories_gguf):
    gguf = stories_gguf
    mp = lib.vllm_model_params_default()
    assert (mp.block_size, mp.num_blocks, mp.max_model_len, mp.max_num_seqs) == (32, 256, 0, 8)
    mp.model_path = str(gguf).encode()
    mp.num_blocks = 16
    h = C.c_void_p()
    assert lib.vllm_engine_load(C.byref(mp), C.byref(h)) == 0, lib.vllm_last_error()
    yield h
    lib.vllm_engine_free(h)


def greedy(lib, n):
    sp = lib.vllm_sampling_params_default()
    assert (sp.temperature, sp.top_p, sp.max_tokens, sp.repetition_penalty) == (1.0, 1.0, 16, 1.0)
    sp.temperature, sp.max_tokens, sp.ignore_eos = 0.0, n, 1
    return sp


def test_abi(lib):
    assert lib.vllm_abi_version() == 5
    assert lib.vllm_version().decode().count(".") == 2


def test_tokens_from_bos(lib, engine):
    sp = greedy(lib, 33)
    prompt = (C.c_int32 * 1)(1)
    out = (C.c_int32 * 64)()
    n = C.c_int32()
    c = Completion()
    assert lib.vllm_complete_tokens(engine, prompt, 1, C.byref(sp), out, 64, C.byref(n), C.byref(c)) == 0
    assert list(out[:n.value]) == EXPECTED
    assert c.finish_reason == b"length" and c.completion_tokens == 33 and c.prompt_tokens == 1
    lib.vllm_completion_free(C.byref(c))


def test_complete_and_stream(lib, engine):
    sp = greedy(lib, 20)
    sp.ignore_eos = 0
    c = Completion()
    assert lib.vllm_complete(engine, b"Once upon a time", C.byref(sp), C.byref(c)) == 0
    text = C.string_at(c.text).decode()
    lib.vllm_completion_free(C.byref(c))
    assert text.startswith(", there was a little girl named Lily"), text
    parts, finals = [], []

    @CB
    def on_delta(delta, finished, user):
        parts.append(delta.decode())
        finals.append(finished)
        return True

    assert lib.vllm_complete_stream(engine, b"Once upon a time", C.byref(sp), on_delta, None) == 0
    assert "".join(parts) == text and finals[-1] and finals.count(True) == 1


def test_structured_refused(lib, engine):
    sp = greedy(lib, 4)
    sp.structured_regex = b"[a-z]+"
    c = Completion()
    assert lib.vllm_complete(engine, b"Hi", C.byref(sp), C.byref(c)) == 1
    assert b"structured_regex" in lib.vllm_last_error()


def test_chat(lib, engine):
    req = {"messages": [{"role": "user", "content": "Tell me a story"}], "max_tokens": 10, "temperature": 0}
    out = C.c_void_p()
    assert lib.vllm_chat(engine, json.dumps(req).encode(), C.byref(out)) == 0, lib.vllm_last_error()
    resp = json.loads(C.string_at(out).decode())
    lib.vllm_string_free(out)
    assert resp["object"] == "chat.completion"
    assert isinstance(resp["choices"][0]["message"]["content"], str)
    assert resp["usage"]["completion_tokens"] <= 10 and resp["usage"]["prompt_tokens"] > 0
