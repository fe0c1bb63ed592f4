"""Shared pytest fixtures: where the built binaries and ../shared live.

VLLM_BUILD_DIR (default: <repo>/build) holds the `vllm` binary and tools.
Tests that need ../shared skip with a clear message when it is absent.
"""
import os
import pathlib
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("VLLM_BUILD_DIR", REPO / "build"))
SHARED = pathlib.Path(os.environ.get("VLLM_SHARED_DIR", REPO.parent / "shared"))


@pytest.fixture(scope="session")
def build_dir():
    if not (BUILD / "vllm").exists():
        pytest.skip(f"no build at {BUILD} (set VLLM_BUILD_DIR)")
    return BUILD


@pytest.fixture(scope="session")
def vllm_bin(build_dir):
    return build_dir / "vllm"


@pytest.fixture(scope="session")
def shared_dir():
    if not SHARED.is_dir():
        pytest.skip(f"../shared not found at {SHARED}")
    return SHARED


@pytest.fixture(scope="session")
def stories_gguf(build_dir, shared_dir, tmp_path_factory):
    """stories260K (../shared, a real trained llama2.c model) converted to
    GGUF once by tools/llama2c_convert, for every test that runs it."""
    src = shared_dir / "models" / "stories260K"
    if not (src / "stories260K.bin").exists():
        pytest.skip("stories260K not in ../shared")
    out = tmp_path_factory.mktemp("stories") / "stories260K.gguf"
    subprocess.run([str(build_dir / "llama2c_convert"), str(src / "stories260K.bin"), str(src / "tok512.bin"),
                    str(out)], check=True, capture_output=True)
    return out
