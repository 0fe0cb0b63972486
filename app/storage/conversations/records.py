"""Conversations as records: create, read, list, rename, pin, archive, settings, soft
delete with undo, and purge."""

from __future__ import annotations

import enum
import sqlite3
from collections.abc import Mapping
from typing import Any, cast

from app.storage._core import DatabaseCore
from app.storage.conversations.rows import CONVERSATION_COLUMNS, conversation_from_row, json_dump
from app.storage.errors import NotFoundError
from app.storage.models import DEFAULT_TITLE, Conversation

TITLE_LENGTH = 50


class _Unset(enum.Enum):
    UNSET = 0


UNSET = _Unset.UNSET
"""Marks an argument of :meth:`update_conversation_settings` that should not change."""


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


class ConversationRecordsMixin(DatabaseCore):
    """The conversations themselves (their messages: :class:`MessagesMixin`)."""

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
                    json_dump(sampling or {}),
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
            f"SELECT {CONVERSATION_COLUMNS} FROM conversations c WHERE c.id = ?",
            (conversation_id,),
        )
        if row is None or (row["deleted_at"] is not None and not include_deleted):
            raise NotFoundError(
                f"Conversation {conversation_id} does not exist (it may have been deleted); "
                "reload the list of conversations."
            )
        return conversation_from_row(row)

    def list_conversations(self, include_archived: bool = False) -> list[Conversation]:
        """Conversations not deleted: pinned first, then the most recently updated first."""
        where = "c.deleted_at IS NULL" + ("" if include_archived else " AND c.archived = 0")
        rows = self._all(
            f"SELECT {CONVERSATION_COLUMNS} FROM conversations c WHERE {where}"
            " ORDER BY c.pinned DESC, c.updated_at DESC, c.id DESC"
        )
        return [conversation_from_row(row) for row in rows]

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
            params.append(json_dump(sampling))
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
            f"SELECT {CONVERSATION_COLUMNS} FROM conversations c"
            " WHERE c.deleted_at IS NOT NULL ORDER BY c.deleted_at DESC"
        )
        return [conversation_from_row(row) for row in rows]

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
