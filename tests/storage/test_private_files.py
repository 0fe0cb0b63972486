"""The database, its -wal/-shm files and the data folder are owner-only, like the state files."""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from app import paths
from app.storage import SCHEMA_VERSION, Database, StateStore
from tests.storage.test_migrations import _make_v1

pytestmark = pytest.mark.skipif(os.name == "nt", reason="POSIX permission bits")


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _companions(path: Path) -> list[Path]:
    return [Path(str(path) + suffix) for suffix in ("-wal", "-shm")]


@pytest.fixture
def open_umask() -> Iterator[None]:
    """A permissive umask (0002, as many desktops have): modes come from the code alone."""
    old = os.umask(0o002)
    yield
    os.umask(old)


def test_a_new_database_and_its_wal_and_shm_are_owner_only(home: Path, open_umask: None) -> None:
    with Database.open() as db:
        db.create_conversation("private")  # a write: the -wal file holds it
        files = [db.path, *_companions(db.path)]
        assert all(f.exists() for f in files)
        assert {f.name: _mode(f) for f in files} == {f.name: 0o600 for f in files}


def test_existing_files_with_looser_modes_are_fixed_on_open(
    tmp_path: Path, open_umask: None
) -> None:
    path = tmp_path / "old" / "llamadesk.sqlite3"
    with Database.open(path) as db:
        db.create_conversation("kept")
        # While it is open, the -wal and -shm files exist: an older version made them all
        # world-readable.
        for f in [path, *_companions(path)]:
            os.chmod(f, 0o644)
        raw = sqlite3.connect(path)  # keeps the -wal and -shm files when db closes
        raw.execute("SELECT count(*) FROM conversations").fetchone()
        try:
            db.close()
            assert all(_mode(f) == 0o644 for f in [path, *_companions(path)])
            with Database.open(path) as again:
                assert [c.title for c in again.list_conversations()] == ["kept"]
                assert {f.name: _mode(f) for f in [path, *_companions(path)]} == {
                    f.name: 0o600 for f in [path, *_companions(path)]
                }
        finally:
            raw.close()


def test_the_copy_made_before_a_migration_is_owner_only(home: Path, open_umask: None) -> None:
    path = paths.database_path()
    _make_v1(path)  # written by plain sqlite3: readable by everyone (0644)
    assert _mode(path) & 0o044
    with Database.open() as db:
        assert db.schema_version == SCHEMA_VERSION
    backup = path.with_name(f"{path.name}.before-schema-2")
    assert _mode(backup) == 0o600 and _mode(path) == 0o600


def test_the_data_folder_is_created_owner_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, open_umask: None
) -> None:
    monkeypatch.setenv("LLAMADESK_HOME", str(tmp_path / "fresh" / "LlamaDesk"))
    folder = paths.data_dir()
    assert _mode(folder) == 0o700
    assert _mode(paths.state_dir()) == 0o700
    assert _mode(folder.parent) != 0o700  # only the folder itself, not what is above it
    store = StateStore()
    written = store.put(1, "model", b"kv")
    assert written is not None and _mode(written) == 0o600


def test_a_data_folder_the_user_made_is_tightened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 27 item 6: owner-only also when the data folder exists already (never the
    user's home or a temp root: tests/test_private_files.py)."""
    chosen = tmp_path / "shared"
    chosen.mkdir()
    os.chmod(chosen, 0o750)
    monkeypatch.setenv("LLAMADESK_HOME", str(chosen))
    with Database.open() as db:
        assert _mode(db.path) == 0o600
    assert _mode(chosen) == 0o700


def test_a_database_in_a_new_folder_gets_an_owner_only_folder(
    tmp_path: Path, open_umask: None
) -> None:
    path = tmp_path / "made" / "chats.sqlite3"
    with Database.open(path):
        pass
    assert _mode(path.parent) == 0o700 and _mode(path) == 0o600
