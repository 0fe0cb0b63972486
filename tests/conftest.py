"""Shared fixtures: a private data folder for every test, and tiny generated models."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


_PYTEST_PID = os.getpid()


@pytest.fixture(autouse=True)
def _no_second_pytest() -> Iterator[None]:
    """A child forked by the code under test never goes on with the suite.

    ``run`` and ``serve`` fork before they load (app.crash_supervisor); called in this
    process (``app.cli.main([...])``), the child returned into pytest and ran every test
    after it a second time while the parent waited (415 s of one suite run). Such a test
    sets ``LLAMADESK_NO_CRASH_SUPERVISOR=1``; one that does not fails here at once."""
    yield
    if os.getpid() != _PYTEST_PID:
        os.write(
            2,
            b"\na forked child of pytest came back into the test: call the command with "
            b"LLAMADESK_NO_CRASH_SUPERVISOR=1 (app.crash_supervisor)\n",
        )
        os._exit(70)


@pytest.fixture(scope="session")
def _amx_mode(tmp_path_factory: pytest.TempPathFactory) -> str | None:
    """The AMX guard's verdict for this machine, found once per test run.

    Every test has a data folder of its own, so every ``llamadesk`` process a test starts
    would probe the CPU again in a child (app/engine/cpu_quirks.py: a model load that
    crashes on some CPUs with AMX; 1.5 s of a test's time, 0.5 s of CPU). The answer is
    the machine's: it is found here once and handed on as ``LLAMADESK_AMX``, which the
    guard obeys as it would its verdict. None: the environment chose a mode already."""
    if os.environ.get("LLAMADESK_AMX"):
        return None
    from app.engine import cpu_quirks

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LLAMADESK_HOME", str(tmp_path_factory.mktemp("amx-probe-home")))
        return "off" if cpu_quirks.amx_guard_active() else "on"


@pytest.fixture(autouse=True)
def _private_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, _amx_mode: str | None
) -> Iterator[None]:
    """No test reads or writes the user's real data folder."""
    monkeypatch.setenv("LLAMADESK_HOME", str(tmp_path / "llamadesk-home"))
    if _amx_mode is not None:
        monkeypatch.setenv("LLAMADESK_AMX", _amx_mode)
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
