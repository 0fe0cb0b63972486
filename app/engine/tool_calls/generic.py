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


def generic_tools_prompt(
    tools: Sequence[ToolSpec], fmt: ToolCallFormat = ToolCallFormat.GENERIC
) -> str:
    """The system text that offers ``tools`` to a model whose template lists none; its
    calls are asked for in ``fmt`` (the generic JSON form, or the syntax of a family
    whose template shows past calls but not the tools, as DeepSeek R1's distills)."""
    listed = json.dumps(
        [
            {"name": t.name, "description": t.description, "parameters": dict(t.parameters)}
            for t in tools
        ],
        indent=2,
        ensure_ascii=False,
    )
    example = render_calls(
        SYNTAXES[fmt][0],
        [CallText(tools[0].name if tools else "tool_name", {"argument": "value"})],
    )
    how = (
        "To use tools, reply with only a JSON object like this one (several calls go in the list):"
        if fmt is ToolCallFormat.GENERIC
        else "To use a tool, write the call exactly like this:"
    )
    return f"You can use these tools:\n{listed}\n\n{how}\n{example}\nOtherwise, answer normally."
