"""Opening, pragmas, transactions, conversations, the message tree and tabs."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from app import paths
from app.storage import (
    DEFAULT_TITLE,
    SCHEMA_VERSION,
    Database,
    NotFoundError,
    ReadOnlyModeError,
    StorageError,
    Tab,
    make_title,
)


def test_open_creates_database_in_home_with_pragmas(home: Path) -> None:
    with Database.open() as db:
        assert db.path == paths.database_path()
        assert db.path.parent == home
        assert db.schema_version == SCHEMA_VERSION
        assert db._one("PRAGMA journal_mode")[0] == "wal"
        assert db._one("PRAGMA foreign_keys")[0] == 1
        assert db._one("PRAGMA synchronous")[0] == 2  # FULL
    raw = sqlite3.connect(home / "llamadesk.sqlite3")
    assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    raw.close()


def test_transaction_commits_and_rolls_back(db: Database) -> None:
    c = db.create_conversation("keep")
    with pytest.raises(RuntimeError), db.transaction() as conn:
        conn.execute("UPDATE conversations SET title = 'lost' WHERE id = ?", (c.id,))
        raise RuntimeError("boom")
    assert db.get_conversation(c.id).title == "keep"
    with db.transaction() as conn:
        conn.execute("UPDATE conversations SET title = 'outer' WHERE id = ?", (c.id,))
        with pytest.raises(RuntimeError), db.transaction() as inner:
            inner.execute("UPDATE conversations SET title = 'inner' WHERE id = ?", (c.id,))
            raise RuntimeError("inner fails")
        db.set_pinned(c.id, True)  # a method inside an outer transaction joins it
    got = db.get_conversation(c.id)
    assert (got.title, got.pinned) == ("outer", True)


def test_methods_inside_a_failed_transaction_are_rolled_back(db: Database) -> None:
    c = db.create_conversation()
    with pytest.raises(KeyError), db.transaction():
        db.add_message(c.id, "user", "never saved")
        raise KeyError("x")
    assert db.messages(c.id) == []


def test_conversation_crud_and_ordering(db: Database) -> None:
    a = db.create_conversation("A", system_prompt="be brief", sampling={"temperature": 0.2})
    b = db.create_conversation()
    c = db.create_conversation("C", model_path="/models/m.gguf")
    assert b.title == DEFAULT_TITLE and b.title_source == "default"
    assert a.sampling == {"temperature": 0.2} and a.system_prompt == "be brief"
    assert c.model_path == "/models/m.gguf"
    db.add_message(a.id, "user", "newest activity")
    assert [x.id for x in db.list_conversations()] == [a.id, c.id, b.id]
    db.set_pinned(b.id, True)
    assert [x.id for x in db.list_conversations()] == [b.id, a.id, c.id]
    db.set_archived(a.id, True)
    assert [x.id for x in db.list_conversations()] == [b.id, c.id]
    assert a.id in [x.id for x in db.list_conversations(include_archived=True)]
    db.rename(c.id, "  Renamed  ")
    assert db.get_conversation(c.id).title == "Renamed"
    got = db.update_conversation_settings(c.id, system_prompt="new", sampling={"top_k": 5})
    assert (got.system_prompt, got.sampling, got.model_path) == (
        "new",
        {"top_k": 5},
        "/models/m.gguf",
    )
    got = db.update_conversation_settings(c.id, model_path=None)
    assert got.model_path is None and got.system_prompt == "new"
    with pytest.raises(NotFoundError):
        db.get_conversation(9999)
    with pytest.raises(NotFoundError):
        db.rename(9999, "x")


def test_auto_title_from_first_user_message_unless_renamed(db: Database) -> None:
    c = db.create_conversation()
    db.add_message(c.id, "system", "You are helpful.")
    long = "  Please   explain\nthe difference between llamas and alpacas in detail, thanks  "
    m = db.add_message(c.id, "user", long)
    title = db.get_conversation(c.id).title
    assert title == make_title(long) and len(title) <= 50 and title.endswith("…")
    assert "\n" not in title and title.startswith("Please explain the difference")
    db.add_message(c.id, "user", "second message does not retitle", parent_id=m.id)
    assert db.get_conversation(c.id).title == title
    renamed = db.create_conversation()
    db.rename(renamed.id, "Mine")
    db.add_message(renamed.id, "user", "hello")
    assert db.get_conversation(renamed.id).title == "Mine"
    db.rename(renamed.id, "")  # back to automatic
    assert db.get_conversation(renamed.id).title == "hello"
    assert make_title("short") == "short"
    assert make_title("   ") == DEFAULT_TITLE


def test_an_edited_first_message_retitles_unless_the_user_named_it(db: Database) -> None:
    c = db.create_conversation()
    first = db.add_message(c.id, "user", "llamas")
    reply = db.add_message(c.id, "assistant", "yes", parent_id=first.id)
    db.add_message(c.id, "user", "and alpacas?", parent_id=reply.id)
    assert db.get_conversation(c.id).title == "llamas"
    db.add_message(c.id, "user", "vicuñas, then")  # the edit: a sibling of the first
    assert db.get_conversation(c.id).title == "vicuñas, then"
    db.rename(c.id, "My animals")
    db.add_message(c.id, "user", "guanacos")
    assert db.get_conversation(c.id).title == "My animals"


def test_soft_delete_undo_and_purge(db: Database) -> None:
    c = db.create_conversation("gone")
    m = db.add_message(c.id, "user", "secret llama")
    db.save_tabs([Tab(c.id, 0, m.id)], c.id)
    db.delete_conversation(c.id)
    assert db.list_conversations() == [] and db.search("llama") == []
    assert db.load_tabs() == ([], None)
    with pytest.raises(NotFoundError):
        db.get_conversation(c.id)
    with pytest.raises(NotFoundError):
        db.add_message(c.id, "user", "x")
    assert [x.id for x in db.list_deleted()] == [c.id]
    db.restore_conversation(c.id)
    assert [x.title for x in db.list_conversations()] == ["gone"]
    assert db.load_tabs() == ([Tab(c.id, 0, m.id)], c.id)
    db.delete_conversation(c.id)
    assert db.purge_deleted(older_than_seconds=3600) == []
    assert db.purge_deleted() == [c.id]
    with pytest.raises(NotFoundError):
        db.restore_conversation(c.id)
    assert db._one("SELECT count(*) FROM messages")[0] == 0
    assert db._one("SELECT count(*) FROM tabs")[0] == 0
    assert db.integrity_check() == []


def test_message_tree_edit_regenerate_and_navigate(db: Database) -> None:
    c = db.create_conversation()
    u1 = db.add_message(c.id, "user", "hi")
    a1 = db.add_message(c.id, "assistant", "hello", parent_id=u1.id)
    u2 = db.add_message(c.id, "user", "how are you", parent_id=a1.id)
    a2 = db.add_message(c.id, "assistant", "fine", parent_id=u2.id)
    assert [m.id for m in db.get_thread(c.id)] == [u1.id, a1.id, u2.id, a2.id]
    # Regenerate a1: a sibling reply; the old branch stays.
    a1b = db.begin_reply(c.id, u1.id)
    db.finish_reply(a1b.id, "hey")
    assert db.get_conversation(c.id).current_leaf_id == a1b.id
    assert [m.id for m in db.get_thread(c.id)] == [u1.id, a1b.id]
    assert [m.id for m in db.siblings(a1.id)] == [a1.id, a1b.id]
    assert db.sibling_position(a1b.id) == (2, 2)
    assert [m.id for m in db.children(u1.id)] == [a1.id, a1b.id]
    # Edit u1: a new root sibling.
    u1b = db.add_message(c.id, "user", "hi (edited)")
    assert db.sibling_position(u1b.id) == (2, 2)
    # Switch back to the first branch at its newest leaf.
    assert db.leaf_of(a1.id) == a2.id
    db.set_current_leaf(c.id, db.leaf_of(a1.id))
    assert [m.content for m in db.get_thread(c.id)] == ["hi", "hello", "how are you", "fine"]
    assert [m.id for m in db.get_thread(c.id, u2.id)] == [u1.id, a1.id, u2.id]
    other = db.create_conversation()
    with pytest.raises(NotFoundError):
        db.get_thread(other.id, a2.id)
    with pytest.raises(NotFoundError):
        db.add_message(other.id, "user", "x", parent_id=a2.id)
    with pytest.raises(NotFoundError):
        db.set_current_leaf(other.id, a2.id)
    with pytest.raises(ValueError):
        db.add_message(c.id, "robot", "x")
    assert db.get_thread(other.id) == []


def test_delete_branch_moves_current_leaf(db: Database) -> None:
    c = db.create_conversation()
    u = db.add_message(c.id, "user", "q")
    a = db.add_message(c.id, "assistant", "a", parent_id=u.id)
    b = db.add_message(c.id, "assistant", "b", parent_id=u.id)
    bb = db.add_message(c.id, "user", "bb", parent_id=b.id)
    db.save_tabs([Tab(c.id, 0, bb.id)], c.id)
    assert sorted(db.delete_branch(b.id)) == [b.id, bb.id]
    assert db.get_conversation(c.id).current_leaf_id == a.id
    assert db.load_tabs() == ([Tab(c.id, 0, None)], c.id)
    assert db.get_thread(c.id, None)[-1].id == a.id
    db.delete_branch(u.id)
    assert db.get_thread(c.id) == [] and db.get_conversation(c.id).current_leaf_id is None


def test_deep_tree_thread_and_delete(db: Database) -> None:
    c = db.create_conversation()
    parent = None
    with db.transaction():
        for i in range(3000):
            parent = db.add_message(c.id, "user" if i % 2 == 0 else "assistant", f"m{i}", parent).id
    thread = db.get_thread(c.id)
    assert len(thread) == 3000 and thread[0].parent_id is None and thread[-1].id == parent
    assert db.leaf_of(thread[0].id) == parent
    db.delete_conversation(c.id)
    db.purge_deleted()
    assert db.integrity_check() == []


def test_streaming_reply_lifecycle(db: Database) -> None:
    c = db.create_conversation()
    u = db.add_message(c.id, "user", "count")
    r = db.begin_reply(c.id, u.id, model_path="/m/a.gguf")
    assert (r.status, r.content, r.model_path) == ("partial", "", "/m/a.gguf")
    assert db.get_conversation(c.id).model_path == "/m/a.gguf"
    assert db.update_reply(r.id, "1, 2")
    assert db.get_message(r.id).content == "1, 2"
    done = db.finish_reply(
        r.id,
        "1, 2, 3",
        "stopped",
        token_count=7,
        prompt_tokens=12,
        tokens_per_second=33.5,
        meta={"finish_reason": "user"},
    )
    assert (done.status, done.content, done.token_count, done.prompt_tokens) == (
        "stopped",
        "1, 2, 3",
        7,
        12,
    )
    assert done.tokens_per_second == 33.5 and done.meta == {"finish_reason": "user"}
    assert db.update_reply(r.id, "late flush") is False
    assert db.get_message(r.id).content == "1, 2, 3"
    with pytest.raises(NotFoundError):
        db.update_reply(12345, "x")
    with pytest.raises(NotFoundError):
        db.finish_reply(12345, "x")


def test_append_message_follows_current_leaf(db: Database) -> None:
    c = db.create_conversation()
    a = db.append_message(c.id, "user", "one")
    b = db.append_message(c.id, "assistant", "two")
    assert (a.parent_id, b.parent_id) == (None, a.id)


def test_fork_copies_thread_and_settings(db: Database) -> None:
    c = db.create_conversation(
        "Original", system_prompt="sys", sampling={"seed": 3}, model_path="/m"
    )
    u = db.add_message(c.id, "user", "q1")
    a = db.add_message(c.id, "assistant", "a1", parent_id=u.id, token_count=3)
    db.add_message(c.id, "user", "q2", parent_id=a.id)
    f = db.fork_conversation(c.id, a.id)
    assert f.id != c.id and f.title == "Original (fork)"
    assert (f.system_prompt, f.sampling, f.model_path) == ("sys", {"seed": 3}, "/m")
    thread = db.get_thread(f.id)
    assert [(m.role, m.content, m.token_count) for m in thread] == [
        ("user", "q1", None),
        ("assistant", "a1", 3),
    ]
    assert all(m.conversation_id == f.id for m in thread)
    assert len(db.messages(c.id)) == 3


def test_tabs_round_trip(db: Database) -> None:
    a = db.create_conversation()
    b = db.create_conversation()
    m = db.add_message(b.id, "user", "x")
    db.save_tabs([Tab(b.id, 5, m.id), Tab(a.id, 1), Tab(424242, 2)], active_conversation_id=b.id)
    assert db.load_tabs() == ([Tab(a.id, 0, None), Tab(b.id, 1, m.id)], b.id)
    db.save_tabs([], None)
    assert db.load_tabs() == ([], None)
    db.save_tabs([Tab(a.id, 0, m.id)], None)  # leaf of another conversation is dropped
    assert db.load_tabs() == ([Tab(a.id, 0, None)], None)


def test_tabs_survive_reopen(home: Path) -> None:
    with Database.open() as db:
        c = db.create_conversation()
        db.save_tabs([Tab(c.id, 0)], c.id)
    with Database.open() as db:
        assert db.load_tabs() == ([Tab(c.id, 0)], c.id)


def test_one_connection_per_thread_with_clone(db: Database) -> None:
    c = db.create_conversation()
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            with pytest.raises(sqlite3.ProgrammingError):
                db.get_conversation(c.id)
            mine = db.clone()
            try:
                u = mine.add_message(c.id, "user", "from worker")
                r = mine.begin_reply(c.id, u.id)
                for i in range(20):
                    mine.update_reply(r.id, "x" * i)
                mine.finish_reply(r.id, "done")
            finally:
                mine.close()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=worker)
    thread.start()
    for _ in range(50):  # the GUI thread keeps reading while the worker writes
        db.list_conversations()
        db.get_thread(c.id)
    thread.join()
    assert not errors
    assert [m.content for m in db.get_thread(c.id)] == ["from worker", "done"]


def test_read_only_mode_reads_but_never_writes(home: Path) -> None:
    with Database.open() as db:
        c = db.create_conversation("ro")
        db.add_message(c.id, "user", "readable llama")
    before = (home / "llamadesk.sqlite3").read_bytes()
    with Database.open(read_only=True) as ro:
        assert ro.read_only
        assert [x.title for x in ro.list_conversations()] == ["ro"]
        assert len(ro.search("llama")) == 1
        with pytest.raises(ReadOnlyModeError) as info:
            ro.rename(c.id, "changed")
        assert "read-only" in str(info.value)
    assert (home / "llamadesk.sqlite3").read_bytes() == before


def test_read_only_of_missing_database_is_a_clear_error(home: Path) -> None:
    with pytest.raises(StorageError, match="no conversation database"):
        Database.open(home / "nothing.sqlite3", read_only=True)
