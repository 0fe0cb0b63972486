"""Queueing a prompt: only the suffix the cache does not already hold is processed.

The cache is cut back to the common prefix of what it holds and the new tokens (see
:meth:`Snapshots.truncate` for caches that cannot be cut anywhere); encoder-decoder models
instead take the whole prompt through ``llama_encode`` and decode from the decoder start.
"""

from __future__ import annotations

from collections.abc import Iterable

import llama_cpp

from app.engine.context_policy import ContextFullPolicy
from app.engine.errors import ContextFullError, EngineError, context_advice
from app.engine.events import Completion
from app.engine.handles import Handles
from app.engine.prefix import common_prefix
from app.engine.sequence import Sequence
from app.engine.snapshots import Snapshots


class PromptQueue:
    def __init__(self, handles: Handles, snapshots: Snapshots) -> None:
        self._h = handles
        self._snapshots = snapshots

    def check_tokens(self, tokens: list[int]) -> None:
        model = self._h.need_model()
        bad = next((t for t in tokens if not isinstance(t, int) or not model.valid_token(t)), None)
        if bad is not None:
            raise EngineError(
                f"Token id {bad} is not in this model's vocabulary (0..{model.n_vocab - 1})."
            )

    def set_tokens(self, seq: Sequence, tokens: list[int], marks: Iterable[int] = ()) -> int:
        """Make ``tokens`` what the sequence holds once its queue is processed; returns how
        many are queued. ``marks``: where to take checkpoints besides the end."""
        self.check_tokens(tokens)
        if self._h.need_model().has_encoder:
            return self._set_encoder_input(seq, tokens)
        n_ctx_seq = self._h.n_ctx_seq
        if len(tokens) >= n_ctx_seq:
            advice = context_advice(n_ctx_seq, self._h.need_model().n_ctx_train)
            raise ContextFullError(
                f"The prompt is {len(tokens):,} tokens but the context holds {n_ctx_seq:,}: "
                f"{advice}."
            )
        kept = self._snapshots.truncate(seq, common_prefix(seq.tokens, tokens))
        seq.pending = tokens[kept:]
        if not seq.pending:
            self._snapshots.queue_for_logits(seq)
        if self._h.traits.needs_checkpoints:
            seq.checkpoint_at = {
                m for m in (*marks, len(tokens)) if len(seq.tokens) < m <= len(tokens)
            }
        seq.prompt_total, seq.prompt_done = len(seq.pending), 0
        seq.completion = Completion(n_prompt=len(tokens), n_prompt_processed=len(seq.pending))
        self._h.table.touch(seq)
        return len(seq.pending)

    def append_tokens(self, seq: Sequence, tokens: list[int]) -> int:
        self.check_tokens(tokens)
        n_ctx_seq = self._h.n_ctx_seq
        total = len(seq.tokens) + len(seq.pending) + len(tokens)
        if total >= n_ctx_seq and self._h.table.policy(seq) is ContextFullPolicy.STOP:
            raise ContextFullError(
                f"The sequence would need {total:,} tokens; the context holds {n_ctx_seq:,}."
            )
        seq.pending.extend(tokens)
        seq.prompt_total, seq.prompt_done = len(seq.pending), 0
        return len(seq.pending)

    def _set_encoder_input(self, seq: Sequence, tokens: list[int]) -> int:
        """Encoder-decoder models: the prompt goes through ``llama_encode``; decoding starts
        from the decoder start token."""
        ctx = self._h.need_ctx()
        model = self._h.need_model()
        if not tokens:
            raise EngineError("There is nothing to encode: the prompt is empty.")
        limit = ctx.batch.capacity
        if len(tokens) > limit:
            raise ContextFullError(
                f"The prompt is {len(tokens):,} tokens; this encoder-decoder model reads at most {limit:,} "
                "at once (raise the micro-batch size)."
            )
        self._snapshots.truncate(seq, 0)
        seq.parked = None
        seq.encoder_input = list(tokens)
        self._h.forget_encoder_output(seq.key)
        start = int(llama_cpp.llama_model_decoder_start_token(model.handle))
        seq.pending = [start if start >= 0 else model.bos]
        seq.prompt_total, seq.prompt_done = len(tokens), 0
        seq.completion = Completion(n_prompt=len(tokens), n_prompt_processed=len(tokens))
        self._h.table.touch(seq)
        return len(tokens)
