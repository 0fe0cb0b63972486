"""The session's library (app/session/library.py): the window's door to conversation rows.
Every change and read runs on the library's own thread, on its own connection, in order,
and answers through a future; a bad id is the storage's one-sentence error there."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.errors import LlamaDeskError
from app.session import Session
from app.session.library import THREAD_NAME
from app.storage import Database, Tab


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = Database.open(tmp_path / "chats.db")
    yield database
    database.close()


@pytest.fixture
def session(db: Database) -> Iterator[Session]:
    session = Session(None, db)
    yield session
    session.shutdown()
    assert session.join(10.0)


def test_changes_and_reads_run_on_the_library_thread(
    session: Session, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sqlite3

    seen: list[str] = []
    original = sqlite3.connect

    def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn: sqlite3.Connection = original(*args, **kwargs)
        conn.set_trace_callback(lambda _sql: seen.append(threading.current_thread().name))
        return conn

    monkeypatch.setattr(sqlite3, "connect", traced)
    door = session.library
    assert door is not None
    conv = door.create(system_prompt="Be brief.", sampling={"temperature": 0.2}).result(5)
    door.rename(conv.id, "Plans").result(5)
    door.set_pinned(conv.id, True).result(5)
    assert door.conversation(conv.id).result(5).title == "Plans"
    changed = door.update_settings(conv.id, system_prompt="Be kind.", sampling={}).result(5)
    assert changed.system_prompt == "Be kind." and changed.sampling == {}
    door.save_tabs([Tab(conv.id, 0, None)], conv.id).result(5)
    assert seen and set(seen) <= {THREAD_NAME}, set(seen)
    # the window's own connection sees what the library wrote
    assert db.get_conversation(conv.id).title == "Plans"
    assert db.load_tabs()[1] == conv.id


def test_branch_fork_delete_and_restore(session: Session, db: Database) -> None:
    door = session.library
    assert door is not None
    conv = db.create_conversation("Q")
    question = db.add_message(conv.id, "user", "Hello?")
    first = db.add_message(conv.id, "assistant", "Hi.", parent_id=question.id)
    second = db.add_message(conv.id, "assistant", "Hello!", parent_id=question.id)
    assert door.show_branch(conv.id, first.id).result(5) == first.id
    assert [m.id for m in door.thread(conv.id).result(5)] == [question.id, first.id]
    positions = door.sibling_positions([question.id, first.id, second.id]).result(5)
    assert positions == {question.id: (1, 1), first.id: (1, 2), second.id: (2, 2)}
    fork = door.fork(conv.id, first.id).result(5)
    assert [m.content for m in door.thread(fork.id).result(5)] == ["Hello?", "Hi."]
    door.delete(conv.id).result(5)
    assert conv.id not in [c.id for c in door.listing().result(5)]
    door.restore(conv.id).result(5)
    assert conv.id in [c.id for c in door.listing().result(5)]


def test_a_bad_id_is_a_sentence_and_the_door_goes_on(session: Session) -> None:
    door = session.library
    assert door is not None
    with pytest.raises(LlamaDeskError) as caught:
        door.rename(4242, "Nope").result(5)
    assert str(caught.value).endswith(".")
    assert door.create("After").result(5).title == "After"


def test_a_closed_library_refuses_with_a_sentence(db: Database) -> None:
    session = Session(None, db)
    door = session.library
    assert door is not None
    session.shutdown()
    assert session.join(10.0)
    with pytest.raises(LlamaDeskError, match="closed"):
        door.create("Late").result(5)


def test_a_session_without_a_database_has_no_library() -> None:
    session = Session()
    try:
        assert session.library is None
    finally:
        session.shutdown()
        assert session.join(10.0)


def test_an_import_runs_on_the_callers_thread_not_the_librarys(
    session: Session, db: Database
) -> None:
    """A long import does not hold the library's thread (the window's reads wait there)."""
    from app.storage.export import export_json

    door = session.library
    assert door is not None
    conv = db.create_conversation("Original")
    db.add_message(conv.id, "user", "Hello?")
    data = export_json(db, [conv.id])
    seen: list[str] = []
    original = db.clone

    def clone() -> Database:
        seen.append(threading.current_thread().name)
        return original()

    db.clone = clone  # type: ignore[method-assign]
    (imported,) = door.import_data(data)
    assert seen == [threading.current_thread().name]
    assert [m.content for m in door.thread(imported).result(5)] == ["Hello?"]
    assert imported != conv.id


def test_only_an_unused_conversation_is_deleted_when_its_tab_closes(
    session: Session, db: Database
) -> None:
    """A tab may show nothing of a conversation that holds messages (its thread did not
    load, or a message was recorded after it looked): closing it must not trash them."""
    door = session.library
    assert door is not None
    used = door.create(system_prompt="", sampling={}).result(5)
    db.add_message(used.id, "user", "keep me")  # written by another connection
    assert door.delete_if_unused(used.id).result(5) is False
    assert db.get_conversation(used.id).message_count == 1
    unused = door.create(system_prompt="", sampling={}).result(5)
    assert door.delete_if_unused(unused.id).result(5) is True
    with pytest.raises(LlamaDeskError):
        db.get_conversation(unused.id)
