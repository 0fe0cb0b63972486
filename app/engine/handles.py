"""What every room of the engine works on: the model, the context, the chat template and
the sequence table. ``load_model`` and ``reconfigure`` replace the model and the context,
so the rooms reach them through here rather than keeping their own references."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.engine.cache import CacheTraits
from app.engine.chat_template import ChatTemplate, ReasoningOptions
from app.engine.context import Context
from app.engine.errors import EngineError
from app.engine.events import Event
from app.engine.model import Model
from app.engine.sequence import Message, SequenceTable
from app.engine.template_choice import EndMarkers
from app.engine.tool_calls.specs import ToolSpec


class Handles:
    def __init__(self) -> None:
        self.model: Model | None = None
        self.context: Context | None = None
        self.template: ChatTemplate | None = None
        # How a chat reply ends besides EOG tokens (app.engine.template_choice).
        self.end_markers = EndMarkers()
        self.table = SequenceTable()
        # Whose encoder output the context holds: (key, seq_id), since cross-attention
        # matches the encoder's sequence ids.
        self.encoded_for: tuple[int, int] | None = None
        # Events of work done outside a step (evictions by fork, restore...): the next
        # step reports them first.
        self.side_events: list[Event] = []

    def need_model(self) -> Model:
        if self.model is None:
            raise EngineError("No model is loaded. Load a model first.")
        return self.model

    def need_ctx(self) -> Context:
        if self.context is None:
            raise EngineError("No context exists. Load a model first.")
        return self.context

    @property
    def traits(self) -> CacheTraits:
        return self.need_ctx().traits

    @property
    def n_ctx_seq(self) -> int:
        return self.need_ctx().n_ctx_seq

    def forget_encoder_output(self, key: int) -> None:
        if self.encoded_for is not None and self.encoded_for[0] == key:
            self.encoded_for = None

    def layout(self) -> dict[str, Any]:
        """What a saved state must match besides the model (see :mod:`app.engine.state_file`)."""
        layout = self.need_ctx().settings.layout_key()
        layout["n_ctx_train"] = self.need_model().n_ctx_train
        return layout

    def render_chat(
        self,
        messages: list[Message],
        generation_prompt: bool,
        reasoning: ReasoningOptions | None,
        tools: Sequence[ToolSpec] = (),
    ) -> str:
        if self.template is None:
            raise EngineError("No model is loaded. Load a model first.")
        return self.template.render(
            messages, add_generation_prompt=generation_prompt, reasoning=reasoning, tool_specs=tools
        )

    def tokenize_chat(self, text: str) -> list[int]:
        """A rendered chat's tokens: BOS per the model's rule, special tokens parsed."""
        return self.need_model().tokenize(text, add_special=True, parse_special=True)
