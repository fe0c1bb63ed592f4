"""`vllm run` greedy decoding with the device a step ahead
(VLLM_RUN_PIPELINE, src/cli/cmd_run.c: step k + 1 queued with its input
taken on the device from step k's argmax before the host collects step
k). On by default on accelerators; here on the CPU backend, forced on with
=1, against =0 (the synchronous loop): the same ids, finish reason and
token count for several fixture models, with and without stop tokens, at
1 and 2 tokens (no step / one step queued) and at a context that ends the
run early."""
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
                                   ("--max-tokens", "600", "--ignore-eos")])  # clamped to the 512-position context
def test_pipeline_same_ids(vllm_bin, name, extra):
    model = REPO / "tests" / "fixtures" / "models" / name
    if not model.exists():
        pytest.skip(f"no fixture {name}")
    sync = run(vllm_bin, model, "0", *extra)
    pipe = run(vllm_bin, model, "1", *extra)
    assert pipe == sync
    if "--ignore-eos" in extra:
        assert len(pipe[0]) == min(int(extra[1]), 512 - 4)
