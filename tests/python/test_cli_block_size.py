"""`--block-size N` (vLLM's flag) on `vllm serve` and `vllm bench`: the KV
cache's tokens per block. Greedy completions must not depend on it (the
paged attention reads the same keys in the same order whatever the page
size), with prefix-cache hits included, and bad values are refused with a
clear message. Model: stories260K converted to GGUF (skips without
../shared)."""
import json
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(base, path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read().decode())


def _serve_completions(vllm_bin, model, block_size, prompts):
    """Greedy completions of `prompts` (lists of ids), each sent twice (the
    second time its full blocks come from the prefix cache), from a server
    with --block-size block_size (None: the default), and the server's log."""
    port = _free_port()
    cmd = [str(vllm_bin), "serve", str(model), "--port", str(port), "--threads", "1",
           "--kv-cache-memory", "64M"]
    if block_size is not None:
        cmd += ["--block-size", str(block_size)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while True:
            assert proc.poll() is None, "server exited: " + proc.stdout.read()
            try:
                with urllib.request.urlopen(base + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.time() < deadline, "server did not come up"
            time.sleep(0.2)
        out = []
        for p in prompts + prompts:
            r = _post(base, "/v1/completions", {"model": str(model), "prompt": p, "max_tokens": 24,
                                                "temperature": 0, "ignore_eos": True})
            out.append(r["choices"][0]["text"])
        with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
            assert r.status == 200
            metrics = r.read().decode()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    log = proc.stdout.read()
    hits = 0.0
    for line in metrics.splitlines():
        if line.startswith("vllm:prefix_cache_hits_total"):
            hits = float(line.rsplit(" ", 1)[1])
    return out, log, hits


def test_greedy_same_at_every_block_size(vllm_bin, stories_gguf):
    # two prompts sharing a 140-token prefix (two full blocks of 64), lengths across block edges
    base = [1] + [300 + (i * 7) % 150 for i in range(139)]
    prompts = [base + [261, 378, 432], base + [286, 261, 376, 298, 315, 421, 395, 317, 426, 338]]
    ref, log, _ = _serve_completions(vllm_bin, stories_gguf, None, prompts)
    assert "blocks of 16 tokens" in log
    assert all(ref), ref
    for b in (1, 8, 64):
        got, log, hits = _serve_completions(vllm_bin, stories_gguf, b, prompts)
        assert f"blocks of {b} tokens" in log
        assert got == ref, f"block size {b}"
        assert hits > 0, f"block size {b}: no prefix-cache hit on the repeated prompts"


@pytest.mark.parametrize("value", ["0", "24", "2048", "-16", "abc"])
@pytest.mark.parametrize("cmd", ["serve", "bench"])
def test_block_size_rejects_bad_values(vllm_bin, stories_gguf, cmd, value):
    r = subprocess.run([str(vllm_bin), cmd, "--model", str(stories_gguf), "--block-size", value],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "--block-size" in r.stderr and "power of two" in r.stderr and "Traceback" not in r.stderr


def test_bench_block_size(vllm_bin, stories_gguf):
    r = subprocess.run([str(vllm_bin), "bench", "--model", str(stories_gguf), "--num-prompts", "4",
                        "--input-len", "40", "--output-len", "8", "--concurrency", "2", "--threads", "1",
                        "--block-size", "32"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "blocks of 32 tokens" in r.stdout + r.stderr
    assert "Successful requests:" in r.stdout
