"""`vllm bench` (in-process engine benchmark): runs on stories260K (converted
to GGUF with tools/llama2c_convert), takes the sampling flags (--temperature,
--top-p, --top-k, --min-p) and refuses bad values with a clear message."""
import re
import subprocess

import pytest


@pytest.fixture(scope="module")
def model(build_dir, shared_dir, tmp_path_factory):
    src = shared_dir / "models" / "stories260K"
    if not (src / "stories260K.bin").exists():
        pytest.skip("stories260K not in ../shared")
    gguf = tmp_path_factory.mktemp("bench") / "stories260K.gguf"
    subprocess.run([str(build_dir / "llama2c_convert"), str(src / "stories260K.bin"), str(src / "tok512.bin"),
                    str(gguf)], check=True, capture_output=True)
    return gguf


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
