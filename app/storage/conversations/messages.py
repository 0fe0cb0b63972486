"""The message tree of a conversation: adding messages (editing = a sibling), reading a
thread, moving between branches, deleting a branch, forking a conversation."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping
from typing import Any, cast

from app.storage.conversations.records import TITLE_LENGTH, ConversationRecordsMixin, make_title
from app.storage.conversations.rows import (
    MESSAGE_COLUMN_DEFAULTS,
    MESSAGE_COLUMN_NAMES,
    NewMessage,
    check_reasoning_ms,
    check_role_status,
    insert_message_row,
    json_dump,
    message_from_row,
)
from app.storage.errors import NotFoundError
from app.storage.models import Conversation, Message, Role, Status


def _missing(message_id: int) -> NotFoundError:
    return NotFoundError(
        f"Message {message_id} does not exist (it may have been deleted); reload the conversation."
    )


class MessagesMixin(ConversationRecordsMixin):
    """Messages and their tree (the streaming reply's steps: :class:`RepliesMixin`)."""

    _message_columns_sql: str | None = None

    @property
    def _message_columns(self) -> str:
        """The SELECT list for :func:`message_from_row`; on an older schema opened read-only, the
        columns it lacks are read as their defaults."""
        if self._message_columns_sql is None:
            names: Iterable[str] = MESSAGE_COLUMN_NAMES
            if self.read_only:
                present = {str(row[1]) for row in self._all("PRAGMA table_info(messages)")}
                names = (
                    name if name in present else MESSAGE_COLUMN_DEFAULTS.get(name, name)
                    for name in MESSAGE_COLUMN_NAMES
                )
            self._message_columns_sql = ", ".join(names)
        return self._message_columns_sql

    def get_message(self, message_id: int) -> Message:
        row = self._maybe_one(
            f"SELECT {self._message_columns} FROM messages WHERE id = ?", (message_id,)
        )
        if row is None:
            raise _missing(message_id)
        return message_from_row(row)

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
        check_role_status(str(role), str(status))
        check_reasoning_ms(reasoning_ms)
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

    def messages(self, conversation_id: int) -> list[Message]:
        """Every message of the conversation (all branches), oldest first."""
        rows = self._all(
            f"SELECT {self._message_columns} FROM messages WHERE conversation_id = ? ORDER BY id",
            (conversation_id,),
        )
        return [message_from_row(row) for row in rows]

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
        return [message_from_row(row) for row in rows]

    def children(self, message_id: int) -> list[Message]:
        """Direct replies to the message, oldest first (the branches below it)."""
        rows = self._all(
            f"SELECT {self._message_columns} FROM messages WHERE parent_id = ? ORDER BY id",
            (message_id,),
        )
        return [message_from_row(row) for row in rows]

    # The message's siblings (itself included) in one statement: another thread's writer
    # (the session's recorder drops a failed reply) can delete the message between two
    # reads, and a second read would then list siblings that no longer include it.
    _SIBLINGS_OF = """WITH target AS (SELECT conversation_id, parent_id FROM messages WHERE id = ?)
        SELECT {columns} FROM messages
        WHERE conversation_id = (SELECT conversation_id FROM target)
          AND parent_id IS (SELECT parent_id FROM target)
          AND EXISTS (SELECT 1 FROM target)
        ORDER BY id"""

    def siblings(self, message_id: int) -> list[Message]:
        """The message and its alternatives (same parent), oldest first."""
        rows = self._all(self._SIBLINGS_OF.format(columns=self._message_columns), (message_id,))
        if not rows:  # the message itself is one of them unless it is gone
            raise _missing(message_id)
        return [message_from_row(row) for row in rows]

    def sibling_position(self, message_id: int) -> tuple[int, int]:
        """(1-based index, count) among its siblings, for a "< 2/3 >" control.

        One statement, so one snapshot of the table: see ``_SIBLINGS_OF``."""
        row = self._maybe_one(
            """SELECT (SELECT count(*) FROM messages s
                       WHERE s.conversation_id = m.conversation_id
                         AND s.parent_id IS m.parent_id AND s.id <= m.id),
                      (SELECT count(*) FROM messages s
                       WHERE s.conversation_id = m.conversation_id
                         AND s.parent_id IS m.parent_id)
               FROM messages m WHERE m.id = ?""",
            (message_id,),
        )
        if row is None:
            raise _missing(message_id)
        return int(row[0]), int(row[1])

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

    def delete_message(self, message_id: int) -> None:
        """Delete one message and keep what is below it: its replies move up to its parent
        (a first message's become first messages), as a chat app's "delete this message"
        does (:meth:`delete_branch` deletes them too). A message without replies goes as
        :meth:`delete_branch` takes it (the parent's newest branch becomes current)."""
        message = self.get_message(message_id)
        children = self._all("SELECT id FROM messages WHERE parent_id = ?", (message_id,))
        if not children:
            self.delete_branch(message_id)
            return
        below = self.leaf_of(int(children[-1][0]))  # the newest branch under it
        with self.transaction() as conn:
            conn.execute(
                "UPDATE messages SET parent_id = ? WHERE parent_id = ?",
                (message.parent_id, message_id),
            )
            # a tab or the conversation that pointed at it shows the branch below
            conn.execute("UPDATE tabs SET leaf_id = ? WHERE leaf_id = ?", (below, message_id))
            conn.execute(
                "UPDATE conversations SET current_leaf_id = ? WHERE id = ? AND current_leaf_id = ?",
                (below, message.conversation_id, message_id),
            )
            conn.execute("DELETE FROM messages WHERE id = ?", (message_id,))
            conn.execute(
                "UPDATE conversations SET updated_at = ? WHERE id = ?",
                (self._now(), message.conversation_id),
            )

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
                    json_dump(source.sampling),
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
