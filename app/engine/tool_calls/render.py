"""Writing calls in a family's syntax, as its chat template writes them: the text a forced
call's grammar must accept, and the text the parser must read back."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.engine.tool_calls.syntax import (
    CallId,
    CallSyntax,
    GemmaArgs,
    JsonArgs,
    JsonCall,
    Lit,
    Name,
    PyCall,
    TagParams,
)

__all__ = ["CallText", "gemma_value", "render_calls"]


@dataclass(frozen=True, slots=True)
class CallText:
    """One call to write: its name, arguments and (where the syntax writes one) id."""

    name: str
    arguments: Mapping[str, Any]
    call_id: str = "abcdefghi"


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def gemma_value(value: Any) -> str:
    """A value in Gemma 4's notation."""
    if isinstance(value, str):
        return f'<|"|>{value}<|"|>'
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{gemma_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(gemma_value(v) for v in value) + "]"
    return _dumps(value)


def _py_value(value: Any) -> str:
    """A Python literal (strings double-quoted, as LFM2 writes them)."""
    return repr(value) if isinstance(value, bool) or value is None else _dumps(value)


def _tag_params(piece: TagParams, arguments: Mapping[str, Any]) -> str:
    out = []
    for key, value in arguments.items():
        string = isinstance(value, str)
        attrs = (
            (piece.string_attrs if string else piece.other_attrs) + piece.attrs_end
            if piece.attrs_end
            else ""
        )
        text = value if string else _dumps(value)
        out.append(
            f"{piece.open}{key}{piece.key_end}{attrs}{piece.value_open}{text}{piece.value_end}"
        )
    return "".join(out)


def _render_call(syntax: CallSyntax, call: CallText) -> str:
    out = []
    for piece in syntax.call:
        if isinstance(piece, Lit):
            out.append(piece.text)
        elif isinstance(piece, Name):
            out.append(call.name)
        elif isinstance(piece, CallId):
            out.append(call.call_id)
        elif isinstance(piece, JsonArgs):
            out.append(_dumps(dict(call.arguments)))
        elif isinstance(piece, JsonCall):
            if piece.name_is_key:
                out.append(_dumps({call.name: dict(call.arguments)}))
            else:
                out.append(
                    _dumps(
                        {piece.name_keys[0]: call.name, piece.args_keys[0]: dict(call.arguments)}
                    )
                )
        elif isinstance(piece, TagParams):
            out.append(_tag_params(piece, call.arguments))
        elif isinstance(piece, PyCall):
            args = ", ".join(f"{k}={_py_value(v)}" for k, v in call.arguments.items())
            out.append(f"{call.name}({args})")
        elif isinstance(piece, GemmaArgs):
            out.append(gemma_value(dict(call.arguments)))
    return "".join(out)


def render_calls(syntax: CallSyntax, calls: Sequence[CallText]) -> str:
    """The calls in ``syntax`` (one section holding them all, where the syntax has one)."""
    bodies = [_render_call(syntax, call) for call in calls]
    if syntax.section_open:
        return syntax.section_open + syntax.separator.join(bodies) + syntax.section_close
    return "".join(bodies)
