"""Shared pytest fixtures: where the built binaries and ../shared live.

VLLM_BUILD_DIR (default: <repo>/build) holds the `vllm` binary and tools.
Tests that need ../shared skip with a clear message when it is absent.
"""
import os
import pathlib

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
