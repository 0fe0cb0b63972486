"""Prompt text and tokens, made on the request's own thread.

The session thread steps every conversation's decode, so what may be large (an 8 MiB
body) is rendered and tokenized here instead: the model's vocabulary and chat template
are fetched from the session once per loaded model, and tokenizing holds the model's
:class:`~app.engine.tokenizer.VocabLease` so an unload meanwhile waits, then refuses.
A text longer than its limit is refused after tokenizing about the limit's worth of it
(:func:`~app.engine.tokenizer.tokenize_bounded`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.engine import ChatTemplate, Engine
from app.engine.reasoning import prompt_opens_reasoning
from app.engine.tokenizer import ModelGoneError, detokenize_off_thread, tokenize_bounded
from app.engine.tool_calls.request import tool_turn
from app.errors import LlamaDeskError
from app.server.errors import bad_request, unavailable
from app.server.params import ChatRequest
from app.server.served_model import ServedModel
from app.session import LoadedModel

if TYPE_CHECKING:
    from app.engine.model import Model

# Token arrays a request may send (2**20 tokens).
MAX_TOKENS_IN = 1 << 20

GONE_MESSAGE = "The model was unloaded while the request was read; retry."


@dataclass(frozen=True)
class Vocab:
    """What request threads tokenize and render with, for one loaded model."""

    loaded: LoadedModel
    model: Model
    template: ChatTemplate | None


class RequestVocab:
    def __init__(self, served: ServedModel) -> None:
        self._served = served
        self._lock = threading.Lock()
        self._vocab: Vocab | None = None

    def get(self) -> Vocab:
        """The loaded model's vocabulary and template (one short session call per model)."""
        loaded = self._served.get()
        with self._lock:
            vocab = self._vocab
        if vocab is not None and vocab.loaded is loaded:
            return vocab

        def fetch(engine: Engine) -> tuple[Model | None, ChatTemplate | None]:
            return engine.model, engine.template

        model, template = self._served.call(fetch)
        if model is None:
            raise unavailable(GONE_MESSAGE, "loading")
        vocab = Vocab(loaded, model, template)
        with self._lock:
            self._vocab = vocab
        return vocab

    def tokenize(
        self, text: str, limit: int, *, add_special: bool, parse_special: bool
    ) -> list[int]:
        """``text``'s tokens; :class:`~app.engine.tokenizer.TextTooLongError` beyond
        ``limit`` (the caller says what the limit is for)."""
        try:
            return tokenize_bounded(
                self.get().model,
                text,
                limit,
                add_special=add_special,
                parse_special=parse_special,
            )
        except ModelGoneError:
            raise unavailable(GONE_MESSAGE, "loading") from None

    def detokenize(self, tokens: list[int]) -> str:
        try:
            return detokenize_off_thread(self.get().model, tokens, special=True)
        except ModelGoneError:
            raise unavailable(GONE_MESSAGE, "loading") from None
        except LlamaDeskError as exc:
            raise bad_request(str(exc), "tokens") from None

    def render_chat(self, req: ChatRequest) -> str:
        """The prompt text of a chat request (the template's generation prompt added)."""
        template = self.get().template
        if template is None:
            raise unavailable(GONE_MESSAGE, "loading")
        messages = [m.to_engine() for m in req.messages]
        if req.system:
            messages.insert(0, {"role": "system", "content": req.system})
        tools = req.tools.tools if req.tools is not None else ()
        try:
            text = template.render(
                messages, add_generation_prompt=True, reasoning=req.reasoning, tool_specs=tools
            )
        except LlamaDeskError as exc:
            raise bad_request(str(exc), "messages") from None
        try:  # tools the family cannot force: a 400 here, before the session sees them
            opens = prompt_opens_reasoning(text, template.reasoning_format)
            off = req.reasoning.enable_thinking is False
            tool_turn(template, req.tools, template.reasoning_format, opens, off)
        except LlamaDeskError as exc:
            raise bad_request(str(exc), "tools", "invalid_tools") from None
        return text

    def checked_tokens(self, value: Any, param: str) -> list[int]:
        """A request's token array, each id checked against the vocabulary."""
        n_vocab = self._served.get().info.n_vocab
        if not isinstance(value, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) for t in value
        ):
            raise bad_request(f"'{param}' must be an array of token ids.", param)
        if len(value) > MAX_TOKENS_IN:
            raise bad_request(
                f"'{param}' holds {len(value):,} tokens; at most {MAX_TOKENS_IN:,} are accepted.",
                param,
            )
        bad = next((t for t in value if not 0 <= t < n_vocab), None)
        if bad is not None:
            raise bad_request(
                f"Token id {bad} is not in the vocabulary (0 to {n_vocab - 1}).", param
            )
        return list(value)
