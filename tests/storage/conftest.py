"""Fixtures: every storage test runs on real files in a temporary ``LLAMADESK_HOME``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app import paths
from app.storage import Database


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "home"
    monkeypatch.setenv("LLAMADESK_HOME", str(folder))
    return paths.data_dir()


@pytest.fixture
def db(home: Path) -> Iterator[Database]:
    database = Database.open()
    yield database
    database.close()
