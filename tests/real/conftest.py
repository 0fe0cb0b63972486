"""Fixtures of the tests on the real model: the window (as tests/ui builds it) on SmolLM2."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from app import paths
from app.storage import Database
from tests.devices.conftest import cli_env as base_cli_env
from tests.ui.conftest import Recorder, close_window, write_settings


@pytest.fixture(scope="session")
def cli_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One data folder for the ``llamadesk`` commands these tests run: the first load of
    SmolLM2 checks it in a child process and keeps the verdict (about 4 s), later loads
    find it there, as on a user's machine."""
    return tmp_path_factory.mktemp("cli-home")


def cli_env(home: Path) -> dict[str, str]:
    """The environment of a ``python -m app`` child: this checkout first, ``home``."""
    return {**base_cli_env(), "LLAMADESK_HOME": str(home)}


@pytest.fixture
def make_window(
    qtbot: Any, smollm2: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., tuple[Any, Recorder]]]:
    """``make_window(write=True)`` -> (window, recorder): the real MainWindow on SmolLM2,
    its model loaded; ``write=False`` keeps the settings (a second start)."""
    from app.ui.main_window import MainWindow

    home = paths.data_dir()
    monkeypatch.setattr(paths, "demo_model_path", lambda: home / "no-demo.gguf")
    opened: list[tuple[Any, Database]] = []

    def make(write: bool = True) -> tuple[Any, Recorder]:
        if write:
            write_settings(smollm2)  # tests/ui's small context: 2,048 tokens, 4 sequences
        db = Database.open()
        window = MainWindow(db)
        recorder = Recorder()
        window.worker.conversationEvent.connect(recorder.on_event)
        opened.append((window, db))
        window.show()
        window.start()
        qtbot.waitUntil(window.model_ready, timeout=60000)
        return window, recorder

    yield make
    for window, db in opened:
        close_window(qtbot, window)
        db.close()
