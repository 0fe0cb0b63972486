"""Reading one region of calls (from the text that opens it) by a :class:`CallSyntax`.

The region is re-read from its start each time more text arrives; what it reports of an
unfinished call (its name once the name is complete, the part of its arguments that can no
longer change) only grows, so the stream layer sends the difference.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from app.engine.tool_calls.arg_readers import read_gemma_args, read_py_call, read_tag_params
from app.engine.tool_calls.draft import Draft
from app.engine.tool_calls.scan import Cursor, NeedMore, NoMatch, ScanMemo, json_value_end
from app.engine.tool_calls.syntax import (
    CallId,
    CallSyntax,
    GemmaArgs,
    JsonArgs,
    JsonCall,
    Lit,
    Name,
    Piece,
    PyCall,
    TagParams,
)

__all__ = ["Draft", "RegionState", "Schemas", "read_json_args", "read_region"]

# Each tool's parameters schema by tool name (to tell string parameters in tagged formats).
Schemas = Mapping[str, Mapping[str, Any]]


@dataclass(slots=True)
class RegionState:
    """The calls read so far; ``end``: where the region ended (None: it goes on);
    ``failed``: the text is not this syntax (from the last draft on), from ``failed_at``."""

    drafts: list[Draft] = field(default_factory=list)
    end: int | None = None
    failed: bool = False
    failed_at: int = 0


def read_region(
    syntax: CallSyntax, text: str, schemas: Schemas, memo: ScanMemo | None = None
) -> RegionState:
    """Read the region ``text`` begins; ``memo``: kept between readings of one region
    (its text only growing), so that a long JSON value is not scanned again each time."""
    state = RegionState()
    cur = Cursor(text, memo=memo)
    try:
        if syntax.section_open:
            cur.literal(syntax.section_open)
        while True:
            draft = Draft()
            state.drafts.append(draft)
            _read_call(cur, syntax.call, draft, schemas)
            draft.done = True
            if not syntax.section_close:
                state.end = cur.pos
                return state
            if cur.try_literal(syntax.section_close):
                state.end = cur.pos
                return state
            if syntax.separator.strip():
                cur.literal(syntax.separator)
    except NeedMore:
        return state
    except NoMatch:
        state.failed = True
        state.failed_at = cur.pos
        return state


def _read_call(cur: Cursor, pieces: tuple[Piece, ...], draft: Draft, schemas: Schemas) -> None:
    for piece in pieces:
        if isinstance(piece, Lit):
            cur.literal(piece.text)
        elif isinstance(piece, Name):
            draft.name = cur.word()
        elif isinstance(piece, CallId):
            written = cur.call_id()
            draft.call_id = piece.shape.format(id=written, name=draft.name or "")
        elif isinstance(piece, JsonCall):
            _read_json_call(cur, piece, draft)
        elif isinstance(piece, PyCall):
            read_py_call(cur, draft)
        else:
            if draft.name is None:
                raise NoMatch
            draft.started = True
            _read_args(cur, piece, draft, schemas.get(draft.name, {}))


def _read_args(
    cur: Cursor, piece: JsonArgs | TagParams | GemmaArgs, draft: Draft, schema: Mapping[str, Any]
) -> None:
    if isinstance(piece, JsonArgs):
        read_json_args(cur, draft)
    elif isinstance(piece, TagParams):
        read_tag_params(cur, piece, draft, schema)
    else:
        read_gemma_args(cur, draft)


def read_json_args(cur: Cursor, draft: Draft, announce: bool = True) -> None:
    """A JSON object of arguments, its text streamed as written."""
    if cur.peek() != "{":
        raise NoMatch
    start = cur.pos
    try:
        end = json_value_end(cur.text, start, cur.memo)
    except NeedMore:
        if announce:
            draft.args = cur.text[start:]
        raise
    text = cur.text[start:end]
    try:
        value = json.loads(text)
    except ValueError:
        raise NoMatch from None
    if not isinstance(value, dict):
        raise NoMatch
    cur.pos = end
    draft.args = text
    draft.arguments = value


def _read_json_call(cur: Cursor, piece: JsonCall, draft: Draft) -> None:
    """``{"name": ..., "arguments": {...}, ...}`` in any key order."""
    cur.literal("{")
    args: tuple[str, dict[str, Any]] | None = None
    while True:
        if cur.peek() == "}":
            cur.pos += 1
            break
        _, key = cur.json_value()
        if not isinstance(key, str):
            raise NoMatch
        cur.literal(":")
        if piece.name_is_key:
            draft.name = key
            draft.started = True
            read_json_args(cur, draft)
            cur.literal("}")
            return
        if key in piece.name_keys:
            _, name = cur.json_value()
            if not isinstance(name, str) or not name:
                raise NoMatch
            draft.name = name
            draft.started = True
            if args is not None:
                draft.args, draft.arguments = args
        elif key in piece.args_keys and cur.peek() == "{":
            read_json_args(cur, draft, announce=draft.name is not None)
            assert draft.arguments is not None
            args = (draft.args, draft.arguments)
        elif key in piece.args_keys:
            _, encoded = cur.json_value()  # arguments written as a JSON string
            try:
                value = json.loads(encoded) if isinstance(encoded, str) else None
            except ValueError:
                raise NoMatch from None
            if not isinstance(value, dict):
                raise NoMatch
            args = (encoded, value)
            if draft.name is not None:
                draft.args, draft.arguments = args
        else:
            cur.json_value()
        if cur.peek() == ",":
            cur.pos += 1
    if draft.name is None:
        raise NoMatch
    if args is None:  # a call without arguments
        draft.args, draft.arguments = "{}", {}
