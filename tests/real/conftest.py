"""Fixtures of the tests on the real model: the window (as tests/ui builds it) on SmolLM2."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from app import paths
from app.storage import Database
from tests.devices.conftest import ROOT
from tests.devices.conftest import cli_env as base_cli_env
from tests.ui.conftest import Recorder, close_windows, open_window, write_settings


@pytest.fixture(scope="session")
def cli_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One data folder for the ``llamadesk`` commands these tests run: the first load of
    SmolLM2 checks it in a child process and keeps the verdict (about 4 s), later loads
    find it there, as on a user's machine."""
    return tmp_path_factory.mktemp("cli-home")


def cli_env(home: Path) -> dict[str, str]:
    """The environment of a ``python -m app`` child: this checkout first, ``home``."""
    return {**base_cli_env(), "LLAMADESK_HOME": str(home)}


def run_json(model: Path, home: Path, prompt: str, *flags: str) -> dict[str, Any]:
    """``llamadesk run MODEL PROMPT --json FLAGS`` in ``home``: its JSON (it must succeed)."""
    done = subprocess.run(
        [sys.executable, "-m", "app", "run", str(model), prompt, "--json", *flags],
        capture_output=True,
        text=True,
        timeout=240,
        env=cli_env(home),
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


@pytest.fixture
def make_window(
    qtbot: Any, smollm2: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., tuple[Any, Recorder]]]:
    """``make_window(write=True)`` -> (window, recorder): the real MainWindow on SmolLM2,
    its model loaded; ``write=False`` keeps the settings (a second start)."""
    home = paths.data_dir()
    monkeypatch.setattr(paths, "demo_model_path", lambda: home / "no-demo.gguf")
    opened: list[tuple[Any, Database]] = []

    def make(write: bool = True) -> tuple[Any, Recorder]:
        if write:
            write_settings(smollm2)  # tests/ui's small context: 2,048 tokens, 4 sequences
        return open_window(qtbot, opened, wait_ms=60000)

    yield make
    close_windows(qtbot, opened)
