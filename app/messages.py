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

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class MessageToolCall:
    """A call an assistant message made: OpenAI's ``tool_calls[i]`` (``arguments`` is the
    JSON text the model wrote, an object once parsed)."""

    call_id: str
    name: str
    arguments: str

    def to_openai(self) -> dict[str, Any]:
        return {
            "id": self.call_id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }

    def parsed_arguments(self) -> Any:
        """The arguments as a value (the text itself when it is not JSON)."""
        try:
            return json.loads(self.arguments)
        except ValueError:
            return self.arguments


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One message of a turn's history.

    An assistant message may carry ``tool_calls`` (its ``content`` then often empty); a
    ``tool`` message is the result of the call ``tool_call_id`` to the function ``name``.
    """

    role: str
    content: str
    reasoning_content: str = ""  # an assistant message's reasoning (the template decides)
    tool_calls: tuple[MessageToolCall, ...] = ()
    tool_call_id: str = ""  # a tool result: the call it answers
    name: str = ""  # a tool result: the function that was called

    def to_engine(self) -> dict[str, Any]:
        """The message as the chat template reads it (the one place it is a dict): the
        OpenAI shape, which :mod:`app.engine.chat_template.tools` adapts per template."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.reasoning_content:
            out["reasoning_content"] = self.reasoning_content
        if self.tool_calls:
            out["tool_calls"] = [call.to_openai() for call in self.tool_calls]
        if self.role == "tool":
            out["tool_call_id"] = self.tool_call_id
            if self.name:
                out["name"] = self.name
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
