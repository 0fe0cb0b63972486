"""Tools for a template that knows none: described in a system message, to be called in
the generic JSON form (:attr:`ToolCallFormat.GENERIC`), as llama.cpp does for such
templates. The example in the description is written by the same syntax the parser
reads, so the two cannot drift apart."""

from __future__ import annotations

import json
from collections.abc import Sequence

from app.engine.tool_calls.formats import SYNTAXES, ToolCallFormat
from app.engine.tool_calls.render import CallText, render_calls
from app.engine.tool_calls.specs import ToolSpec

__all__ = ["generic_tools_prompt"]


def generic_tools_prompt(tools: Sequence[ToolSpec]) -> str:
    """The system text that offers ``tools`` to a model whose template has no tools."""
    listed = json.dumps(
        [
            {"name": t.name, "description": t.description, "parameters": dict(t.parameters)}
            for t in tools
        ],
        indent=2,
        ensure_ascii=False,
    )
    example = render_calls(
        SYNTAXES[ToolCallFormat.GENERIC][0],
        [CallText(tools[0].name if tools else "tool_name", {"argument": "value"})],
    )
    return (
        "You can use these tools:\n"
        f"{listed}\n\n"
        "To use tools, reply with only a JSON object like this one (several calls go in the list):\n"
        f"{example}\n"
        "Otherwise, answer normally."
    )
