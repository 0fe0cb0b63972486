"""The database schema as a list of forward migrations.

``MIGRATIONS[i]`` takes a database from ``PRAGMA user_version`` *i* to *i + 1*; it runs
inside the same transaction that bumps ``user_version``, so a crash mid-migration leaves
the old version intact. Never edit a released migration: append a new one.
"""

from __future__ import annotations

# Version 1: the first schema (conversations, message tree, tabs, model library).
_V1 = """
CREATE TABLE conversations (
    id              INTEGER PRIMARY KEY,
    title           TEXT    NOT NULL DEFAULT '',
    title_source    TEXT    NOT NULL DEFAULT 'default'
                            CHECK (title_source IN ('default', 'auto', 'user')),
    created_at      REAL    NOT NULL,
    updated_at      REAL    NOT NULL,
    model_path      TEXT,
    system_prompt   TEXT    NOT NULL DEFAULT '',
    sampling        TEXT    NOT NULL DEFAULT '{}',
    pinned          INTEGER NOT NULL DEFAULT 0,
    archived        INTEGER NOT NULL DEFAULT 0,
    current_leaf_id INTEGER REFERENCES messages(id) ON DELETE SET NULL
);
CREATE TABLE messages (
    id                INTEGER PRIMARY KEY,
    conversation_id   INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    parent_id         INTEGER REFERENCES messages(id),
    role              TEXT    NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
    content           TEXT    NOT NULL,
    status            TEXT    NOT NULL
                              CHECK (status IN ('complete', 'partial', 'error', 'stopped')),
    created_at        REAL    NOT NULL,
    updated_at        REAL    NOT NULL,
    token_count       INTEGER,
    prompt_tokens     INTEGER,
    tokens_per_second REAL,
    model_path        TEXT
);
CREATE INDEX messages_by_conversation ON messages(conversation_id, id);
CREATE INDEX messages_by_parent ON messages(parent_id, id);
CREATE TABLE tabs (
    position        INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    leaf_id         INTEGER REFERENCES messages(id) ON DELETE SET NULL,
    active          INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE model_folders (
    path     TEXT PRIMARY KEY,
    added_at REAL NOT NULL
);
CREATE TABLE model_files (
    path       TEXT    PRIMARY KEY,
    folder     TEXT,
    size       INTEGER NOT NULL,
    mtime_ns   INTEGER NOT NULL,
    metadata   TEXT,
    error      TEXT,
    scanned_at REAL    NOT NULL,
    last_used  REAL
);
CREATE TABLE model_presets (
    model_path TEXT NOT NULL,
    name       TEXT NOT NULL,
    settings   TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (model_path, name)
);
"""

# Version 2: full-text search (FTS5, kept in step by triggers), soft delete with undo,
# free-form message metadata.
_V2 = """
ALTER TABLE conversations ADD COLUMN deleted_at REAL;
ALTER TABLE messages ADD COLUMN meta TEXT NOT NULL DEFAULT '{}';
CREATE VIRTUAL TABLE messages_fts USING fts5(
    content,
    content = 'messages',
    content_rowid = 'id',
    tokenize = 'unicode61 remove_diacritics 2'
);
CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
END;
CREATE TRIGGER messages_fts_update AFTER UPDATE OF content ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;
INSERT INTO messages_fts(messages_fts) VALUES ('rebuild');
"""

# Version 3: a reasoning model's "thinking" kept apart from its answer, and how long it took
# (NULL: unknown, or no reasoning). Full-text search stays on ``content`` only: reasoning
# is long, tentative text the user does not see by default, so its words would swamp the
# hits and point at messages whose visible answer does not contain them.
_V3 = """
ALTER TABLE messages ADD COLUMN reasoning TEXT NOT NULL DEFAULT '';
ALTER TABLE messages ADD COLUMN reasoning_ms REAL;
"""

# Version 4: which version of the metadata reader wrote a model file's cached metadata, so a
# newer reader (one that refuses files llama.cpp cannot load, say) reads old entries again.
_V4 = """
ALTER TABLE model_files ADD COLUMN reader INTEGER NOT NULL DEFAULT 0;
"""

MIGRATIONS: tuple[str, ...] = (_V1, _V2, _V3, _V4)
SCHEMA_VERSION = len(MIGRATIONS)


def split_statements(script: str) -> list[str]:
    """Split a migration script into complete statements (triggers contain ``;``)."""
    import sqlite3

    statements: list[str] = []
    current = ""
    for line in script.splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            if current.strip():
                statements.append(current.strip())
            current = ""
    if current.strip():
        raise ValueError(f"incomplete SQL statement in migration: {current!r}")
    return statements
