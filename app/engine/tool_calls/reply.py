"""A reply with tools as it streams: the family's parser splits reasoning, text and calls;
text and reasoning go on as :class:`~app.engine.events.TokenText`, calls as
:class:`~app.engine.events.ToolCallStarted` / :class:`~app.engine.events.ToolCallArguments`,
and the end of the reply leaves the parsed calls (and a sentence per call that broke or
does not fit its schema) in the turn's :class:`~app.engine.events.Completion`."""

from __future__ import annotations

import time
from collections.abc import Callable

from app.engine.events import (
    Completion,
    Event,
    TokenText,
    ToolCallArguments,
    ToolCallStarted,
)
from app.engine.reasoning import Channel
from app.engine.tool_calls.events import (
    ArgumentsDelta,
    CallStarted,
    ReasoningDelta,
    StreamEvent,
    TextDelta,
)
from app.engine.tool_calls.request import ToolTurn, call_errors
from app.engine.tool_calls.stream import new_parser

__all__ = ["ToolReply"]


class ToolReply:
    """The parser of one reply's text (fed after stop strings are cut)."""

    def __init__(
        self,
        key: int,
        completion: Completion,
        turn: ToolTurn,
        started_at: Callable[[], float],
    ) -> None:
        self._key = key
        self._completion = completion
        self._turn = turn
        self._started_at = started_at  # when the first token was sampled (perf_counter)
        schemas = {t.name: t.parameters for t in turn.request.tools}
        self._parser = new_parser(
            turn.fmt,
            turn.reasoning,
            starts_in_reasoning=turn.starts_in_reasoning,
            schemas=schemas,
        )

    def feed(self, text: str, token: int, events: list[Event]) -> None:
        self._emit(self._parser.feed(text), token, events)

    def finish(self, events: list[Event]) -> None:
        self._emit(self._parser.finish(), -1, events)
        result = self._parser.result()
        completion = self._completion
        completion.tool_calls = list(result.calls)
        completion.tool_errors = [*result.errors, *call_errors(self._turn.request, result.calls)]

    def _emit(self, parsed: list[StreamEvent], token: int, events: list[Event]) -> None:
        completion = self._completion
        key = self._key
        for event in parsed:
            if isinstance(event, TextDelta):
                if not event.text:
                    continue
                if completion.reasoning and completion.reasoning_ms is None:
                    completion.reasoning_ms = (time.perf_counter() - self._started_at()) * 1000.0
                completion.text += event.text
                events.append(TokenText(key, event.text, token, Channel.ANSWER))
            elif isinstance(event, ReasoningDelta):
                if event.text:
                    completion.reasoning += event.text
                    events.append(TokenText(key, event.text, token, Channel.REASONING))
            elif isinstance(event, CallStarted):
                events.append(ToolCallStarted(key, event.index, event.call_id, event.name))
            elif isinstance(event, ArgumentsDelta):
                if event.fragment:
                    events.append(ToolCallArguments(key, event.index, event.fragment))
