"""The one way to get a parser for a family: :func:`new_parser`."""

from __future__ import annotations

import secrets
import string
from collections.abc import Callable
from typing import Protocol

from app.engine.reasoning import ReasoningFormat
from app.engine.tool_calls.events import ParseResult, StreamEvent
from app.engine.tool_calls.formats import ToolCallFormat
from app.engine.tool_calls.harmony import HarmonyToolParser
from app.engine.tool_calls.parser import ToolCallParser, new_call_id
from app.engine.tool_calls.region import Schemas

__all__ = ["StreamingToolParser", "mistral_call_id", "new_parser"]

_MISTRAL = frozenset(
    {ToolCallFormat.MISTRAL_JSON, ToolCallFormat.MISTRAL_ARGS, ToolCallFormat.MISTRAL_CALL_ID}
)
_ALNUM = string.ascii_letters + string.digits


def mistral_call_id() -> str:
    return "".join(secrets.choice(_ALNUM) for _ in range(9))


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
    id_factory: Callable[[], str] | None = None,
) -> StreamingToolParser:
    """A parser of replies of family ``fmt`` whose reasoning is marked as ``reasoning``
    (:func:`app.engine.reasoning.detect_format` of the same template). Calls get ids from
    ``id_factory``; by default ids the family's template accepts back in the history
    (Mistral's raise unless an id is 9 letters and digits)."""
    if id_factory is None:
        id_factory = mistral_call_id if fmt in _MISTRAL else new_call_id
    if fmt is ToolCallFormat.HARMONY:
        return HarmonyToolParser(starts_in_reasoning=starts_in_reasoning, id_factory=id_factory)
    return ToolCallParser(
        fmt,
        reasoning,
        starts_in_reasoning=starts_in_reasoning,
        schemas=schemas,
        id_factory=id_factory,
    )
