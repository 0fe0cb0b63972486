"""What tool definitions cost: the tokens they add to a model's prompt (small contexts fill
up with them: the window warns past a share of the context)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from app.engine.tool_calls.specs import ToolSpec

if TYPE_CHECKING:
    from app.engine import Engine

__all__ = ["tool_definition_tokens"]

_PROBE = [{"role": "user", "content": "Hello."}]


def tool_definition_tokens(engine: Engine, tools: Sequence[ToolSpec]) -> int:
    """How many tokens listing ``tools`` adds to a prompt of the loaded model, rendered
    by its template the way a turn renders them (run it with ``Session.call``)."""
    template = engine.template
    if template is None or not tools:
        return 0
    bare = template.render(_PROBE)
    listed = template.render(_PROBE, tool_specs=tools)
    return max(0, len(engine.tokenize(listed)) - len(engine.tokenize(bare)))
