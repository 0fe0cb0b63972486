"""The streaming tool-call parser: fed the reply's text as it is detokenized, it reports
text, reasoning and calls (:mod:`app.engine.tool_calls.events`).

Reasoning is split off first by :class:`app.engine.reasoning.ReasoningSplitter` (a call
written inside the reasoning is the model thinking, not calling); the answer is scanned for
the family's trigger (``<tool_call>``, ``[TOOL_CALLS]`` ...). Text that may be the start of
a trigger is held back until it is known not to be one; a region that turns out not to be
a call before anything of it was announced is given back as text.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

from app.engine.reasoning import Channel, Piece, ReasoningFormat, ReasoningSplitter
from app.engine.tool_calls.events import (
    ArgumentsDelta,
    CallStarted,
    ParseResult,
    ReasoningDelta,
    StreamEvent,
    TextDelta,
    ToolCall,
)
from app.engine.tool_calls.formats import SYNTAXES, ToolCallFormat
from app.engine.tool_calls.region import Draft, Schemas, read_region
from app.engine.tool_calls.scan import ScanMemo
from app.engine.tool_calls.syntax import CallSyntax

__all__ = ["CallRecorder", "ToolCallParser", "new_call_id"]


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


@dataclass(slots=True)
class _Announced:
    call_id: str
    name: str
    args: str


class CallRecorder:
    """Turns the drafts of successive readings into events, and keeps the result."""

    def __init__(self, id_factory: Callable[[], str]) -> None:
        self._ids = id_factory
        self.events: list[StreamEvent] = []
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.calls: list[ToolCall] = []
        self.errors: list[str] = []
        self._open: dict[int, _Announced] = {}  # announced calls of the current region
        # The index of the region's first call: announced calls keep their index, even
        # a broken one, so that a stream never reuses an index.
        self._base = 0

    def text(self, text: str) -> None:
        if text:
            self.events.append(TextDelta(text))
            self.content.append(text)

    def thought(self, text: str) -> None:
        if text:
            self.events.append(ReasoningDelta(text))
            self.reasoning.append(text)

    @property
    def announced(self) -> bool:
        return bool(self._open)

    def update(self, drafts: list[Draft]) -> None:
        base = self._base
        for k, draft in enumerate(drafts):
            index = base + k
            seen = self._open.get(index)
            if seen is None:
                if not (draft.started and draft.name):
                    return
                seen = _Announced(draft.call_id or self._ids(), draft.name, "")
                self._open[index] = seen
                self.events.append(CallStarted(index, seen.call_id, seen.name))
            if draft.args.startswith(seen.args) and len(draft.args) > len(seen.args):
                self.events.append(ArgumentsDelta(index, draft.args[len(seen.args) :]))
                seen.args = draft.args

    def commit(self, drafts: list[Draft], cut_off: bool = False) -> None:
        """End the region: its complete calls become results; an announced call that is
        not complete is reported."""
        base = self._base
        for k, draft in enumerate(drafts):
            seen = self._open.get(base + k)
            if seen is None:
                break
            if draft.done and draft.arguments is not None and seen.args == draft.args:
                self.calls.append(
                    ToolCall(base + k, seen.call_id, seen.name, seen.args, draft.arguments)
                )
                continue
            why = "was cut off before it was complete" if cut_off else "is not well-formed"
            self.errors.append(f"The model's call to the tool '{seen.name}' {why}.")
            break
        self._base += len(self._open)
        self._open.clear()

    def result(self) -> ParseResult:
        return ParseResult(
            "".join(self.content), "".join(self.reasoning), tuple(self.calls), tuple(self.errors)
        )


class ToolCallParser:
    """Feed it the reply (:meth:`feed`), then :meth:`finish` and :meth:`result`.

    ``schemas``: each tool's parameters schema by name (tagged formats read a parameter
    the schema calls a string as text); ``starts_in_reasoning``: the prompt opened the
    reasoning (:func:`app.engine.reasoning.prompt_opens_reasoning`).
    """

    def __init__(
        self,
        fmt: ToolCallFormat,
        reasoning: ReasoningFormat = ReasoningFormat.NONE,
        *,
        starts_in_reasoning: bool = False,
        schemas: Schemas | None = None,
        id_factory: Callable[[], str] = new_call_id,
    ) -> None:
        self._syntaxes = SYNTAXES[fmt]
        self._schemas: Schemas = schemas or {}
        self._splitter = ReasoningSplitter(reasoning, starts_in_reasoning)
        self._rec = CallRecorder(id_factory)
        self._buf = ""
        self._region: CallSyntax | None = None
        self._seen_text = False
        self._gap = ""
        self._memo: ScanMemo = {}

    def feed(self, text: str) -> list[StreamEvent]:
        return self._route(self._splitter.feed(text), final=False)

    def finish(self) -> list[StreamEvent]:
        """Read the rest of the reply: the last events (then :meth:`result`)."""
        return self._route(self._splitter.flush(), final=True)

    def result(self) -> ParseResult:
        """The whole reply, once :meth:`finish` was called."""
        return self._rec.result()

    def _route(self, pieces: list[Piece], final: bool) -> list[StreamEvent]:
        start = len(self._rec.events)
        for piece in pieces:
            if piece.channel is Channel.REASONING:
                self._rec.thought(piece.text)
            else:
                self._buf += piece.text
                self._answer(final=False)
        if final:
            self._answer(final=True)
        return self._rec.events[start:]

    def _find_trigger(self) -> tuple[int, CallSyntax] | None:
        best: tuple[int, CallSyntax] | None = None
        for syntax in self._syntaxes:
            if syntax.start_only:
                head = len(self._buf) - len(self._buf.lstrip())
                if not self._seen_text and self._buf[head:].startswith(syntax.trigger):
                    pos = head
                else:
                    continue
            else:
                pos = self._buf.find(syntax.trigger)
            if pos >= 0 and (best is None or pos < best[0]):
                best = (pos, syntax)
        return best

    def _held(self) -> int:
        """How much of the end of the buffer may still begin a trigger (and the whitespace
        before it: whitespace right before a call is not answer text)."""
        if (
            not self._seen_text
            and not self._buf.strip()
            and any(s.start_only for s in self._syntaxes)
        ):
            return len(self._buf)
        held = 0
        for syntax in self._syntaxes:
            if syntax.start_only:
                continue
            trigger = syntax.trigger
            for n in range(min(len(trigger) - 1, len(self._buf)), held, -1):
                if trigger.startswith(self._buf[-n:]):
                    held = n
                    break
        rest = self._buf[: len(self._buf) - held]
        return held + len(rest) - len(rest.rstrip())

    def _emit_text(self, text: str) -> None:
        if text.strip():
            self._seen_text = True
        self._rec.text(text)

    def _answer(self, final: bool) -> None:
        while True:
            if self._region is None:
                found = self._find_trigger()
                if found is None:
                    keep = 0 if final else self._held()
                    self._emit_text(self._buf[: len(self._buf) - keep])
                    self._buf = self._buf[len(self._buf) - keep :]
                    return
                pos, self._region = found
                self._memo = {}
                before = self._buf[:pos]
                self._emit_text(before.rstrip())
                self._gap = before[len(before.rstrip()) :]  # given back if no call follows
                self._buf = self._buf[pos:]
            state = read_region(self._region, self._buf, self._schemas, self._memo)
            self._rec.update(state.drafts)
            if state.end is not None:
                self._rec.commit(state.drafts)
                self._buf = self._buf[state.end :]
                self._region = None
                self._seen_text = True
                continue
            if not (state.failed or final):
                return
            if self._rec.announced:
                self._rec.commit(state.drafts, cut_off=not state.failed)
                # What follows the place the call broke is kept as text (nothing is lost).
                self._buf = self._buf[state.failed_at :] if state.failed else ""
                self._region = None
                self._seen_text = True
                if state.failed:
                    continue
                return
            # Not a call after all: the trigger is text, and scanning goes on after it.
            trigger = self._region.trigger
            self._region = None
            self._emit_text(self._gap + self._buf[: len(trigger)])
            self._buf = self._buf[len(trigger) :]
