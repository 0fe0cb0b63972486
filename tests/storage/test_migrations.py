"""Forward migrations, tested from the first schema."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from app.storage import SCHEMA_VERSION, Database, _core
from app.storage.schema import MIGRATIONS, split_statements


def _make_v1(path: Path) -> None:
    """A database exactly as the first release wrote it, with some data."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = WAL")
    for statement in split_statements(MIGRATIONS[0]):
        conn.execute(statement)
    conn.execute("PRAGMA user_version = 1")
    conn.execute(
        "INSERT INTO conversations (id, title, title_source, created_at, updated_at, sampling)"
        " VALUES (1, 'Old chat', 'user', 100.0, 200.0, '{\"temperature\": 0.5}')"
    )
    conn.execute(
        "INSERT INTO messages (id, conversation_id, parent_id, role, content, status,"
        " created_at, updated_at) VALUES (1, 1, NULL, 'user', 'Tell me about alpacas', "
        "'complete', 100.0, 100.0)"
    )
    conn.execute(
        "INSERT INTO messages (id, conversation_id, parent_id, role, content, status,"
        " created_at, updated_at, token_count) VALUES (2, 1, 1, 'assistant', "
        "'Alpacas are smaller than llamas.', 'complete', 101.0, 102.0, 9)"
    )
    conn.execute("UPDATE conversations SET current_leaf_id = 2 WHERE id = 1")
    conn.execute(
        "INSERT INTO tabs (position, conversation_id, leaf_id, active) VALUES (0, 1, 2, 1)"
    )
    conn.execute("INSERT INTO model_folders VALUES ('/models', 1.0)")
    conn.commit()
    conn.close()


def test_migrates_first_schema_keeping_data(home: Path) -> None:
    path = home / "llamadesk.sqlite3"
    _make_v1(path)
    with Database.open() as db:
        assert db.schema_version == SCHEMA_VERSION
        c = db.get_conversation(1)
        assert (c.title, c.sampling, c.current_leaf_id, c.deleted_at) == (
            "Old chat",
            {"temperature": 0.5},
            2,
            None,
        )
        thread = db.get_thread(1)
        assert [m.content for m in thread] == [
            "Tell me about alpacas",
            "Alpacas are smaller than llamas.",
        ]
        assert thread[1].token_count == 9 and thread[1].meta == {}
        hits = db.search("llamas")  # the FTS index was built from the existing messages
        assert [h.message_id for h in hits] == [2]
        assert db.load_tabs()[1] == 1
        assert db.list_folders() == ["/models"]
        db.delete_conversation(1)
        db.restore_conversation(1)
        assert db.integrity_check() == []
    backup = home / "llamadesk.sqlite3.before-schema-2"
    raw = sqlite3.connect(backup)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == 1
    assert raw.execute("SELECT count(*) FROM messages").fetchone()[0] == 2
    raw.close()
    with Database.open() as db:  # reopening does not migrate (or back up) again
        assert db.schema_version == SCHEMA_VERSION


def test_failed_migration_changes_nothing(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = home / "llamadesk.sqlite3"
    _make_v1(path)
    broken = (*MIGRATIONS[:1], MIGRATIONS[1] + "\nTHIS IS NOT SQL;\n")
    monkeypatch.setattr(_core, "MIGRATIONS", broken)
    with pytest.raises(sqlite3.Error):
        Database.open()
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == 1
    columns = [row[1] for row in raw.execute("PRAGMA table_info(conversations)")]
    assert "deleted_at" not in columns
    assert raw.execute("SELECT count(*) FROM messages").fetchone()[0] == 2
    raw.close()
    monkeypatch.setattr(_core, "MIGRATIONS", MIGRATIONS)
    with Database.open(path) as db:
        assert db.schema_version == SCHEMA_VERSION and len(db.messages(1)) == 2


def test_new_database_is_created_at_the_latest_version(home: Path) -> None:
    with Database.open() as db:
        assert db.schema_version == SCHEMA_VERSION == len(MIGRATIONS)
    assert not list(home.glob("*.before-schema-*"))


def _make_v2(path: Path) -> None:
    """A database exactly as schema 2 (before reasoning) left it, with some data."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = WAL")
    for script in MIGRATIONS[:2]:
        for statement in split_statements(script):
            conn.execute(statement)
    conn.execute("PRAGMA user_version = 2")
    conn.execute(
        "INSERT INTO conversations (id, title, title_source, created_at, updated_at)"
        " VALUES (1, 'Before reasoning', 'user', 100.0, 200.0)"
    )
    conn.execute(
        "INSERT INTO messages (id, conversation_id, parent_id, role, content, status,"
        " created_at, updated_at) VALUES (1, 1, NULL, 'user', 'Why are vicunas rare?', "
        "'complete', 100.0, 100.0)"
    )
    conn.execute(
        "INSERT INTO messages (id, conversation_id, parent_id, role, content, status,"
        " created_at, updated_at, token_count, meta) VALUES (2, 1, 1, 'assistant', "
        "'They were hunted for their wool.', 'complete', 101.0, 102.0, 8, '{\"k\": 1}')"
    )
    conn.execute("UPDATE conversations SET current_leaf_id = 2 WHERE id = 1")
    conn.commit()
    conn.close()


def test_v2_database_gains_reasoning_columns(home: Path) -> None:
    path = home / "llamadesk.sqlite3"
    _make_v2(path)
    with Database.open() as db:
        assert db.schema_version == SCHEMA_VERSION == 4
        old = db.get_thread(1)
        assert [(m.content, m.reasoning, m.reasoning_ms) for m in old] == [
            ("Why are vicunas rare?", "", None),
            ("They were hunted for their wool.", "", None),
        ]
        assert old[1].token_count == 8 and old[1].meta == {"k": 1}
        # The full-text index and its triggers survived; it still covers content only.
        assert [h.message_id for h in db.search("wool")] == [2]
        r = db.begin_reply(1, 2)
        db.update_reply(r.id, "", reasoning="thinking about guanacos")
        done = db.finish_reply(r.id, "Guanacos are wild.", reasoning_ms=1500.0)
        assert (done.reasoning, done.reasoning_ms) == ("thinking about guanacos", 1500.0)
        assert [h.message_id for h in db.search("guanacos")] == [r.id]  # the answer's word
        assert db.search("thinking") == []  # reasoning is not searched
        assert db.integrity_check() == []
    raw = sqlite3.connect(home / "llamadesk.sqlite3.before-schema-3")
    assert raw.execute("PRAGMA user_version").fetchone()[0] == 2
    columns = [row[1] for row in raw.execute("PRAGMA table_info(messages)")]
    assert "reasoning" not in columns
    raw.close()
    raw = sqlite3.connect(path)
    info = {row[1]: row for row in raw.execute("PRAGMA table_info(messages)")}
    assert (info["reasoning"][2], info["reasoning"][3], info["reasoning"][4]) == (
        "TEXT",
        1,
        "''",
    )
    assert (info["reasoning_ms"][2], info["reasoning_ms"][3]) == ("REAL", 0)
    assert raw.execute("SELECT reasoning, reasoning_ms FROM messages WHERE id = 1").fetchone() == (
        "",
        None,
    )
    raw.close()


def test_first_schema_migrates_through_every_step(home: Path) -> None:
    _make_v1(home / "llamadesk.sqlite3")
    with Database.open() as db:
        assert db.schema_version == SCHEMA_VERSION
        assert [(m.reasoning, m.reasoning_ms) for m in db.get_thread(1)] == [("", None)] * 2


def test_failed_reasoning_migration_keeps_schema_2(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = home / "llamadesk.sqlite3"
    _make_v2(path)
    broken = (*MIGRATIONS[:2], MIGRATIONS[2] + "\nTHIS IS NOT SQL;\n")
    monkeypatch.setattr(_core, "MIGRATIONS", broken)
    with pytest.raises(sqlite3.Error):
        Database.open()
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == 2
    columns = [row[1] for row in raw.execute("PRAGMA table_info(messages)")]
    assert "reasoning" not in columns and "reasoning_ms" not in columns
    raw.close()


def test_v2_database_is_readable_read_only_without_migrating(home: Path) -> None:
    """E.g. a read-only file this version cannot migrate: it is offered read-only mode."""
    path = home / "llamadesk.sqlite3"
    _make_v2(path)
    with Database.open(read_only=True) as ro:
        assert ro.schema_version == 2
        thread = ro.get_thread(1)
        assert [(m.content, m.reasoning, m.reasoning_ms) for m in thread] == [
            ("Why are vicunas rare?", "", None),
            ("They were hunted for their wool.", "", None),
        ]
        assert thread[1].meta == {"k": 1}
        assert len(ro.messages(1)) == 2 and len(ro.children(1)) == 1
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == 2
    raw.close()
