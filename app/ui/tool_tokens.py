"""What tool definitions cost in context: each tool as the model is given it (its OpenAI
``tools`` entry, JSON), counted with the loaded model's tokenizer on the session thread,
else estimated from its length (and said to be an estimate).

Templates wrap the definitions in a few words of their own, so a count is a little under
what the prompt holds; it is the part that grows with the tools, which is what a user
choosing tools weighs against a small context.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

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
        if isinstance(result, list) and all(isinstance(n, int) for n in result):
            done(ToolCost(tuple(result), False))
        else:  # the model went meanwhile
            done(estimate(texts))

    worker.call(lambda engine: [len(engine.tokenize(t, False, True)) for t in texts], counted)


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
