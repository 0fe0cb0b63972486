"""What a tool-call parser reports: stream events while the reply arrives, and the result.

The events are shaped for OpenAI's streaming ``delta.tool_calls``: a call is announced once
with its index, id and name (:class:`CallStarted`), then its arguments arrive as fragments
that only ever append (:class:`ArgumentsDelta`); joined, the fragments of one call are its
``arguments`` string, which is valid JSON once the call is complete.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "ArgumentsDelta",
    "CallStarted",
    "ParseResult",
    "ReasoningDelta",
    "StreamEvent",
    "TextDelta",
    "ToolCall",
]


@dataclass(frozen=True, slots=True)
class TextDelta:
    """Answer text outside any call."""

    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """Reasoning text (the model's chain of thought), never part of a call."""

    text: str


@dataclass(frozen=True, slots=True)
class CallStarted:
    """A call begins: its position among the reply's calls, its id and the function name."""

    index: int
    call_id: str
    name: str


@dataclass(frozen=True, slots=True)
class ArgumentsDelta:
    """More of the arguments (JSON text) of the call at ``index``."""

    index: int
    fragment: str


StreamEvent = TextDelta | ReasoningDelta | CallStarted | ArgumentsDelta


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A complete call: ``arguments_text`` is the streamed JSON, ``arguments`` its value."""

    index: int
    call_id: str
    name: str
    arguments_text: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ParseResult:
    """The whole reply: its answer text, its reasoning, its calls, and what went wrong
    (one sentence per call that was cut off or did not parse)."""

    content: str
    reasoning: str
    calls: tuple[ToolCall, ...]
    errors: tuple[str, ...]
