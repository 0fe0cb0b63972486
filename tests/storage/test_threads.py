"""One connection per thread: PerThread opens one on each thread's first use."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from app.storage import Database, DatabaseCorruptError, PerThread

T = TypeVar("T")


def _on_thread(fn: Callable[[], T]) -> T:
    out: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(10)
    if errors:
        raise errors[0]
    return out[0]


def test_each_thread_gets_its_own_connection_and_keeps_it(db: Database) -> None:
    conns = PerThread(db.clone)
    mine = conns.get()
    assert conns.get() is mine and mine is not db

    def elsewhere() -> tuple[int, int, bool]:
        theirs = conns.get()
        assert conns.get() is theirs
        c = theirs.create_conversation("from a worker")
        conns.close()
        return id(theirs), c.id, conns.opened()

    their_id, cid, still_open = _on_thread(elsewhere)
    assert their_id != id(mine) and not still_open
    assert conns.opened()  # closing on the worker left this thread's connection alone
    assert mine.get_conversation(cid).title == "from a worker"  # same file
    conns.close()
    assert not conns.opened()
    conns.close()  # idempotent


def test_a_connection_refuses_another_thread(db: Database) -> None:
    with pytest.raises(sqlite3.ProgrammingError):
        _on_thread(db.list_conversations)


def test_an_open_error_reaches_the_caller_and_the_next_get_tries_again(tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    path.write_bytes(b"not a database at all" * 100)
    conns = Database.per_thread(path)
    with pytest.raises(DatabaseCorruptError):
        conns.get()
    assert not conns.opened()
    path.unlink()
    assert conns.get().list_conversations() == []
    conns.close()


def test_read_only_per_thread(db: Database) -> None:
    db.create_conversation("seen")
    readers = Database.per_thread(db.path, read_only=True)
    assert _on_thread(lambda: [c.title for c in readers.get().list_conversations()]) == ["seen"]
