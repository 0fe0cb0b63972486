"""A chat's storage messages as the tab shows them (:func:`shown_message`) and as the
engine and the session take them (:func:`engine_messages`, :func:`chat_messages`).

A reply's figures are read with :class:`~app.session.recorder.StoredFigures` (the keys
live beside the recorder that writes them); the place among siblings comes from the
session (:class:`~app.session.events.ReplyStored`, the library's ``sibling_positions``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from app.engine.prefix import cached_tokens
from app.messages import ChatMessage, history
from app.session.recorder import StoredFigures
from app.ui.message_data import IMPORTED_FROM, MessageData

if TYPE_CHECKING:
    from app.storage import Message


def shown_message(m: Message, sibling_index: int = 1, sibling_count: int = 1) -> MessageData:
    """The message as a bubble shows it, ``sibling_index`` of ``sibling_count``."""
    figures = StoredFigures.of(m.meta)
    cached = None
    if m.prompt_tokens is not None and figures.prompt_processed is not None:
        cached = cached_tokens(m.prompt_tokens, figures.prompt_processed)
    finish = figures.finish_reason
    return MessageData(
        id=m.id,
        role=m.role,
        content=m.content,
        status=m.status,
        token_count=m.token_count,
        prompt_tokens=m.prompt_tokens,
        tokens_per_second=m.tokens_per_second,
        sibling_index=sibling_index,
        sibling_count=sibling_count,
        error=figures.error if m.status == "error" else None,
        cached_tokens=cached,
        reasoning=getattr(m, "reasoning", "") or "",
        reasoning_ms=getattr(m, "reasoning_ms", None),
        finish=finish.value if finish is not None else None,
        ttft_ms=figures.ttft_ms,
        imported_from=_imported_from(m),
    )


def chat_messages(thread: list[Message]) -> list[ChatMessage]:
    """The chat as the session takes it (:func:`app.messages.history`: without empty
    failed replies, an assistant's reasoning along)."""
    return list(history(thread))


def engine_messages(thread: list[Message]) -> list[dict[str, Any]]:
    """:func:`chat_messages` as the template reads them (a test's view of what the engine
    gets; the window itself sends :class:`ChatMessage`)."""
    return [m.to_engine() for m in history(thread)]


def _imported_from(m: Message) -> str | None:
    """The file the chat was imported from, said by its first message only."""
    source = (m.meta or {}).get(IMPORTED_FROM) if m.parent_id is None else None
    return source if isinstance(source, str) and source else None
