"""A remote reply's tool calls, put together from the server's ``delta.tool_calls``.

Servers split a call as they like: the id and name usually come first and the arguments
in fragments, but a piece may carry the name with no id, the id again with every
fragment, or (a non-streamed ``message``) the whole call at once. :class:`CallAssembler`
turns those pieces into the engine's steps - a call announced once with its index, id
and name, then fragments that only append - numbered 0, 1, ... in the order the calls
began (the server's ``index`` only tells the pieces apart). Fragments that arrive before
the name are held until it does, so that a call is never announced nameless.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from app.engine.tool_calls.events import ToolCall
from app.engine.tool_calls.request import ToolRequest, call_errors
from app.remote.wire import CallPiece


@dataclass(frozen=True)
class CallStep:
    """What one piece adds: the call's start (``started``: its id and name are new), and
    more of its arguments."""

    index: int
    started: bool
    call_id: str = ""
    name: str = ""
    fragment: str = ""


@dataclass
class _Call:
    index: int  # the engine's (order of appearance)
    call_id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    announced: bool = False


class CallAssembler:
    """See the module docstring."""

    def __init__(self) -> None:
        self._calls: dict[int, _Call] = {}  # by the server's index

    @property
    def started(self) -> bool:
        return bool(self._calls)

    def feed(self, piece: CallPiece) -> list[CallStep]:
        call = self._calls.get(piece.index)
        if call is None:
            call = self._calls[piece.index] = _Call(len(self._calls))
        call.call_id = call.call_id or piece.call_id
        call.name = call.name or piece.name
        call.arguments.append(piece.fragment)
        if call.announced:
            return [CallStep(call.index, False, fragment=piece.fragment)] if piece.fragment else []
        if not call.name:
            return []  # held until the name comes
        call.announced = True
        call.call_id = call.call_id or f"call_{call.index}"  # (a server that gives none)
        return [CallStep(call.index, True, call.call_id, call.name, "".join(call.arguments))]

    def result(
        self, request: ToolRequest | None, *, complete: bool
    ) -> tuple[tuple[ToolCall, ...], tuple[str, ...]]:
        """The calls whose arguments are a JSON object, and a sentence for each other one
        and for each call the request does not allow (``complete``: the reply ended as
        the server meant it to; else a cut-off call says so)."""
        calls: list[ToolCall] = []
        errors: list[str] = []
        for call in sorted(self._calls.values(), key=lambda c: c.index):
            text = "".join(call.arguments)
            name = call.name or "(no name)"
            try:
                value = json.loads(text) if text.strip() else {}
            except ValueError:
                cut = "" if complete else " (the reply was cut off)"
                errors.append(f"The call to '{name}' has arguments that are no JSON{cut}.")
                continue
            if not isinstance(value, dict):
                errors.append(f"The call to '{name}' has arguments that are no JSON object.")
                continue
            if not call.name:
                errors.append("The server sent a tool call without a function name.")
                continue
            calls.append(ToolCall(call.index, call.call_id, call.name, text, value))
        if request is not None:
            errors += call_errors(request, tuple(calls))
        return tuple(calls), tuple(errors)
