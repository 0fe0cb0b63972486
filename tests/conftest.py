"""Shared fixtures: a private data folder for every test, and tiny generated models."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


@pytest.fixture(autouse=True)
def _private_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No test reads or writes the user's real data folder."""
    monkeypatch.setenv("LLAMADESK_HOME", str(tmp_path / "llamadesk-home"))
    yield


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.support.gguf_models import write_tiny_model

    return write_tiny_model(tmp_path_factory.mktemp("models") / "tiny.gguf")


@pytest.fixture(scope="session")
def tiny_model_twin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Same shape and vocabulary as ``tiny_model``, other weights."""
    from tests.support.gguf_models import TinySpec, write_tiny_model

    return write_tiny_model(tmp_path_factory.mktemp("models") / "twin.gguf", TinySpec(seed=1))


@pytest.fixture(scope="session")
def smollm2() -> Path:
    """The real SmolLM2-135M-Instruct Q4_1 file (tests/support/real_models.py)."""
    from tests.support.real_models import smollm2_path

    return smollm2_path()
