"""One message of a chat turn, in one shape from storage to the engine's template.

A stored message (:class:`app.storage.Message`, a row with its id, branch and figures)
becomes a :class:`ChatMessage` once (:meth:`app.storage.Message.chat`, :func:`history`),
and that frozen record travels: the session's commands and engine port, the API's
requests, the fork point. It becomes a dict in one place only, :meth:`ChatMessage.to_engine`,
for the engine's chat template (Jinja takes mappings).

It sits at the top of ``app`` because storage may not import the session or the engine
(tests/test_layers.py) and all three use it; it imports the standard library only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One message of a turn's history."""

    role: str
    content: str
    reasoning_content: str = ""  # an assistant message's reasoning (the template decides)

    def to_engine(self) -> dict[str, Any]:
        """The message as the chat template reads it (the one place it is a dict)."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.reasoning_content:
            out["reasoning_content"] = self.reasoning_content
        return out


class StoredMessage(Protocol):
    """What :func:`history` reads of a stored message."""

    @property
    def role(self) -> str: ...

    @property
    def content(self) -> str: ...

    @property
    def reasoning(self) -> str: ...


def chat_message(stored: StoredMessage) -> ChatMessage:
    """A stored message as a turn's message: an assistant's reasoning goes along."""
    reasoning = stored.reasoning if stored.role == "assistant" else ""
    return ChatMessage(stored.role, stored.content, reasoning or "")


def history(thread: Iterable[StoredMessage]) -> tuple[ChatMessage, ...]:
    """A stored thread as a turn's messages, without empty failed replies (an error is not
    an assistant message)."""
    return tuple(chat_message(m) for m in thread if not (m.role == "assistant" and not m.content))
