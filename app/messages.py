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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

# Where a stored message keeps its tool calls / what it answers (its ``meta`` JSON: no
# schema change, and export/import carry them as they carry the rest of ``meta``).
TOOL_CALLS_KEY: Final = "tool_calls"  # an assistant's: [{"id", "name", "arguments"}]
TOOL_CALL_ID_KEY: Final = "tool_call_id"  # a tool result's: the call it answers
TOOL_NAME_KEY: Final = "tool_name"  # a tool result's: the function that was called
TOOL_OUTCOME_KEY: Final = "tool_outcome"  # a tool result's: how the call went (the client's word)


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

    def to_stored(self) -> dict[str, str]:
        return {"id": self.call_id, "name": self.name, "arguments": self.arguments}

    @classmethod
    def from_stored(cls, value: Any) -> MessageToolCall | None:
        """A call as :meth:`to_stored` wrote it (None: not one)."""
        if not isinstance(value, Mapping):
            return None
        parts = (value.get("id"), value.get("name"), value.get("arguments"))
        if not all(isinstance(p, str) for p in parts):
            return None
        return cls(str(parts[0]), str(parts[1]), str(parts[2]))

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

    def storage_meta(self) -> dict[str, Any]:
        """What a stored message keeps of the calls / the call it answers (its ``meta``)."""
        if self.role == "tool":
            return {TOOL_CALL_ID_KEY: self.tool_call_id, TOOL_NAME_KEY: self.name}
        if self.tool_calls:
            return {TOOL_CALLS_KEY: [c.to_stored() for c in self.tool_calls]}
        return {}


class StoredMessage(Protocol):
    """What :func:`history` reads of a stored message."""

    @property
    def role(self) -> str: ...

    @property
    def content(self) -> str: ...

    @property
    def reasoning(self) -> str: ...


def stored_tool_calls(meta: Mapping[str, Any]) -> tuple[MessageToolCall, ...]:
    """The calls a stored assistant message made (its ``meta``)."""
    listed = meta.get(TOOL_CALLS_KEY)
    if not isinstance(listed, list):
        return ()
    calls = (MessageToolCall.from_stored(value) for value in listed)
    return tuple(c for c in calls if c is not None)


def chat_message(stored: StoredMessage) -> ChatMessage:
    """A stored message as a turn's message: an assistant's reasoning and tool calls go
    along, and a tool result's call id and function."""
    # (a stored row's ``meta``; records without one carry no calls)
    meta: Mapping[str, Any] = getattr(stored, "meta", None) or {}
    if stored.role == "tool":
        return ChatMessage(
            "tool",
            stored.content,
            tool_call_id=str(meta.get(TOOL_CALL_ID_KEY) or ""),
            name=str(meta.get(TOOL_NAME_KEY) or ""),
        )
    if stored.role == "assistant":
        calls = stored_tool_calls(meta)
        return ChatMessage(stored.role, stored.content, stored.reasoning or "", tool_calls=calls)
    return ChatMessage(stored.role, stored.content)


def history(thread: Iterable[StoredMessage]) -> tuple[ChatMessage, ...]:
    """A stored thread as a turn's messages, without empty failed replies (an error is not
    an assistant message; a reply that only called tools is one)."""
    messages = (chat_message(m) for m in thread)
    return tuple(
        m for m in messages if not (m.role == "assistant" and not m.content and not m.tool_calls)
    )


def document(thread: Iterable[StoredMessage]) -> str:
    """A stored thread as one text, for text completion (a base model continues a text):
    what the user wrote and what the model wrote, joined as they stand, no template and
    no separators (a continuation goes on mid-sentence); tool and system messages are
    not part of a document."""
    return "".join(m.content for m in thread if m.role in ("user", "assistant"))
