"""Conversations, the message tree, tabs and full-text search (a :class:`Database` part)."""

from __future__ import annotations

import enum
import json
import logging
import math
import re
import sqlite3
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from app.storage._core import DatabaseCore
from app.storage._snippet import has_all_terms, make_snippet, query_terms
from app.storage.errors import NotFoundError
from app.storage.models import (
    DEFAULT_TITLE,
    ROLES,
    STATUSES,
    Conversation,
    Message,
    Role,
    SearchHit,
    Status,
    Tab,
    TitleSource,
)

log = logging.getLogger(__name__)

TITLE_LENGTH = 50
SEARCH_WINDOW = 10_000
PREFIX_MIN_CHARS = 2
"""Above this many matching messages, only the most recent ones are ranked."""


class _Unset(enum.Enum):
    UNSET = 0


UNSET = _Unset.UNSET
"""Marks an argument of :meth:`update_conversation_settings` that should not change."""

_CONVERSATION_COLUMNS = """
    c.id, c.title, c.title_source, c.created_at, c.updated_at, c.model_path,
    c.system_prompt, c.sampling, c.pinned, c.archived, c.current_leaf_id, c.deleted_at,
    (SELECT count(*) FROM messages m WHERE m.conversation_id = c.id) AS message_count
"""
_MESSAGE_COLUMN_NAMES = (
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
_MESSAGE_COLUMN_DEFAULTS = {
    "meta": "'{}' AS meta",
    "reasoning": "'' AS reasoning",
    "reasoning_ms": "NULL AS reasoning_ms",
}


def make_title(text: str, length: int = TITLE_LENGTH) -> str:
    """A conversation title from a first message: one line, at most ``length`` characters,
    cut at a word boundary when possible, "…" when cut."""
    flat = " ".join(text.split())
    if not flat:
        return DEFAULT_TITLE
    if len(flat) <= length:
        return flat
    cut = flat[: length - 1]
    space = cut.rfind(" ")
    if space >= length // 2:
        cut = cut[:space]
    return cut.rstrip(" .,;:-") + "…"


def _query_words(text: str) -> list[str]:
    # NUL ends an FTS5 string early; control characters are never part of a word anyway.
    text = "".join(" " if unicodedata.category(ch) == "Cc" else ch for ch in text)
    words = [w for w in re.split(r"\s+", text.strip()) if w]
    # Words without any letter or digit tokenize to nothing; drop them (else nothing matches).
    return [w for w in words if any(ch.isalnum() for ch in w)]


def _prefix_last(words: list[str]) -> bool:
    # A one-character prefix matches so many words that ranking them is slow and useless.
    return bool(words) and len(words[-1]) >= PREFIX_MIN_CHARS


def fts_query(text: str) -> str | None:
    """User text -> a safe FTS5 query: every word is a quoted phrase (so ``"``, ``*``,
    ``AND``, ``:``... are just text); all words must match; the last one also matches as a
    prefix (if it has at least two characters) so that search-as-you-type finds "llam" in
    "llama". None when there is no word."""
    words = _query_words(text)
    if not words:
        return None
    quoted = ['"' + w.replace('"', '""') + '"' for w in words]
    if _prefix_last(words):
        quoted[-1] += " *"
    return " ".join(quoted)


def _json_dump(value: Mapping[str, Any]) -> str:
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


@dataclass(frozen=True, slots=True)
class ConversationMatch:
    """A conversation found by :meth:`ConversationsMixin.search_conversations`: its
    best-ranked matching message (``hit``) and how many of its messages match."""

    hit: SearchHit
    matches: int


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
            _json_dump(m.meta),
            m.reasoning,
            m.reasoning_ms,
        ),
    )
    return int(cast(int, cur.lastrowid))


def _json_load(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        log.warning("Ignoring unreadable JSON in the database: %.80r", text)
        return {}
    return value if isinstance(value, dict) else {}


def _conversation(row: sqlite3.Row) -> Conversation:
    return Conversation(
        id=row["id"],
        title=row["title"] or DEFAULT_TITLE,
        title_source=cast(TitleSource, row["title_source"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        model_path=row["model_path"],
        system_prompt=row["system_prompt"],
        sampling=_json_load(row["sampling"]),
        pinned=bool(row["pinned"]),
        archived=bool(row["archived"]),
        current_leaf_id=row["current_leaf_id"],
        deleted_at=row["deleted_at"],
        message_count=row["message_count"],
    )


def _message(row: sqlite3.Row) -> Message:
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
        meta=_json_load(row["meta"]),
        reasoning=row["reasoning"] or "",
        reasoning_ms=row["reasoning_ms"],
    )


def _check_role_status(role: str, status: str) -> None:
    if role not in ROLES:
        raise ValueError(f"unknown message role {role!r}; expected one of {sorted(ROLES)}")
    if status not in STATUSES:
        raise ValueError(f"unknown message status {status!r}; expected one of {sorted(STATUSES)}")


def _check_reasoning_ms(reasoning_ms: float | None) -> None:
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


class ConversationsMixin(DatabaseCore):
    """Conversations, messages, tabs and search."""

    _message_columns_sql: str | None = None

    @property
    def _message_columns(self) -> str:
        """The SELECT list for :func:`_message`; on an older schema opened read-only, the
        columns it lacks are read as their defaults."""
        if self._message_columns_sql is None:
            names: Iterable[str] = _MESSAGE_COLUMN_NAMES
            if self.read_only:
                present = {str(row[1]) for row in self._all("PRAGMA table_info(messages)")}
                names = (
                    name if name in present else _MESSAGE_COLUMN_DEFAULTS.get(name, name)
                    for name in _MESSAGE_COLUMN_NAMES
                )
            self._message_columns_sql = ", ".join(names)
        return self._message_columns_sql

    # -- conversations -------------------------------------------------------------------

    def create_conversation(
        self,
        title: str | None = None,
        *,
        system_prompt: str = "",
        sampling: Mapping[str, Any] | None = None,
        model_path: str | None = None,
    ) -> Conversation:
        """A new empty conversation. Without ``title`` it is titled from the first user
        message."""
        now = self._now()
        source = "user" if title and title.strip() else "default"
        with self.transaction() as conn:
            cur = conn.execute(
                "INSERT INTO conversations (title, title_source, created_at, updated_at,"
                " model_path, system_prompt, sampling) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    title.strip() if source == "user" and title else "",
                    source,
                    now,
                    now,
                    model_path,
                    system_prompt,
                    _json_dump(sampling or {}),
                ),
            )
            new_id = int(cast(int, cur.lastrowid))
        return self.get_conversation(new_id)

    def get_conversation(
        self, conversation_id: int, *, include_deleted: bool = False
    ) -> Conversation:
        """The conversation, or :class:`NotFoundError` (also when soft-deleted, unless
        ``include_deleted``)."""
        row = self._maybe_one(
            f"SELECT {_CONVERSATION_COLUMNS} FROM conversations c WHERE c.id = ?",
            (conversation_id,),
        )
        if row is None or (row["deleted_at"] is not None and not include_deleted):
            raise NotFoundError(
                f"Conversation {conversation_id} does not exist (it may have been deleted); "
                "reload the list of conversations."
            )
        return _conversation(row)

    def list_conversations(self, include_archived: bool = False) -> list[Conversation]:
        """Conversations not deleted: pinned first, then the most recently updated first."""
        where = "c.deleted_at IS NULL" + ("" if include_archived else " AND c.archived = 0")
        rows = self._all(
            f"SELECT {_CONVERSATION_COLUMNS} FROM conversations c WHERE {where}"
            " ORDER BY c.pinned DESC, c.updated_at DESC, c.id DESC"
        )
        return [_conversation(row) for row in rows]

    def _update_conversation(self, conversation_id: int, sql: str, params: tuple[Any, ...]) -> None:
        with self.transaction() as conn:
            cur = conn.execute(
                f"UPDATE conversations SET {sql} WHERE id = ? AND deleted_at IS NULL",
                (*params, conversation_id),
            )
            if cur.rowcount == 0:
                self.get_conversation(conversation_id)  # raises NotFoundError

    def rename(self, conversation_id: int, title: str) -> None:
        """Set the title for good; an empty title goes back to the automatic one."""
        title = title.strip()
        if title:
            self._update_conversation(conversation_id, "title = ?, title_source = 'user'", (title,))
            return
        with self.transaction():
            first = self._maybe_one(
                "SELECT content FROM messages WHERE conversation_id = ? AND role = 'user'"
                " ORDER BY id LIMIT 1",
                (conversation_id,),
            )
            if first is None:
                self._update_conversation(
                    conversation_id, "title = '', title_source = 'default'", ()
                )
            else:
                self._update_conversation(
                    conversation_id,
                    "title = ?, title_source = 'auto'",
                    (make_title(first["content"]),),
                )

    def set_pinned(self, conversation_id: int, pinned: bool) -> None:
        self._update_conversation(conversation_id, "pinned = ?", (int(pinned),))

    def set_archived(self, conversation_id: int, archived: bool) -> None:
        self._update_conversation(conversation_id, "archived = ?", (int(archived),))

    def update_conversation_settings(
        self,
        conversation_id: int,
        *,
        system_prompt: str | _Unset = UNSET,
        sampling: Mapping[str, Any] | _Unset = UNSET,
        model_path: str | _Unset | None = UNSET,
    ) -> Conversation:
        """Change any of system prompt, sampling dict (replaced whole) and model path
        (None clears it); arguments left out keep their value."""
        sets: list[str] = []
        params: list[Any] = []
        if not isinstance(system_prompt, _Unset):
            sets.append("system_prompt = ?")
            params.append(system_prompt)
        if not isinstance(sampling, _Unset):
            sets.append("sampling = ?")
            params.append(_json_dump(sampling))
        if not isinstance(model_path, _Unset):
            sets.append("model_path = ?")
            params.append(model_path)
        if sets:
            self._update_conversation(conversation_id, ", ".join(sets), tuple(params))
        return self.get_conversation(conversation_id)

    def delete_conversation(self, conversation_id: int) -> None:
        """Soft delete: the conversation disappears from lists, tabs and search until
        :meth:`restore_conversation` (the GUI's "Undo") or :meth:`purge_deleted`."""
        self._update_conversation(conversation_id, "deleted_at = ?", (self._now(),))

    def restore_conversation(self, conversation_id: int) -> Conversation:
        """Undo :meth:`delete_conversation` (NotFoundError once purged)."""
        with self.transaction() as conn:
            cur = conn.execute(
                "UPDATE conversations SET deleted_at = NULL WHERE id = ?", (conversation_id,)
            )
            if cur.rowcount == 0:
                raise NotFoundError(
                    f"Conversation {conversation_id} was deleted for good and cannot be restored."
                )
        return self.get_conversation(conversation_id)

    def list_deleted(self) -> list[Conversation]:
        """Soft-deleted conversations, most recently deleted first."""
        rows = self._all(
            f"SELECT {_CONVERSATION_COLUMNS} FROM conversations c"
            " WHERE c.deleted_at IS NOT NULL ORDER BY c.deleted_at DESC"
        )
        return [_conversation(row) for row in rows]

    def purge_deleted(self, older_than_seconds: float = 0.0) -> list[int]:
        """Delete for good conversations soft-deleted at least ``older_than_seconds`` ago;
        returns their ids (call ``StateStore.delete`` for each). The GUI calls this at exit."""
        cutoff = self._now() - older_than_seconds
        with self.transaction() as conn:
            ids = [
                int(row[0])
                for row in conn.execute(
                    "SELECT id FROM conversations WHERE deleted_at IS NOT NULL AND deleted_at <= ?",
                    (cutoff,),
                )
            ]
            for conversation_id in ids:
                self._hard_delete(conn, conversation_id)
        return ids

    def _hard_delete(self, conn: sqlite3.Connection, conversation_id: int) -> None:
        conn.execute(
            "UPDATE conversations SET current_leaf_id = NULL WHERE id = ?", (conversation_id,)
        )
        conn.execute("DELETE FROM tabs WHERE conversation_id = ?", (conversation_id,))
        # Children before parents is not needed: parent_id has no ON DELETE action and the
        # constraint is checked when the statement ends.
        conn.execute("DELETE FROM messages WHERE conversation_id = ?", (conversation_id,))
        conn.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))

    # -- messages ------------------------------------------------------------------------

    def get_message(self, message_id: int) -> Message:
        row = self._maybe_one(
            f"SELECT {self._message_columns} FROM messages WHERE id = ?", (message_id,)
        )
        if row is None:
            raise NotFoundError(
                f"Message {message_id} does not exist (it may have been deleted); reload the "
                "conversation."
            )
        return _message(row)

    def _check_parent(
        self, conn: sqlite3.Connection, conversation_id: int, parent_id: int | None
    ) -> None:
        row = conn.execute(
            "SELECT deleted_at FROM conversations WHERE id = ?", (conversation_id,)
        ).fetchone()
        if row is None or row[0] is not None:
            self.get_conversation(conversation_id)  # raises NotFoundError
        if parent_id is not None:
            parent = conn.execute(
                "SELECT conversation_id FROM messages WHERE id = ?", (parent_id,)
            ).fetchone()
            if parent is None or parent[0] != conversation_id:
                raise NotFoundError(
                    f"Message {parent_id} is not part of conversation {conversation_id}; "
                    "reload the conversation and try again."
                )

    def add_message(
        self,
        conversation_id: int,
        role: Role | str,
        content: str,
        parent_id: int | None = None,
        status: Status | str = "complete",
        *,
        token_count: int | None = None,
        prompt_tokens: int | None = None,
        tokens_per_second: float | None = None,
        model_path: str | None = None,
        meta: Mapping[str, Any] | None = None,
        make_current: bool = True,
        reasoning: str = "",
        reasoning_ms: float | None = None,
    ) -> Message:
        """Insert and commit a message (``parent_id`` None makes a root). It becomes the
        conversation's current leaf unless ``make_current=False``; the first user message
        titles an untitled conversation. Editing a message = adding a sibling (same
        ``parent_id``). ``reasoning``: a reasoning model's thinking before ``content``,
        ``reasoning_ms`` how long it took (None: unknown)."""
        _check_role_status(str(role), str(status))
        _check_reasoning_ms(reasoning_ms)
        now = self._now()
        with self.transaction() as conn:
            self._check_parent(conn, conversation_id, parent_id)
            row = NewMessage(
                str(role),
                content,
                str(status),
                now,
                now,
                token_count,
                prompt_tokens,
                tokens_per_second,
                model_path,
                meta or {},
                reasoning=reasoning,
                reasoning_ms=reasoning_ms,
            )
            message_id = insert_message_row(conn, conversation_id, parent_id, row)
            sets = ["updated_at = ?"]
            params: list[Any] = [now]
            if make_current:
                sets.append("current_leaf_id = ?")
                params.append(message_id)
            if model_path is not None and role == "assistant":
                sets.append("model_path = ?")
                params.append(model_path)
            if role == "user":
                # The first message titles an untitled conversation; an edit of the first
                # message (a new root) retitles it, unless the user named it.
                sets.append(
                    "title = CASE WHEN title_source = 'default'"
                    " OR (title_source = 'auto' AND ?) THEN ? ELSE title END,"
                    " title_source = CASE WHEN title_source = 'default' THEN 'auto'"
                    " ELSE title_source END"
                )
                params.extend([parent_id is None and make_current, make_title(content)])
            conn.execute(
                f"UPDATE conversations SET {', '.join(sets)} WHERE id = ?",
                (*params, conversation_id),
            )
        return self.get_message(message_id)

    def append_message(self, conversation_id: int, role: Role | str, content: str) -> Message:
        """:meth:`add_message` after the conversation's current leaf."""
        leaf = self.get_conversation(conversation_id).current_leaf_id
        return self.add_message(conversation_id, role, content, parent_id=leaf)

    def begin_reply(
        self,
        conversation_id: int,
        parent_id: int | None,
        *,
        model_path: str | None = None,
        role: Role | str = "assistant",
    ) -> Message:
        """An empty reply with status "partial", committed before generation starts.
        Regenerating = another ``begin_reply`` with the same parent (a new sibling)."""
        return self.add_message(
            conversation_id, role, "", parent_id, "partial", model_path=model_path
        )

    def update_reply(
        self,
        message_id: int,
        content: str,
        *,
        reasoning: str | None = None,
        reasoning_ms: float | None = None,
    ) -> bool:
        """Save the text streamed so far (one small transaction; call it every ~0.3 s):
        the answer ``content`` and, from a reasoning model, the ``reasoning`` so far and,
        once the thinking has ended, ``reasoning_ms``. None leaves the stored value as it
        is. Returns False if the reply was already finished (then nothing changes)."""
        _check_reasoning_ms(reasoning_ms)
        with self.transaction() as conn:
            cur = conn.execute(
                "UPDATE messages SET content = ?, updated_at = ?,"
                " reasoning = coalesce(?, reasoning), reasoning_ms = coalesce(?, reasoning_ms)"
                " WHERE id = ? AND status = 'partial'",
                (content, self._now(), reasoning, reasoning_ms, message_id),
            )
            if cur.rowcount:
                return True
        self.get_message(message_id)  # NotFoundError if it is gone
        log.debug("update_reply(%d) after the reply was finished; ignored", message_id)
        return False

    def finish_reply(
        self,
        message_id: int,
        content: str,
        status: Status | str = "complete",
        *,
        token_count: int | None = None,
        prompt_tokens: int | None = None,
        tokens_per_second: float | None = None,
        meta: Mapping[str, Any] | None = None,
        reasoning: str | None = None,
        reasoning_ms: float | None = None,
    ) -> Message:
        """Store the final text, status ("complete", "stopped", "error") and figures, and a
        reasoning model's final ``reasoning`` and its duration ``reasoning_ms``; for these
        two, None keeps what :meth:`update_reply` stored (nothing: "" and None)."""
        _check_role_status("assistant", str(status))
        _check_reasoning_ms(reasoning_ms)
        now = self._now()
        with self.transaction() as conn:
            row = conn.execute(
                "SELECT conversation_id, meta FROM messages WHERE id = ?", (message_id,)
            ).fetchone()
            if row is None:
                self.get_message(message_id)  # raises NotFoundError
            merged = _json_load(row["meta"])
            merged.update(meta or {})
            conn.execute(
                "UPDATE messages SET content = ?, status = ?, updated_at = ?, token_count = ?,"
                " prompt_tokens = ?, tokens_per_second = ?, meta = ?,"
                " reasoning = coalesce(?, reasoning), reasoning_ms = coalesce(?, reasoning_ms)"
                " WHERE id = ?",
                (
                    content,
                    status,
                    now,
                    token_count,
                    prompt_tokens,
                    tokens_per_second,
                    _json_dump(merged),
                    reasoning,
                    reasoning_ms,
                    message_id,
                ),
            )
            conn.execute(
                "UPDATE conversations SET updated_at = ? WHERE id = ?",
                (now, row["conversation_id"]),
            )
        return self.get_message(message_id)

    def messages(self, conversation_id: int) -> list[Message]:
        """Every message of the conversation (all branches), oldest first."""
        rows = self._all(
            f"SELECT {self._message_columns} FROM messages WHERE conversation_id = ? ORDER BY id",
            (conversation_id,),
        )
        return [_message(row) for row in rows]

    def get_thread(self, conversation_id: int, leaf_id: int | None = None) -> list[Message]:
        """The path root -> ``leaf_id`` (default: the conversation's current leaf, or the
        newest branch if it has none). [] for an empty conversation."""
        if leaf_id is None:
            leaf_id = self.get_conversation(conversation_id, include_deleted=True).current_leaf_id
            if leaf_id is None:
                root = self._maybe_one(
                    "SELECT max(id) FROM messages WHERE conversation_id = ? AND parent_id IS NULL",
                    (conversation_id,),
                )
                if root is None or root[0] is None:
                    return []
                leaf_id = self.leaf_of(int(root[0]))
        rows = self._all(
            f"""WITH RECURSIVE path(id, depth) AS (
                    SELECT ?, 0
                    UNION ALL
                    SELECT m.parent_id, path.depth + 1 FROM messages m JOIN path ON m.id = path.id
                    WHERE m.parent_id IS NOT NULL
                )
                SELECT {self._message_columns} FROM path JOIN messages USING (id)
                ORDER BY path.depth DESC""",
            (leaf_id,),
        )
        if not rows or rows[0]["conversation_id"] != conversation_id:
            raise NotFoundError(
                f"Message {leaf_id} is not part of conversation {conversation_id}; reload the "
                "conversation."
            )
        return [_message(row) for row in rows]

    def children(self, message_id: int) -> list[Message]:
        """Direct replies to the message, oldest first (the branches below it)."""
        rows = self._all(
            f"SELECT {self._message_columns} FROM messages WHERE parent_id = ? ORDER BY id",
            (message_id,),
        )
        return [_message(row) for row in rows]

    def siblings(self, message_id: int) -> list[Message]:
        """The message and its alternatives (same parent), oldest first."""
        message = self.get_message(message_id)
        if message.parent_id is None:
            rows = self._all(
                f"SELECT {self._message_columns} FROM messages WHERE conversation_id = ?"
                " AND parent_id IS NULL ORDER BY id",
                (message.conversation_id,),
            )
        else:
            rows = self._all(
                f"SELECT {self._message_columns} FROM messages WHERE parent_id = ? ORDER BY id",
                (message.parent_id,),
            )
        return [_message(row) for row in rows]

    def sibling_position(self, message_id: int) -> tuple[int, int]:
        """(1-based index, count) among its siblings, for a "< 2/3 >" control."""
        ids = [m.id for m in self.siblings(message_id)]
        return ids.index(message_id) + 1, len(ids)

    def leaf_of(self, message_id: int) -> int:
        """The end of the newest branch below the message (itself if it has no replies);
        switch branch with ``set_current_leaf(cid, leaf_of(sibling.id))``."""
        row = self._maybe_one(
            """WITH RECURSIVE down(id, depth) AS (
                   SELECT ?, 0
                   UNION ALL
                   SELECT (SELECT max(c.id) FROM messages c WHERE c.parent_id = down.id),
                          down.depth + 1
                   FROM down WHERE down.id IS NOT NULL
               )
               SELECT id FROM down WHERE id IS NOT NULL ORDER BY depth DESC LIMIT 1""",
            (message_id,),
        )
        self.get_message(message_id)
        assert row is not None
        return int(row[0])

    def set_current_leaf(self, conversation_id: int, leaf_id: int) -> None:
        """Remember which branch the conversation shows (any message of it is accepted)."""
        message = self.get_message(leaf_id)
        if message.conversation_id != conversation_id:
            raise NotFoundError(
                f"Message {leaf_id} is not part of conversation {conversation_id}; reload the "
                "conversation."
            )
        self._update_conversation(conversation_id, "current_leaf_id = ?", (leaf_id,))

    def delete_branch(self, message_id: int) -> list[int]:
        """Delete the message and everything below it; returns the deleted ids. If the
        current leaf was among them, the parent's newest branch becomes current."""
        message = self.get_message(message_id)
        with self.transaction() as conn:
            ids = [
                int(row[0])
                for row in conn.execute(
                    """WITH RECURSIVE sub(id) AS (
                           SELECT ? UNION ALL
                           SELECT m.id FROM messages m JOIN sub ON m.parent_id = sub.id
                       ) SELECT id FROM sub""",
                    (message_id,),
                )
            ]
            current = conn.execute(
                "SELECT current_leaf_id FROM conversations WHERE id = ?",
                (message.conversation_id,),
            ).fetchone()[0]
            conn.executemany(
                "UPDATE tabs SET leaf_id = NULL WHERE leaf_id = ?", [(i,) for i in ids]
            )
            conn.execute(
                "UPDATE conversations SET current_leaf_id = NULL WHERE id = ?",
                (message.conversation_id,),
            )
            # Deepest first, so a parent never goes before its children.
            conn.executemany("DELETE FROM messages WHERE id = ?", [(i,) for i in reversed(ids)])
            if current is not None and current not in ids:
                new_leaf: int | None = current
            elif message.parent_id is not None:
                new_leaf = self.leaf_of(message.parent_id)
            else:
                root = conn.execute(
                    "SELECT max(id) FROM messages WHERE conversation_id = ? AND parent_id IS NULL",
                    (message.conversation_id,),
                ).fetchone()[0]
                new_leaf = self.leaf_of(int(root)) if root is not None else None
            conn.execute(
                "UPDATE conversations SET current_leaf_id = ?, updated_at = ? WHERE id = ?",
                (new_leaf, self._now(), message.conversation_id),
            )
        return ids

    def fork_conversation(self, conversation_id: int, up_to_message_id: int) -> Conversation:
        """A new conversation with the same settings holding a copy of the thread root ->
        ``up_to_message_id`` (one branch, statuses, figures and reasoning kept)."""
        source = self.get_conversation(conversation_id)
        thread = self.get_thread(conversation_id, up_to_message_id)
        now = self._now()
        with self.transaction() as conn:
            cur = conn.execute(
                "INSERT INTO conversations (title, title_source, created_at, updated_at,"
                " model_path, system_prompt, sampling) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    make_title(f"{source.title} (fork)", TITLE_LENGTH + 7),
                    "user" if source.title_source == "user" else "auto",
                    now,
                    now,
                    source.model_path,
                    source.system_prompt,
                    _json_dump(source.sampling),
                ),
            )
            new_id = int(cast(int, cur.lastrowid))
            parent: int | None = None
            for m in thread:
                parent = insert_message_row(conn, new_id, parent, m)
            conn.execute(
                "UPDATE conversations SET current_leaf_id = ? WHERE id = ?", (parent, new_id)
            )
        return self.get_conversation(new_id)

    # -- tabs ----------------------------------------------------------------------------

    def save_tabs(self, tabs: Iterable[Tab], active_conversation_id: int | None) -> None:
        """Replace the saved tab bar (called when it changes and at exit). Tabs whose
        conversation or leaf no longer exists are dropped / reset with a logged warning."""
        with self.transaction() as conn:
            conn.execute("DELETE FROM tabs")
            for position, tab in enumerate(sorted(tabs, key=lambda t: t.position)):
                row = conn.execute(
                    "SELECT deleted_at FROM conversations WHERE id = ?", (tab.conversation_id,)
                ).fetchone()
                if row is None:
                    log.warning("Not saving a tab of missing conversation %d", tab.conversation_id)
                    continue
                leaf = tab.leaf_id
                if leaf is not None:
                    owner = conn.execute(
                        "SELECT conversation_id FROM messages WHERE id = ?", (leaf,)
                    ).fetchone()
                    if owner is None or owner[0] != tab.conversation_id:
                        log.warning(
                            "Tab of conversation %d: unknown leaf %d", tab.conversation_id, leaf
                        )
                        leaf = None
                conn.execute(
                    "INSERT INTO tabs (position, conversation_id, leaf_id, active) VALUES (?, ?, ?, ?)",
                    (
                        position,
                        tab.conversation_id,
                        leaf,
                        int(tab.conversation_id == active_conversation_id),
                    ),
                )

    def load_tabs(self) -> tuple[list[Tab], int | None]:
        """(tabs in order with positions 0..n-1, active conversation id or None); tabs of
        soft-deleted conversations are left out."""
        rows = self._all(
            "SELECT t.conversation_id, t.leaf_id, t.active FROM tabs t"
            " JOIN conversations c ON c.id = t.conversation_id"
            " WHERE c.deleted_at IS NULL ORDER BY t.position"
        )
        tabs = [Tab(row[0], position, row[1]) for position, row in enumerate(rows)]
        active = next((int(row[0]) for row in rows if row[2]), None)
        return tabs, active

    # -- search --------------------------------------------------------------------------

    def _search_floor(self, query: str) -> int:
        """The lowest message id worth ranking for ``query``. bm25 costs about 1-2 us per
        matching message; a word in most of 100,000 messages would take ~150 ms. So when
        more than SEARCH_WINDOW messages match, only the most recent SEARCH_WINDOW of them
        are ranked (for such common words bm25 hardly discriminates anyway, and recent
        conversations are what people look for)."""
        row = self._maybe_one(
            "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?"
            " ORDER BY rowid DESC LIMIT 1 OFFSET ?",
            (query, SEARCH_WINDOW),
        )
        return int(row[0]) if row is not None else 0

    def search(
        self,
        text: str,
        limit: int = 50,
        *,
        marks: tuple[str, str] = ("[", "]"),
        include_archived: bool = True,
    ) -> list[SearchHit]:
        """Full-text search over all messages of conversations not deleted, best first.
        Any user text is safe (FTS syntax is quoted); every word must occur, the last one
        may be a prefix. ``marks`` surround the matches in the snippet."""
        query = fts_query(text)
        if query is None or limit <= 0:
            return []
        floor = self._search_floor(query)
        archived = "" if include_archived else " AND c.archived = 0"
        fetch = limit * 2 + 20
        while True:
            ranked = self._all(
                "SELECT rowid, bm25(messages_fts) AS score FROM messages_fts"
                " WHERE messages_fts MATCH ? AND rowid >= ? ORDER BY score LIMIT ?",
                (query, floor, fetch),
            )
            if not ranked:
                return []
            ids = [int(row[0]) for row in ranked]
            info = {
                int(row[0]): row
                for row in self._all(
                    "SELECT m.id, m.conversation_id, c.title, m.role, m.created_at, m.content"
                    " FROM messages m CROSS JOIN conversations c ON c.id = m.conversation_id"
                    f" WHERE m.id IN ({','.join('?' * len(ids))})"
                    f" AND c.deleted_at IS NULL{archived}",
                    ids,
                )
            }
            kept = [(int(row[0]), float(row[1])) for row in ranked if int(row[0]) in info]
            if len(kept) >= limit or len(ranked) < fetch:
                break
            fetch *= 4  # many hits were in deleted/archived conversations: look further
        kept = kept[:limit]
        words = _query_words(text)
        terms = query_terms(words)
        prefix = _prefix_last(words)
        hits = []
        for mid, score in kept:
            row = info[mid]
            hits.append(
                SearchHit(
                    conversation_id=int(row["conversation_id"]),
                    message_id=mid,
                    title=row["title"] or DEFAULT_TITLE,
                    role=cast(Role, row["role"]),
                    snippet=make_snippet(row["content"], terms, prefix, marks),
                    rank=score,
                    created_at=float(row["created_at"]),
                )
            )
        return hits

    def search_conversations(
        self,
        text: str,
        limit: int = 50,
        *,
        marks: tuple[str, str] = ("[", "]"),
        include_archived: bool = True,
    ) -> list[ConversationMatch]:
        """Like :meth:`search`, but one result per conversation (the sidebar's list): its
        best-ranked message and the number of its messages that match, best first. The
        same query rules and the same SEARCH_WINDOW cap on what is ranked."""
        query = fts_query(text)
        if query is None or limit <= 0:
            return []
        floor = self._search_floor(query)
        archived = "" if include_archived else " AND c.archived = 0"
        # Ranking and picking the best per conversation in one statement: the content of
        # only the kept messages is read (for their snippets), not of every match.
        rows = self._all(
            "WITH ranked AS (SELECT rowid AS id, bm25(messages_fts) AS score"
            "  FROM messages_fts WHERE messages_fts MATCH ? AND rowid >= ?),"
            " scored AS (SELECT r.id, r.score, m.conversation_id,"
            "  row_number() OVER (PARTITION BY m.conversation_id ORDER BY r.score, r.id DESC)"
            "   AS n,"
            "  count(*) OVER (PARTITION BY m.conversation_id) AS matches"
            "  FROM ranked r JOIN messages m ON m.id = r.id"
            "  JOIN conversations c ON c.id = m.conversation_id"
            f"  WHERE c.deleted_at IS NULL{archived})"
            " SELECT s.id, s.score, s.matches, s.conversation_id, c.title, m.role,"
            "  m.created_at, m.content"
            " FROM scored s JOIN messages m ON m.id = s.id"
            " JOIN conversations c ON c.id = s.conversation_id"
            " WHERE s.n = 1 ORDER BY s.score, s.id DESC LIMIT ?",
            (query, floor, limit),
        )
        words = _query_words(text)
        terms = query_terms(words)
        prefix = _prefix_last(words)
        found = [
            ConversationMatch(
                SearchHit(
                    conversation_id=int(row["conversation_id"]),
                    message_id=int(row["id"]),
                    title=row["title"] or DEFAULT_TITLE,
                    role=cast(Role, row["role"]),
                    snippet=make_snippet(row["content"], terms, prefix, marks),
                    rank=float(row["score"]),
                    created_at=float(row["created_at"]),
                ),
                int(row["matches"]),
            )
            for row in rows
        ]
        # A chat is also found by its title (a renamed one above all): those come first.
        titled = self._title_matches(terms, prefix, include_archived, limit)
        by_title = {m.hit.conversation_id: m for m in found if m.hit.conversation_id in titled}
        for cid in titled:
            if cid not in by_title:
                hit = self._first_message_hit(cid, terms, prefix, marks)
                if hit is not None:
                    by_title[cid] = ConversationMatch(hit, 0)
        first = [by_title[cid] for cid in titled if cid in by_title]
        rest = [m for m in found if m.hit.conversation_id not in by_title]
        return (first + rest)[:limit]

    def _title_matches(
        self, terms: list[str], prefix: bool, include_archived: bool, limit: int
    ) -> list[int]:
        """Conversations whose title holds every query term, most recently updated first."""
        archived = "" if include_archived else " AND archived = 0"
        rows = self._all(
            "SELECT id, title FROM conversations WHERE deleted_at IS NULL"
            f" AND title_source != 'default'{archived} ORDER BY updated_at DESC",
            (),
        )
        matched = [int(r["id"]) for r in rows if has_all_terms(r["title"] or "", terms, prefix)]
        return matched[:limit]

    def _first_message_hit(
        self, conversation_id: int, terms: list[str], prefix: bool, marks: tuple[str, str]
    ) -> SearchHit | None:
        row = self._maybe_one(
            "SELECT m.id, m.role, m.created_at, m.content, c.title FROM messages m"
            " JOIN conversations c ON c.id = m.conversation_id"
            " WHERE m.conversation_id = ? ORDER BY m.id LIMIT 1",
            (conversation_id,),
        )
        if row is None:
            return None  # an empty chat is not listed
        return SearchHit(
            conversation_id=conversation_id,
            message_id=int(row["id"]),
            title=row["title"] or DEFAULT_TITLE,
            role=cast(Role, row["role"]),
            snippet=make_snippet(row["content"], terms, prefix, marks),
            rank=0.0,
            created_at=float(row["created_at"]),
        )
