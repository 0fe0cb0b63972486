"""Damaged, too new and read-only databases: a clear error and a way out, never a crash
and never a silent overwrite."""

from __future__ import annotations

import json
import os
import sqlite3
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from app.errors import LlamaDeskError
from app.storage import (
    SCHEMA_VERSION,
    Database,
    DatabaseCorruptError,
    DatabaseReadOnlyError,
    DatabaseTooNewError,
    StorageError,
    move_aside,
)


def _fill(path: Path, conversations: int = 3, messages: int = 4) -> None:
    with Database.open(path) as db:
        for i in range(conversations):
            c = db.create_conversation(f"chat {i}")
            parent = None
            for j in range(messages):
                parent = db.add_message(c.id, "user", f"llama message {i}.{j} " * 20, parent).id


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def test_garbage_file_is_reported_damaged_and_left_untouched(home: Path) -> None:
    path = home / "llamadesk.sqlite3"
    path.write_bytes(b"this is not a database at all\n" * 200)
    before = _files(home)
    with pytest.raises(DatabaseCorruptError) as info:
        Database.open()
    err = info.value
    assert isinstance(err, LlamaDeskError) and err.path == path
    assert str(err).startswith(f"The conversation database at {path} is damaged (")
    assert str(err).endswith("LlamaDesk can move it aside and start with an empty one.")
    assert err.ways_out == ("move_aside",)
    assert _files(home) == before  # nothing written, nothing "repaired"
    with pytest.raises(DatabaseCorruptError):
        Database.open(read_only=True)
    # The way out: move aside, start fresh; the damaged file is kept.
    moved = move_aside(path)
    assert not path.exists() and moved.read_bytes() == before["llamadesk.sqlite3"]
    assert moved.name.startswith("llamadesk.sqlite3.moved-")
    with Database.open() as db:
        assert db.list_conversations() == []


def test_damaged_pages_surface_as_storage_errors(home: Path) -> None:
    path = home / "llamadesk.sqlite3"
    _fill(path, conversations=20, messages=30)
    data = bytearray(path.read_bytes())
    page = 4096
    assert len(data) > 20 * page
    for offset in range(3 * page, len(data) - page, 2 * page):  # keep page 1 (the header)
        data[offset + 100 : offset + 400] = os.urandom(300)
    path.write_bytes(bytes(data))
    saw_error = False
    try:
        with Database.open() as db:
            problems = db.integrity_check()
            assert problems, "the damage should be visible to integrity_check"
            for c in db.list_conversations():
                db.get_thread(c.id)
            db.search("llama")
    except DatabaseCorruptError as exc:
        saw_error = True
        assert "damaged" in str(exc)
    except StorageError:
        saw_error = True
    assert saw_error or problems
    with pytest.raises(DatabaseCorruptError):
        Database.open(check=True)
    with pytest.raises(DatabaseCorruptError):
        Database.open(read_only=True, check=True)


def test_healthy_database_passes_the_open_check(home: Path) -> None:
    _fill(home / "llamadesk.sqlite3")
    with Database.open(check=True) as db:
        assert len(db.list_conversations()) == 3


def test_newer_schema_is_refused_but_readable_read_only(home: Path) -> None:
    path = home / "llamadesk.sqlite3"
    _fill(path, conversations=1)
    raw = sqlite3.connect(path)
    raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 5}")
    raw.commit()
    raw.close()
    before = _files(home)
    with pytest.raises(DatabaseTooNewError) as info:
        Database.open()
    msg = str(info.value)
    assert "newer LlamaDesk" in msg and f"schema {SCHEMA_VERSION + 5}" in msg
    assert set(info.value.ways_out) == {"read_only", "move_aside"}
    assert _files(home) == before
    with Database.open(read_only=True) as ro:
        assert [c.title for c in ro.list_conversations()] == ["chat 0"]
    # A WAL reader may leave an empty -wal and a -shm index; the database is unchanged.
    after = _files(home)
    assert after["llamadesk.sqlite3"] == before["llamadesk.sqlite3"]
    assert after.get("llamadesk.sqlite3-wal", b"") == b""


def _as_unprivileged(check: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run ``check`` where file permissions apply: in a forked child as "nobody" when the
    tests run as root (root ignores permission bits), else right here."""
    if os.geteuid() != 0:
        return check()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        code = 0
        try:
            os.close(read_fd)
            os.setgid(65534)
            os.setuid(65534)
            payload = json.dumps(check())
        except BaseException as exc:
            payload = json.dumps({"crash": repr(exc)})
            code = 1
        os.write(write_fd, payload.encode())
        os.close(write_fd)
        os._exit(code)
    os.close(write_fd)
    chunks = []
    while chunk := os.read(read_fd, 65536):
        chunks.append(chunk)
    os.close(read_fd)
    os.waitpid(pid, 0)
    result: dict[str, Any] = json.loads(b"".join(chunks))
    return result


@pytest.mark.parametrize("folder_writable", [True, False])
def test_read_only_file_offers_read_only_mode(folder_writable: bool) -> None:
    folder = Path(tempfile.mkdtemp(prefix="llamadesk-ro-"))
    try:
        path = folder / "llamadesk.sqlite3"
        _fill(path, conversations=2)
        os.chmod(path, 0o444)
        os.chmod(folder, 0o777 if folder_writable else 0o555)
        before = path.read_bytes()

        def check() -> dict[str, Any]:
            result: dict[str, Any] = {}
            try:
                Database.open(path)
                result["opened"] = True
            except DatabaseReadOnlyError as exc:
                result["error"] = str(exc)
                result["ways_out"] = list(exc.ways_out)
            with Database.open(path, read_only=True) as ro:
                result["titles"] = sorted(c.title for c in ro.list_conversations())
                result["hits"] = len(ro.search("llama"))
            return result

        result = _as_unprivileged(check)
        assert "crash" not in result, result
        assert "opened" not in result
        assert result["error"].startswith(f"The conversation database at {path} cannot be written")
        assert result["ways_out"] == ["read_only", "move_aside"]
        assert result["titles"] == ["chat 0", "chat 1"] and result["hits"] > 0
        assert path.read_bytes() == before
    finally:
        os.chmod(folder, 0o755)
        for p in folder.iterdir():
            p.unlink()
        folder.rmdir()


def test_move_aside_keeps_wal_with_its_database(home: Path) -> None:
    path = home / "llamadesk.sqlite3"
    db = Database.open(path)
    c = db.create_conversation("in the wal")
    db.add_message(c.id, "user", "still only in the -wal file")
    # Simulate a crash: copy the files while the connection is open (WAL not checkpointed).
    copy = home / "copy"
    copy.mkdir()
    for p in home.iterdir():
        if p.is_file() and p.name.startswith("llamadesk.sqlite3"):
            (copy / p.name).write_bytes(p.read_bytes())
    db.close()
    assert (copy / "llamadesk.sqlite3-wal").exists()
    moved = move_aside(copy / "llamadesk.sqlite3")
    assert Path(str(moved) + "-wal").exists()
    assert not (copy / "llamadesk.sqlite3").exists()
    with Database.open(moved, read_only=True) as ro:
        assert [m.content for m in ro.messages(c.id)] == ["still only in the -wal file"]
    second = move_aside(copy / "llamadesk.sqlite3")  # nothing there: still a fresh name
    assert second != moved


def test_open_creates_missing_folders(tmp_path: Path) -> None:
    with Database.open(tmp_path / "a" / "b" / "db.sqlite3") as db:
        assert db.list_conversations() == []


def test_folder_that_cannot_be_created_is_a_storage_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(StorageError, match="cannot create its folder"):
        Database.open(blocker / "sub" / "db.sqlite3")
