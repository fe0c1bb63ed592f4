"""`vllm run` decoding with the device a step ahead (VLLM_RUN_PIPELINE,
src/cli/cmd_run.c: step k + 1 queued with its input taken on the device
from step k's token before the host collects step k; sampled tokens drawn
on the device with the uniforms the host sampler would use). On by
default on accelerators; here on the CPU backend, forced on with =1,
against =0 (the synchronous loop, the host sampler): the same ids, finish
reason and token count for several fixture models, greedy and seeded
sampling (temperature, top_p, top_k, min_p), with and without stop
tokens, at 1 and 2 tokens (no step / one step queued) and at a context
that ends the run early."""
import os
import pathlib
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
MODELS = ["tiny-llama", "tiny-qwen3", "tiny-gemma3", "tiny-mistral"]


def run(vllm_bin, model, pipe, *extra):
    env = dict(os.environ, VLLM_RUN_PIPELINE=pipe)
    r = subprocess.run([str(vllm_bin), "run", "--model", str(model), "--prompt-ids", "1,5,9,3", "--temperature", "0",
                        "--print-ids", "--threads", "1", *extra], capture_output=True, text=True, timeout=120,
                       env=env)
    assert r.returncode == 0, r.stderr
    finish = r.stderr.strip().splitlines()[-1]
    return r.stdout.split(), finish.split("| finish:")[-1].strip(), finish.split("decode:")[-1].split("tokens")[0]


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("extra", [("--max-tokens", "24", "--ignore-eos"), ("--max-tokens", "24"),
                                   ("--max-tokens", "1"), ("--max-tokens", "2", "--ignore-eos"),
                                   ("--max-tokens", "600", "--ignore-eos"),  # clamped to the 512-position context
                                   ("--max-tokens", "24", "--temperature", "0.8", "--seed", "7"),
                                   ("--max-tokens", "24", "--temperature", "1.0", "--top-p", "0.9", "--top-k", "30",
                                    "--min-p", "0.02", "--seed", "3", "--ignore-eos"),
                                   ("--max-tokens", "1", "--temperature", "0.8", "--seed", "5")])
def test_pipeline_same_ids(vllm_bin, name, extra):
    model = REPO / "tests" / "fixtures" / "models" / name
    if not model.exists():
        pytest.skip(f"no fixture {name}")
    sync = run(vllm_bin, model, "0", *extra)
    pipe = run(vllm_bin, model, "1", *extra)
    assert pipe == sync
    if "--ignore-eos" in extra:
        assert len(pipe[0]) == min(int(extra[1]), 512 - 4)


def test_seeded_sampling_repeats(vllm_bin):
    """A seeded run draws the same tokens every time, and another seed others."""
    model = REPO / "tests" / "fixtures" / "models" / "tiny-llama"
    args = ("--max-tokens", "32", "--temperature", "1.0", "--ignore-eos")
    a = run(vllm_bin, model, "1", *args, "--seed", "9")
    b = run(vllm_bin, model, "1", *args, "--seed", "9")
    c = run(vllm_bin, model, "1", *args, "--seed", "10")
    assert a == b
    assert a[0] != c[0]
