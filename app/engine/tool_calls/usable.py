"""Which of a set of tools a request can carry: one tool whose definition is malformed or
whose schema cannot be turned into a grammar is left out with a sentence naming it, and
the others still go (issue 27, item 7: one such tool in an ``mcp.json`` made every run
exit 2). The window and ``run --mcp`` offer MCP servers' tools through it; the API server
does not (a client's own malformed tool is a 400, as it asked for it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from app.engine.tool_calls.formats import ToolCallFormat
from app.engine.tool_calls.grammar import ToolGrammarError, call_grammar
from app.engine.tool_calls.specs import ToolSpecError, tool_specs

__all__ = ["usable_tools"]


def usable_tools(
    tools: Sequence[Mapping[str, Any]],
) -> tuple[list[Mapping[str, Any]], list[str]]:
    """The tools (OpenAI's shape) that can be offered, and a warning per tool left out.

    The grammar is checked in the generic JSON family, where every schema-level problem
    shows; this holds for a remote server too (a LlamaDesk or llama-server there would
    refuse the whole request)."""
    kept: list[Mapping[str, Any]] = []
    warnings: list[str] = []
    for tool in tools:
        function = tool.get("function")
        name = function.get("name") if isinstance(function, Mapping) else None
        try:
            [spec] = tool_specs([tool])
            call_grammar(ToolCallFormat.GENERIC, [spec])
        except (ToolSpecError, ToolGrammarError) as exc:
            warnings.append(f"The tool '{name}' is left out: {exc}")
            continue
        kept.append(tool)
    return kept, warnings
