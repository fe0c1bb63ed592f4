"""vLLM request extras of `vllm serve` (logit_bias, allowed_token_ids,
bad_words, min_tokens, ignore_eos, skip_special_tokens,
include_stop_str_in_output, prompt_logprobs, response_format) through the
official `openai` client (extra_body) and raw HTTP, on the default model.
Greedy decoding (temperature 0) keeps every expectation deterministic."""
import json

import pytest

openai = pytest.importorskip("openai")

from test_server import MODEL_NAME, Server  # noqa: E402  (same directory)

EOS = 2  # SmolLM2's <|im_end|>, the GGUF's EOS


@pytest.fixture(scope="module")
def server(vllm_bin):
    s = Server(vllm_bin)
    yield s
    s.stop()
    assert s.proc.returncode == 0


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key="x", max_retries=0, timeout=120)


def _cmp(client, **kw):
    kw.setdefault("temperature", 0)
    extra = {k: kw.pop(k) for k in list(kw) if k not in ("prompt", "max_tokens", "temperature", "logprobs", "stop",
                                                         "logit_bias", "stream")}
    return client.completions.create(model=MODEL_NAME, extra_body=extra, **kw)


def test_logit_bias_forces_a_token(server, client):
    r = _cmp(client, prompt="The cat sat", max_tokens=4, logit_bias={"1000": 100})
    st, body = server.post("/detokenize", {"tokens": [1000] * 4})
    assert r.choices[0].text == json.loads(body)["prompt"]
    # Values are clamped to [-100, 100] like vLLM; keys must be in-vocabulary token ids.
    assert _cmp(client, prompt="The cat sat", max_tokens=4, logit_bias={"1000": 1e9}).choices[0].text == \
        r.choices[0].text
    for bad in ({"x": 1}, {"99999999": 1}, {"5": "a"}):
        with pytest.raises(openai.BadRequestError):
            _cmp(client, prompt="x", max_tokens=1, logit_bias=bad)


def test_allowed_token_ids(server, client):
    allowed = [1000, 2000, 3000]
    r = _cmp(client, prompt="The cat sat", max_tokens=6, logprobs=0, allowed_token_ids=allowed)
    names = {json.loads(server.post("/detokenize", {"tokens": [t]})[1])["prompt"] for t in allowed}
    assert r.choices[0].logprobs.tokens and set(r.choices[0].logprobs.tokens) <= names
    for bad in ([], [-1], [99999999], "1"):
        with pytest.raises(openai.BadRequestError):
            _cmp(client, prompt="x", max_tokens=1, allowed_token_ids=bad)


def test_bad_words(client):
    base = _cmp(client, prompt="The cat sat", max_tokens=6).choices[0].text
    word = base.split()[0]
    r = _cmp(client, prompt="The cat sat", max_tokens=6, bad_words=[word]).choices[0].text
    assert r != base and word not in r.split()
    for bad in ([1], [""], "on"):
        with pytest.raises(openai.BadRequestError):
            _cmp(client, prompt="x", max_tokens=1, bad_words=bad)


def test_min_tokens_ignore_eos_skip_special(client):
    eos = {str(EOS): 100}
    r = _cmp(client, prompt="The cat sat", max_tokens=10, logit_bias=eos)
    assert r.choices[0].finish_reason == "stop" and r.usage.completion_tokens == 1
    # min_tokens masks EOS for its first 5 tokens (before logit_bias, as in vLLM's sampler).
    r = _cmp(client, prompt="The cat sat", max_tokens=10, logit_bias=eos, min_tokens=5)
    assert r.choices[0].finish_reason == "stop" and r.usage.completion_tokens == 6
    r = _cmp(client, prompt="The cat sat", max_tokens=4, logit_bias=eos, ignore_eos=True)
    assert r.choices[0].finish_reason == "length" and r.choices[0].text == ""
    r = _cmp(client, prompt="The cat sat", max_tokens=4, logit_bias=eos, ignore_eos=True, skip_special_tokens=False)
    assert r.choices[0].text == "<|im_end|>" * 4
    with pytest.raises(openai.BadRequestError):
        _cmp(client, prompt="x", max_tokens=2, min_tokens=3)


def test_include_stop_str_in_output(client):
    base = _cmp(client, prompt="The cat sat", max_tokens=8).choices[0].text
    stop = base.split()[1]
    r = _cmp(client, prompt="The cat sat", max_tokens=8, stop=[stop])
    assert r.choices[0].finish_reason == "stop" and stop not in r.choices[0].text
    r2 = _cmp(client, prompt="The cat sat", max_tokens=8, stop=[stop], include_stop_str_in_output=True)
    assert r2.choices[0].text == r.choices[0].text + stop


def test_sampling_ranges(client):
    for kw in ({"repetition_penalty": 0}, {"top_k": -2}, {"min_p": 1.5}, {"temperature": -1},
               {"spaces_between_special_tokens": "yes"}, {"ignore_eos": 1}):
        with pytest.raises(openai.BadRequestError):
            _cmp(client, prompt="x", max_tokens=1, **kw)
    r = _cmp(client, prompt="The cat sat", max_tokens=3, repetition_penalty=1.3, top_k=5, min_p=0.05,
             spaces_between_special_tokens=True)
    assert r.usage.completion_tokens == 3


def test_prompt_logprobs_completions_and_chat(server, client):
    r = _cmp(client, prompt="The cat sat on the mat", max_tokens=1, prompt_logprobs=2)
    plp = r.choices[0].model_extra["prompt_logprobs"]
    assert len(plp) == r.usage.prompt_tokens and plp[0] is None
    ids = json.loads(server.post("/tokenize", {"prompt": "The cat sat on the mat"})[1])["tokens"]
    for pos, d in enumerate(plp[1:], 1):
        assert str(ids[pos]) in d and 2 <= len(d) <= 3  # the prompt token + the top 2
        for tid, e in d.items():
            assert e["logprob"] <= 0 and e["rank"] >= 1 and isinstance(e["decoded_token"], str)
        ranks = sorted(e["rank"] for t, e in d.items() if t != str(ids[pos]))
        assert ranks[:2] == [1, 2] or d[str(ids[pos])]["rank"] <= 2
    st, body = server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1,
                                                    "prompt_logprobs": 0})
    j = json.loads(body)
    assert st == 200 and len(j["prompt_logprobs"]) == j["usage"]["prompt_tokens"]
    assert all(len(d) == 1 for d in j["prompt_logprobs"][1:])
    # Not with streaming (vLLM's rule), and bounded like logprobs.
    for body in ({"prompt": "x", "stream": True, "prompt_logprobs": 1}, {"prompt": "x", "prompt_logprobs": 21},
                 {"prompt": "x", "prompt_logprobs": "2"}):
        assert server.post("/v1/completions", body)[0] == 400


def test_response_format(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "Hi"}], max_tokens=2,
                                       response_format={"type": "text"})
    assert r.choices[0].message.role == "assistant"
    for fmt in ({"type": "json_object"},
                {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}):
        with pytest.raises(openai.BadRequestError, match="structured output"):
            client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "Hi"}],
                                           max_tokens=2, response_format=fmt)


def test_forced_tool_choice_needs_a_parser(client):
    # SmolLM2's own template teaches no tool-call format and no --tool-call-parser was given.
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    for choice in ("required", {"type": "function", "function": {"name": "f"}}):
        with pytest.raises(openai.BadRequestError, match="tool-call parser"):
            client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "Hi"}],
                                           tools=tools, tool_choice=choice, max_tokens=2)
