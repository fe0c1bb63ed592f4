"""`vllm bench` (in-process engine benchmark): runs on stories260K (converted
to GGUF with tools/llama2c_convert), takes the sampling flags (--temperature,
--top-p, --top-k, --min-p) and refuses bad values with a clear message."""
import re
import subprocess

import pytest


@pytest.fixture(scope="module")
def model(stories_gguf):
    return stories_gguf


def bench(vllm_bin, model, *extra):
    return subprocess.run([str(vllm_bin), "bench", "--model", str(model), "--num-prompts", "6", "--input-len", "24",
                           "--output-len", "8", "--concurrency", "3", "--threads", "1", *extra],
                          capture_output=True, text=True, timeout=120)


def test_bench_sampling_flags(vllm_bin, model):
    r = bench(vllm_bin, model, "--temperature", "0.7", "--top-p", "0.9", "--top-k", "40", "--min-p", "0.05")
    assert r.returncode == 0, r.stderr
    assert "Sampling: temperature 0.7, top_p 0.9, top_k 40, min_p 0.05" in r.stdout
    assert re.search(r"Successful requests:\s+6", r.stdout)
    assert re.search(r"Total generated tokens:\s+48", r.stdout)
    d = bench(vllm_bin, model)
    assert d.returncode == 0, d.stderr
    assert "Sampling: temperature 1, top_p 1, top_k 0, min_p 0" in d.stdout


@pytest.mark.parametrize("flag,value", [("--top-p", "1.5"), ("--top-p", "0"), ("--temperature", "-1"),
                                        ("--top-k", "-2"), ("--min-p", "2"), ("--top-p", "abc")])
def test_bench_rejects_bad_sampling(vllm_bin, model, flag, value):
    r = bench(vllm_bin, model, flag, value)
    assert r.returncode == 2
    assert flag in r.stderr and "Traceback" not in r.stderr


def test_bench_step_trace(vllm_bin, model):
    """VLLM_STEP_TRACE=1: a line of host times per engine step on stderr
    (and, for greedy rows, whose ids come back from the model's argmax, the
    model's split of the step with the host time of its ops); none without
    it."""
    import os
    env = dict(os.environ, VLLM_STEP_TRACE="1")
    r = subprocess.run([str(vllm_bin), "bench", "--model", str(model), "--num-prompts", "2", "--input-len", "16",
                        "--output-len", "4", "--concurrency", "1", "--threads", "1", "--temperature", "0"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    eng = re.findall(r"engine step trace: (\d+) requests: schedule ([\d.]+) ms, execute ([\d.]+) ms, "
                     r"outputs ([\d.]+) ms", r.stderr)
    assert len(eng) >= 8  # 2 requests x 4 tokens, one at a time: a step a token
    assert all(int(n) == 1 and float(e) > 0 for n, _, e, _ in eng)
    mdl = re.findall(r"step trace: (\d+) tokens: forward queued in ([\d.]+) ms, ids queued ([\d.]+) ms later, "
                     r"waited ([\d.]+) ms; enqueue start -> ids ([\d.]+) ms", r.stderr)
    assert len(mdl) == len(eng)
    assert sorted({int(t) for t, *_ in mdl})[-1] == 16  # the prompt's step
    # and the host time of the ops each step called: the three op kinds of
    # most host time (ms / calls) and the longest single call
    host = re.findall(r"ms; host: ([a-z_0-9]+) ([\d.]+) ms / (\d+)[^;\n]*; longest ([a-z_0-9]+) ([\d.]+) ms", r.stderr)
    assert len(host) == len(mdl)
    assert all(int(n) >= 1 and float(lng) <= 1e3 for _, _, n, _, lng in host)
    assert any(op == "matmul" or lop == "matmul" for op, _, _, lop, _ in host)
    env["VLLM_STEP_TRACE"] = "0"
    q = subprocess.run([str(vllm_bin), "bench", "--model", str(model), "--num-prompts", "1", "--input-len", "16",
                        "--output-len", "2", "--threads", "1"], capture_output=True, text=True, timeout=120, env=env)
    assert q.returncode == 0 and "step trace" not in q.stderr


def test_bench_device_auto(vllm_bin, model):
    """--device auto (the default) resolves to the CUDA backend where the
    build has it and a GPU is found, else the CPU, and says which; an unknown
    name is refused with the accepted ones."""
    for extra in ((), ("--device", "auto")):
        r = bench(vllm_bin, model, *extra)
        assert r.returncode == 0, r.stderr
        m = re.search(r"device: (cpu|cuda) \(--device auto: ([^)]*)\)", r.stderr)
        assert m, r.stderr
        if m.group(1) == "cpu":
            assert m.group(2) in ("no GPU found", "this build has no GPU backend")
    r = bench(vllm_bin, model, "--device", "cpu")
    assert r.returncode == 0 and "--device auto" not in r.stderr
    r = bench(vllm_bin, model, "--device", "gpu")
    assert r.returncode == 2
    assert "expected auto, cpu or cuda, got 'gpu'" in r.stderr


def test_bench_async_default(vllm_bin, model):
    """Async scheduling by default on a GPU with one rank, off on the CPU,
    logged; --async-scheduling / --no-async-scheduling choose either way
    (no log line then), and both engines give the results."""
    r = bench(vllm_bin, model, "--device", "cpu")
    assert r.returncode == 0, r.stderr
    assert "async scheduling: off (the default on the CPU; --async-scheduling to change)" in r.stderr
    for flag in ("--async-scheduling", "--no-async-scheduling"):
        r = bench(vllm_bin, model, "--device", "cpu", flag)
        assert r.returncode == 0, r.stderr
        assert "async scheduling:" not in r.stderr
        assert re.search(r"Successful requests:\s+6", r.stdout)


def test_bench_budget_defaults(vllm_bin, model):
    """--max-num-seqs / --max-num-batched-tokens: given, they reach the
    engine (its check refuses more sequences than tokens); left out, the
    device's defaults (the CPU keeps 64 / 2048: no GPU line)."""
    r = bench(vllm_bin, model, "--device", "cpu")
    assert r.returncode == 0, r.stderr
    assert "on a GPU: max_num_seqs" not in r.stderr
    r = bench(vllm_bin, model, "--device", "cpu", "--max-num-seqs", "8", "--max-num-batched-tokens", "4")
    assert r.returncode == 1
    assert "max_num_seqs <= max_num_batched_tokens" in r.stderr
