"""A reply's text as it streams: token bytes -> whole characters -> stop strings ->
reasoning or answer, appended to the turn's :class:`Completion` and reported as events."""

from __future__ import annotations

import time

from app.engine.events import Completion, Event, TokenText
from app.engine.reasoning import Channel, Piece, ReasoningFormat, ReasoningSplitter
from app.engine.text import StopMatcher, Utf8Stream
from app.engine.tool_calls.reply import ToolReply
from app.engine.tool_calls.request import ToolTurn


class ReplyStream:
    """The text output of one generation on one sequence."""

    def __init__(
        self,
        key: int,
        completion: Completion,
        stops: list[str],
        reasoning_format: ReasoningFormat,
        opens_reasoning: bool,
        tools: ToolTurn | None = None,
    ) -> None:
        self.key = key
        self.completion = completion
        self.t_start = 0.0  # when the first token was sampled (perf_counter)
        self._utf8 = Utf8Stream()
        self._stopper = StopMatcher(stops)
        # With tools, the family's parser splits reasoning, text and calls instead.
        self._tools = (
            ToolReply(key, completion, tools, lambda: self.t_start)
            if tools is not None and tools.parse
            else None
        )
        self._splitter = (
            ReasoningSplitter(reasoning_format, opens_reasoning)
            if reasoning_format is not ReasoningFormat.NONE and self._tools is None
            else None
        )
        # A reasoning format's markers may be control tokens (gpt-oss's <|channel|>), as
        # may a call's ([TOOL_CALLS], <|python_tag|>): the splitter or parser reads them
        # and keeps them out of the text.
        self.special_pieces = self._splitter is not None or self._tools is not None

    @property
    def stopped(self) -> bool:
        """A stop string completed: the reply ends before it."""
        return self._stopper.stopped is not None

    def feed(self, piece: bytes, token: int, events: list[Event]) -> None:
        text = self._stopper.feed(self._utf8.feed(piece))
        if text:
            self._emit_text(text, token, events)

    def close(self, stopped: bool, generated: bool, events: list[Event]) -> None:
        """The reply ended: emit what was held back (unless a stop string cut it off)."""
        if not stopped:
            tail = self._stopper.feed(self._utf8.flush()) + self._stopper.flush()
            if tail:
                self._emit_text(tail, -1, events)
        if self._splitter is not None:
            self._emit_pieces(self._splitter.flush(), -1, events)
            self._splitter = None
        if self._tools is not None:
            self._tools.finish(events)
            self._tools = None
        completion = self.completion
        if generated and completion.reasoning and completion.reasoning_ms is None:
            completion.reasoning_ms = (time.perf_counter() - self.t_start) * 1000.0

    def _emit_text(self, text: str, token: int, events: list[Event]) -> None:
        if self._tools is not None:
            self._tools.feed(text, token, events)
        elif self._splitter is None:
            self._emit_pieces([Piece(Channel.ANSWER, text)], token, events)
        else:
            self._emit_pieces(self._splitter.feed(text), token, events)

    def _emit_pieces(self, pieces: list[Piece], token: int, events: list[Event]) -> None:
        completion = self.completion
        for piece in pieces:
            if not piece.text:
                continue
            if piece.channel is Channel.REASONING:
                completion.reasoning += piece.text
            else:
                if completion.reasoning and completion.reasoning_ms is None:
                    completion.reasoning_ms = (time.perf_counter() - self.t_start) * 1000.0
                completion.text += piece.text
            events.append(TokenText(self.key, piece.text, token, piece.channel))
