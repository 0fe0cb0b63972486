"""How conversations and messages are stored: their columns, rows to frozen records and back.

The one place that knows the ``conversations`` and ``messages`` columns (and what an older
schema opened read-only lacks), the JSON columns' encoding, and the checks on a message's
role, status and reasoning time before it is written.
"""

from __future__ import annotations

import json
import logging
import math
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from app.storage.models import (
    DEFAULT_TITLE,
    ROLES,
    STATUSES,
    Conversation,
    Message,
    Role,
    Status,
    TitleSource,
)

log = logging.getLogger(__name__)

CONVERSATION_COLUMNS = """
    c.id, c.title, c.title_source, c.created_at, c.updated_at, c.model_path,
    c.system_prompt, c.sampling, c.pinned, c.archived, c.current_leaf_id, c.deleted_at,
    (SELECT count(*) FROM messages m WHERE m.conversation_id = c.id) AS message_count
"""
MESSAGE_COLUMN_NAMES = (
    "id",
    "conversation_id",
    "parent_id",
    "role",
    "content",
    "status",
    "created_at",
    "updated_at",
    "token_count",
    "prompt_tokens",
    "tokens_per_second",
    "model_path",
    "meta",
    "reasoning",
    "reasoning_ms",
)
# What an older schema (only ever seen read-only: a writable database is migrated when it
# is opened) lacks, read as the value the migration would have given it.
MESSAGE_COLUMN_DEFAULTS = {
    "meta": "'{}' AS meta",
    "reasoning": "'' AS reasoning",
    "reasoning_ms": "NULL AS reasoning_ms",
}


def json_dump(value: Mapping[str, Any]) -> str:
    return json.dumps(dict(value), ensure_ascii=False, sort_keys=True)


class MessageRow(Protocol):
    """The stored fields of a message, as both :class:`Message` and an import spec have them."""

    # read-only properties, so that dataclasses with narrower field types match
    @property
    def role(self) -> str: ...
    @property
    def content(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def created_at(self) -> float: ...
    @property
    def updated_at(self) -> float: ...
    @property
    def token_count(self) -> int | None: ...
    @property
    def prompt_tokens(self) -> int | None: ...
    @property
    def tokens_per_second(self) -> float | None: ...
    @property
    def model_path(self) -> str | None: ...
    @property
    def meta(self) -> Mapping[str, Any]: ...
    @property
    def reasoning(self) -> str: ...
    @property
    def reasoning_ms(self) -> float | None: ...


@dataclass(frozen=True)
class NewMessage:
    """A message about to be inserted, as a :class:`MessageRow` (``add_message``'s arguments,
    an imported message). ``reasoning``/``reasoning_ms`` are keyword-only, with defaults."""

    role: str
    content: str
    status: str
    created_at: float
    updated_at: float
    token_count: int | None
    prompt_tokens: int | None
    tokens_per_second: float | None
    model_path: str | None
    meta: Mapping[str, Any]
    reasoning: str = field(default="", kw_only=True)
    reasoning_ms: float | None = field(default=None, kw_only=True)


def insert_message_row(
    conn: sqlite3.Connection, conversation_id: int, parent_id: int | None, m: MessageRow
) -> int:
    """Copy a message (with its timestamps, figures and reasoning) under ``parent_id``;
    returns its id."""
    cur = conn.execute(
        "INSERT INTO messages (conversation_id, parent_id, role, content, status,"
        " created_at, updated_at, token_count, prompt_tokens, tokens_per_second,"
        " model_path, meta, reasoning, reasoning_ms)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            conversation_id,
            parent_id,
            m.role,
            m.content,
            m.status,
            m.created_at,
            m.updated_at,
            m.token_count,
            m.prompt_tokens,
            m.tokens_per_second,
            m.model_path,
            json_dump(m.meta),
            m.reasoning,
            m.reasoning_ms,
        ),
    )
    return int(cast(int, cur.lastrowid))


def json_load(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        log.warning("Ignoring unreadable JSON in the database: %.80r", text)
        return {}
    return value if isinstance(value, dict) else {}


def conversation_from_row(row: sqlite3.Row) -> Conversation:
    return Conversation(
        id=row["id"],
        title=row["title"] or DEFAULT_TITLE,
        title_source=cast(TitleSource, row["title_source"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        model_path=row["model_path"],
        system_prompt=row["system_prompt"],
        sampling=json_load(row["sampling"]),
        pinned=bool(row["pinned"]),
        archived=bool(row["archived"]),
        current_leaf_id=row["current_leaf_id"],
        deleted_at=row["deleted_at"],
        message_count=row["message_count"],
    )


def message_from_row(row: sqlite3.Row) -> Message:
    return Message(
        id=row["id"],
        conversation_id=row["conversation_id"],
        parent_id=row["parent_id"],
        role=cast(Role, row["role"]),
        content=row["content"],
        status=cast(Status, row["status"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        token_count=row["token_count"],
        prompt_tokens=row["prompt_tokens"],
        tokens_per_second=row["tokens_per_second"],
        model_path=row["model_path"],
        meta=json_load(row["meta"]),
        reasoning=row["reasoning"] or "",
        reasoning_ms=row["reasoning_ms"],
    )


def check_role_status(role: str, status: str) -> None:
    if role not in ROLES:
        raise ValueError(f"unknown message role {role!r}; expected one of {sorted(ROLES)}")
    if status not in STATUSES:
        raise ValueError(f"unknown message status {status!r}; expected one of {sorted(STATUSES)}")


def check_reasoning_ms(reasoning_ms: float | None) -> None:
    if reasoning_ms is None:
        return
    if (
        isinstance(reasoning_ms, bool)
        or not isinstance(reasoning_ms, int | float)
        or not math.isfinite(reasoning_ms)
        or reasoning_ms < 0
    ):
        raise ValueError(
            f"reasoning_ms must be a non-negative number or None, not {reasoning_ms!r}"
        )
