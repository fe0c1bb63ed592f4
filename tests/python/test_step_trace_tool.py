"""tools/step_trace.py: the VLLM_STEP_TRACE summary (a synthetic log in
the model's line format, session 23's held-host case among them)."""
import importlib.util
import pathlib
import subprocess
import sys

TOOL = pathlib.Path(__file__).resolve().parents[2] / "tools" / "step_trace.py"

LOG = """[vllm INFO] warm-up: 1152-token forward + 1 decode step in 190 ms
step trace: 8192 tokens: forward queued in 2.665 ms, ids queued 0.046 ms later, waited 13.522 ms; enqueue start -> ids 16.233 ms; host: paged_attention 1.107 ms / 56, matmul_add 0.660 ms / 55; longest paged_attention 0.631 ms
step trace: 8192 tokens: forward queued in 16.391 ms, ids queued 0.071 ms later, waited 0.088 ms; enqueue start -> ids 16.550 ms; host: matmul 14.450 ms / 2, matmul_add 0.606 ms / 55; longest matmul 14.436 ms
engine step trace: 24 requests: schedule 0.076 ms, execute 16.826 ms, outputs 0.017 ms
step trace: 64 tokens: forward queued in 0.056 ms, ids queued 0.032 ms later, waited 3.300 ms; enqueue start -> ids 3.387 ms
step trace: 64 tokens: forward queued in 0.061 ms, ids queued 0.037 ms later, waited 3.277 ms; enqueue start -> ids 3.375 ms
"""


def load():
    spec = importlib.util.spec_from_file_location("step_trace", TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_parse_and_held():
    st = load()
    steps = st.parse(LOG.splitlines(True))
    assert [s["tokens"] for s in steps] == [8192, 8192, 64, 64]  # the engine's line is not a model step
    assert steps[1]["longest"] == ("matmul", 14.436)
    assert steps[2]["host"] == "" and steps[2]["longest"] is None  # a line without the host part
    h = st.held(steps, 5.0)
    assert [i for i, _ in h] == [1]  # queued 16.4 ms, waited 0.09: the enqueue waited for the device


def test_cli(tmp_path):
    p = tmp_path / "trace.log"
    p.write_text(LOG)
    r = subprocess.run([sys.executable, str(TOOL), str(p), "--held", "5"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "4 steps" in r.stdout
    assert "1 steps held the host over 5 ms" in r.stdout
    assert "longest matmul 14.436 ms" in r.stdout
    bad = subprocess.run([sys.executable, str(TOOL)], capture_output=True, text=True)
    assert bad.returncode == 2
