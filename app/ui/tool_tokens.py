"""What tool definitions cost in context: the tokens each tool adds to the loaded model's
prompt, rendered by its own template the way a turn renders it
(:func:`~app.engine.tool_calls.cost.tool_definition_tokens`, on the session thread), else
estimated from the length of its OpenAI ``tools`` entry (and said to be an estimate).

Counted per tool, each alone: the template's words around the list are in every tool's
count, so a sum is a little over what the prompt holds (on the safe side for a warning).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from app.engine.tool_calls import ToolSpec
from app.engine.tool_calls.cost import tool_definition_tokens
from app.mcp.client import McpTool

__all__ = [
    "CHARS_PER_TOKEN",
    "WARN_SHARE",
    "ToolCost",
    "count_tools",
    "definition_text",
    "share_warning",
]

# A rough rate for JSON with English descriptions (the usual BPE vocabularies give 3-4).
CHARS_PER_TOKEN: Final = 3.5
# Past this share of the context the tools' definitions get a warning (the issue's ~15%).
WARN_SHARE: Final = 0.15


def definition(tool: McpTool, name: str | None = None) -> dict[str, Any]:
    """The OpenAI ``tools`` entry of ``tool`` (``name``: the name the model calls it by)."""
    return {
        "type": "function",
        "function": {
            "name": name or tool.name,
            "description": tool.description,
            "parameters": dict(tool.input_schema),
        },
    }


def definition_text(tool: McpTool) -> str:
    return json.dumps(definition(tool), ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class ToolCost:
    """Tokens per tool (in the order given); ``estimated`` when no model counted them."""

    tokens: tuple[int, ...]
    estimated: bool

    @property
    def total(self) -> int:
        return sum(self.tokens)

    def text(self, n: int) -> str:
        return f"about {n:,} tokens" if self.estimated else f"{n:,} tokens"


class _Worker(Protocol):
    def call(self, fn: Callable[[Any], Any], done: Callable[[Any], None]) -> None: ...


def estimate(texts: Sequence[str]) -> ToolCost:
    return ToolCost(tuple(math.ceil(len(t) / CHARS_PER_TOKEN) for t in texts), True)


def count_tools(
    tools: Sequence[McpTool],
    worker: _Worker | None,
    model_ready: bool,
    done: Callable[[ToolCost], None],
) -> None:
    """``done`` (on the GUI thread) gets the tools' costs: counted by the model when one is
    loaded (``worker``: the window's EngineWorker), else estimated."""
    texts = [definition_text(t) for t in tools]
    if worker is None or not model_ready or not texts:
        done(estimate(texts))
        return

    def counted(result: object) -> None:
        if isinstance(result, list) and all(isinstance(n, int) and n > 0 for n in result):
            done(ToolCost(tuple(result), False))
        else:  # the model went meanwhile, or it has no template to render them with
            done(estimate(texts))

    specs = [ToolSpec(t.name, dict(t.input_schema), t.description) for t in tools]
    worker.call(lambda engine: [tool_definition_tokens(engine, [spec]) for spec in specs], counted)


def share_warning(cost: ToolCost, n_ctx: int) -> str:
    """A sentence when the tools take more than :data:`WARN_SHARE` of the context."""
    if n_ctx <= 0 or cost.total <= WARN_SHARE * n_ctx:
        return ""
    share = cost.total / n_ctx
    return (
        f"The tools' definitions take {cost.text(cost.total)}, {share:.0%} of this chat's "
        f"{n_ctx:,}-token context: less room for the conversation. Switch off tools you do "
        "not need here."
    )
