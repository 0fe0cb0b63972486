"""gpt-oss (harmony) replies: a series of messages ``header<|message|>body<|end|>``; a call
is a message whose header names a recipient ``to=functions.NAME``, its body the arguments
(JSON), ended by ``<|call|>``. Calls are taken out here, before the reasoning splitter sees
the reply (it would file a call's message under reasoning); every other message goes to
the splitter as it is."""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from typing import Final

from app.engine.reasoning import Channel, Piece, ReasoningFormat, ReasoningSplitter
from app.engine.tool_calls.events import ParseResult, StreamEvent
from app.engine.tool_calls.parser import CallRecorder, new_call_id
from app.engine.tool_calls.region import Draft, read_json_args
from app.engine.tool_calls.scan import Cursor, NeedMore, NoMatch

__all__ = ["HarmonyToolParser"]

_MESSAGE: Final = "<|message|>"
_ENDS: Final = ("<|end|>", "<|call|>", "<|return|>")
_HEADS: Final = ("<|start|>", "<|channel|>")
_RECIPIENT: Final = re.compile(r"\bto=functions\.([A-Za-z0-9_.\-]+)")


class _State(enum.Enum):
    HEADER = "header"
    BODY = "body"  # of a message that is not a call
    CALL = "call"  # the arguments of a call


def _partial_suffix(text: str, markers: tuple[str, ...]) -> int:
    best = 0
    for marker in markers:
        for n in range(min(len(marker) - 1, len(text)), best, -1):
            if marker.startswith(text[-n:]):
                best = n
                break
    return best


class HarmonyToolParser:
    """:class:`app.engine.tool_calls.parser.ToolCallParser` for gpt-oss replies."""

    def __init__(
        self, *, starts_in_reasoning: bool = False, id_factory: Callable[[], str] = new_call_id
    ) -> None:
        self._splitter = ReasoningSplitter(ReasoningFormat.HARMONY, starts_in_reasoning)
        self._rec = CallRecorder(id_factory)
        self._buf = ""
        self._state = _State.BODY if starts_in_reasoning else _State.HEADER
        self._name = ""

    def feed(self, text: str) -> list[StreamEvent]:
        start = len(self._rec.events)
        self._buf += text
        self._run(final=False)
        return self._rec.events[start:]

    def finish(self) -> list[StreamEvent]:
        start = len(self._rec.events)
        self._run(final=True)
        self._split(self._splitter.flush())
        return self._rec.events[start:]

    def result(self) -> ParseResult:
        return self._rec.result()

    def _pass(self, text: str) -> None:
        self._split(self._splitter.feed(text))

    def _split(self, pieces: list[Piece]) -> None:
        for piece in pieces:
            if piece.channel is Channel.REASONING:
                self._rec.thought(piece.text)
            else:
                self._rec.text(piece.text)

    def _run(self, final: bool) -> None:
        while self._buf:
            if self._state is _State.HEADER and not self._header(final):
                return
            if self._state is _State.BODY and not self._body(final):
                return
            if self._state is _State.CALL and not self._call(final):
                return

    def _header(self, final: bool) -> bool:
        lead = self._buf.lstrip()
        if lead and not any(lead.startswith(h) or h.startswith(lead) for h in _HEADS):
            self._state = _State.BODY  # text without a header: the splitter reads it
            return True
        at = self._buf.find(_MESSAGE)
        if at < 0:
            if final:
                self._pass(self._buf)
                self._buf = ""
            return False
        header = self._buf[:at]
        recipient = _RECIPIENT.search(header)
        if recipient is not None:
            self._name = recipient.group(1)
            self._state = _State.CALL
        else:
            self._pass(self._buf[: at + len(_MESSAGE)])
            self._state = _State.BODY
        self._buf = self._buf[at + len(_MESSAGE) :]
        return True

    def _body(self, final: bool) -> bool:
        found = [(self._buf.find(end), end) for end in (*_ENDS, *_HEADS) if end in self._buf]
        if not found:
            keep = 0 if final else _partial_suffix(self._buf, (*_ENDS, *_HEADS))
            self._pass(self._buf[: len(self._buf) - keep])
            self._buf = self._buf[len(self._buf) - keep :]
            return False
        at, marker = min(found)
        cut = at + len(marker) if marker in _ENDS else at
        self._pass(self._buf[:cut])
        self._buf = self._buf[cut:]
        self._state = _State.HEADER
        return True

    def _call(self, final: bool) -> bool:
        draft = Draft(name=self._name, started=True)
        cur = Cursor(self._buf)
        try:
            read_json_args(cur, draft)
            draft.done = True
            cur.skip_ws()
            if not any(cur.try_literal(end) for end in _ENDS) and not final:
                if cur.at_end() or any(e.startswith(cur.text[cur.pos :]) for e in _ENDS):
                    raise NeedMore
        except NeedMore:
            self._rec.update([draft])
            if final:
                self._rec.commit([draft], cut_off=not draft.done)
                self._buf = ""
            return False
        except NoMatch:
            draft.done = False
        self._rec.update([draft])
        self._rec.commit([draft])
        # After a broken call, its text from where it broke on is read as messages again.
        self._buf = self._buf[cur.pos :]
        self._state = _State.HEADER
        return True
