"""A reply while it streams: begun empty ("partial"), saved as it grows, finished with its
status and figures (a "partial" reply found while nothing generates was interrupted)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from app.storage.conversations.messages import MessagesMixin
from app.storage.conversations.rows import (
    check_reasoning_ms,
    check_role_status,
    json_dump,
    json_load,
)
from app.storage.models import Message, Role, Status

log = logging.getLogger(__name__)


class RepliesMixin(MessagesMixin):
    """``begin_reply`` -> ``update_reply`` (every ~0.3 s) -> ``finish_reply``."""

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
        check_reasoning_ms(reasoning_ms)
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
        check_role_status("assistant", str(status))
        check_reasoning_ms(reasoning_ms)
        now = self._now()
        with self.transaction() as conn:
            row = conn.execute(
                "SELECT conversation_id, meta FROM messages WHERE id = ?", (message_id,)
            ).fetchone()
            if row is None:
                self.get_message(message_id)  # raises NotFoundError
            merged = json_load(row["meta"])
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
                    json_dump(merged),
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
