"""The one way to get a parser for a family: :func:`new_parser`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from app.engine.reasoning import ReasoningFormat
from app.engine.tool_calls.events import ParseResult, StreamEvent
from app.engine.tool_calls.formats import ToolCallFormat
from app.engine.tool_calls.harmony import HarmonyToolParser
from app.engine.tool_calls.parser import ToolCallParser, new_call_id
from app.engine.tool_calls.region import Schemas

__all__ = ["StreamingToolParser", "new_parser"]


class StreamingToolParser(Protocol):
    def feed(self, text: str) -> list[StreamEvent]: ...

    def finish(self) -> list[StreamEvent]: ...

    def result(self) -> ParseResult: ...


def new_parser(
    fmt: ToolCallFormat,
    reasoning: ReasoningFormat = ReasoningFormat.NONE,
    *,
    starts_in_reasoning: bool = False,
    schemas: Schemas | None = None,
    id_factory: Callable[[], str] = new_call_id,
) -> StreamingToolParser:
    """A parser of replies of family ``fmt`` whose reasoning is marked as ``reasoning``
    (:func:`app.engine.reasoning.detect_format` of the same template)."""
    if fmt is ToolCallFormat.HARMONY:
        return HarmonyToolParser(starts_in_reasoning=starts_in_reasoning, id_factory=id_factory)
    return ToolCallParser(
        fmt,
        reasoning,
        starts_in_reasoning=starts_in_reasoning,
        schemas=schemas,
        id_factory=id_factory,
    )
