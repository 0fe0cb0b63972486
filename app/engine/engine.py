"""The engine: one model, one context, many sequences, one batched decode per step.

A sequence is what a chat tab talks to. The caller holds an int *key*; while a sequence is
resident it is bound to a llama.cpp ``seq_id`` (at most ``n_seq_max`` at once) and the
least recently used idle one is evicted into a parked state blob when another needs its
place. ``step()`` builds one ``llama_batch`` from every busy sequence — one token per
generating sequence, then prompt chunks up to ``n_batch`` — decodes it once, samples per
sequence and returns events. The engine is not thread-safe except for :meth:`stop`: one
thread (the UI's worker) owns it.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np

from app.engine.cache import CacheTraits
from app.engine.chat_template import ChatTemplate, ReasoningOptions
from app.engine.checkpoints import Checkpoint, Checkpoints
from app.engine.context import Context
from app.engine.errors import ContextError, ContextFullError, EngineError, StateError
from app.engine.events import (
    Completion,
    ContextShifted,
    Event,
    Evicted,
    Finished,
    PromptProgress,
    SequenceFailed,
    TokenText,
)
from app.engine.metadata import ModelInfo
from app.engine.model import Model, ProgressCallback
from app.engine.reasoning import (
    Channel,
    Piece,
    ReasoningFormat,
    ReasoningSplitter,
    prompt_opens_reasoning,
)
from app.engine.sampling import Sampler
from app.engine.settings import ContextSettings, ModelSettings, SamplingParams
from app.engine.state_file import SequenceState
from app.engine.text import StopMatcher, Utf8Stream
from app.fsutil import atomic_write_bytes

log = logging.getLogger(__name__)

Message = dict[str, Any]


@dataclass
class _Seq:
    key: int
    seq_id: int | None = None
    tokens: list[int] = field(default_factory=list)  # what the cache holds, position = index
    pending: list[int] = field(default_factory=list)  # to decode next (prompt, or last sample)
    parked: SequenceState | None = None  # the cache while not resident
    cut_after_restore: int | None = None  # truncate the restored cache to this many tokens
    checkpoints: Checkpoints = field(default_factory=Checkpoints)
    checkpoint_at: set[int] = field(default_factory=set)  # take one when the cache holds this many
    # Logits for the token after the first ``ready_at`` cached tokens (from a checkpoint):
    # generation can start there without decoding the last token again.
    ready_logits: bytes | None = None
    ready_at: int = -1
    maybe_shared: bool = False  # cells may be shared with a fork (seq_cp in a unified cache)
    busy: bool = False  # prefilling or generating
    want_generation: bool = False
    want_logits: bool = False  # keep the last prompt token's logits (tests, scoring)
    last_logits: np.ndarray | None = None
    encoder_input: list[int] | None = None  # encoder-decoder models: the prompt for llama_encode
    generating: bool = False
    stop_requested: bool = False
    params: SamplingParams | None = None
    sampler: Sampler | None = None
    completion: Completion = field(default_factory=Completion)
    utf8: Utf8Stream = field(default_factory=Utf8Stream)
    stopper: StopMatcher = field(default_factory=lambda: StopMatcher([]))
    prompt_total: int = 0
    prompt_done: int = 0
    n_keep: int = 0
    messages: list[Message] | None = None
    n_dropped: int = 0  # chat messages dropped from the front by context shifts
    policy: str | None = None  # "shift" or "stop" when the context is full; None = the engine's
    last_used: int = 0
    t_gen_start: float = 0.0
    # How this turn's reply is split into reasoning and answer (NONE: all answer).
    reasoning: ReasoningOptions | None = None  # thinking on/off and effort, per chat
    reasoning_format: ReasoningFormat = ReasoningFormat.NONE
    opens_reasoning: bool = False  # the prompt ended inside an open reasoning block
    splitter: ReasoningSplitter | None = None

    @property
    def n_past(self) -> int:
        return len(self.tokens)


@dataclass
class SequenceInfo:
    """What the UI shows about a sequence (context meter, state)."""

    key: int
    n_tokens: int
    n_ctx: int
    resident: bool
    busy: bool
    generating: bool
    prompt_done: int
    prompt_total: int


class Engine:
    """Owns the model and the context; see the module docstring."""

    def __init__(self) -> None:
        self.model: Model | None = None
        self.context: Context | None = None
        self.template: ChatTemplate | None = None
        self._seqs: dict[int, _Seq] = {}
        self._next_key = 1
        self._clock = 0
        self._rotation = 0
        # Whose encoder output the context holds: (key, seq_id), since cross-attention
        # matches the encoder's sequence ids.
        self._encoded_for: tuple[int, int] | None = None
        self._side_events: list[Event] = []
        self.last_restore_error: str | None = None  # why the last restore_state was refused
        self.context_full_policy = "shift"  # or "stop"

    # ---------------------------------------------------------------- lifecycle

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        settings: ContextSettings | None = None,
        model_settings: ModelSettings | None = None,
        progress: ProgressCallback | None = None,
    ) -> Engine:
        engine = cls()
        try:
            engine.load_model(path, model_settings, progress)
            engine.create_context(settings or ContextSettings())
        except BaseException:
            engine.close()
            raise
        return engine

    def load_model(
        self,
        path: str | os.PathLike[str],
        model_settings: ModelSettings | None = None,
        progress: ProgressCallback | None = None,
    ) -> ModelInfo:
        """Load a model, replacing the current one (its sequences are closed)."""
        self.close()
        self.model = Model(path, model_settings, progress)
        info = self.model.info
        self.template = ChatTemplate.for_model(info.chat_template, info.bos_token, info.eos_token)
        return info

    def create_context(self, settings: ContextSettings) -> None:
        model = self._need_model()
        if self.context is not None:
            self.reconfigure(settings)
            return
        self.context = Context(model, settings)

    def close(self) -> None:
        """Free the context before the model (the context points into it)."""
        for seq in self._seqs.values():
            if seq.sampler:
                seq.sampler.close()
        self._seqs.clear()
        if self.context is not None:
            self.context.close()
            self.context = None
        if self.model is not None:
            self.model.close()
            self.model = None

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- properties

    @property
    def model_info(self) -> ModelInfo:
        return self._need_model().info

    @property
    def settings(self) -> ContextSettings:
        return self._need_ctx().settings

    @property
    def n_ctx_seq(self) -> int:
        return self._need_ctx().n_ctx_seq

    @property
    def model_fingerprint(self) -> str:
        return self._need_model().fingerprint

    def memory(self) -> dict[str, int]:
        """Bytes used by the weights and by the KV cache (the status bar shows these)."""
        model = self._need_model()
        ctx = self.context
        kv = int(ctx.settings.kv_bytes_per_token(model.info) * ctx.n_ctx) if ctx is not None else 0
        held = sum(len(s.tokens) for s in self._seqs.values() if s.seq_id is not None)
        recurrent = 0
        if ctx is not None:
            recurrent = ctx.settings.memory_estimate(model.info).recurrent_bytes
        return {
            "model_bytes": model.size_bytes,
            "kv_bytes": kv,
            "recurrent_bytes": recurrent,
            "checkpoint_bytes": sum(s.checkpoints.nbytes for s in self._seqs.values()),
            "kv_tokens_held": held,
            "n_ctx": ctx.n_ctx if ctx is not None else 0,
        }

    @property
    def _traits(self) -> CacheTraits:
        return self._need_ctx().traits

    @property
    def cache_traits(self) -> CacheTraits:
        """What this context's cache can do (its architecture family)."""
        return self._traits

    def _need_model(self) -> Model:
        if self.model is None:
            raise EngineError("No model is loaded. Load a model first.")
        return self.model

    def _need_ctx(self) -> Context:
        if self.context is None:
            raise EngineError("No context exists. Load a model first.")
        return self.context

    def _seq(self, key: int) -> _Seq:
        seq = self._seqs.get(key)
        if seq is None:
            raise EngineError(f"Sequence {key} does not exist (it was closed).")
        return seq

    def _touch(self, seq: _Seq) -> None:
        self._clock += 1
        seq.last_used = self._clock

    # ---------------------------------------------------------------- tokens and text

    def tokenize(
        self, text: str, add_special: bool = True, parse_special: bool = True
    ) -> list[int]:
        return self._need_model().tokenize(text, add_special, parse_special)

    def detokenize(self, tokens: Iterable[int], special: bool = False) -> str:
        return self._need_model().detokenize(list(tokens), special)

    def render_chat(
        self,
        messages: list[Message],
        add_generation_prompt: bool = True,
        reasoning: ReasoningOptions | None = None,
    ) -> str:
        if self.template is None:
            raise EngineError("No model is loaded. Load a model first.")
        return self.template.render(
            messages, add_generation_prompt=add_generation_prompt, reasoning=reasoning
        )

    # ---------------------------------------------------------------- sequences

    def open_sequence(self) -> int:
        self._need_ctx()
        key = self._next_key
        self._next_key += 1
        seq = _Seq(key)
        self._touch(seq)
        self._seqs[key] = seq
        return key

    def set_policy(self, key: int, policy: str | None) -> None:
        """What a full context does to this sequence: "shift" (drop old messages) or "stop"."""
        if policy not in (None, "shift", "stop"):
            raise EngineError(f"The context-full policy must be 'shift' or 'stop', not {policy!r}.")
        self._seq(key).policy = policy

    def _policy(self, seq: _Seq) -> str:
        return seq.policy or self.context_full_policy

    def sequences(self) -> list[int]:
        return list(self._seqs)

    def close_sequence(self, key: int) -> None:
        seq = self._seqs.pop(key, None)
        if seq is None:
            return
        if seq.seq_id is not None and self.context is not None:
            self.context.seq_rm(seq.seq_id, -1, -1)
        if self._encoded_for is not None and self._encoded_for[0] == key:
            self._encoded_for = None
        if seq.sampler:
            seq.sampler.close()

    def clear_sequence(self, key: int) -> None:
        """Forget what the sequence holds (a new conversation in the same tab)."""
        seq = self._seq(key)
        self._require_idle(seq)
        if seq.seq_id is not None:
            self._need_ctx().seq_rm(seq.seq_id, -1, -1)
        seq.tokens, seq.pending, seq.parked = [], [], None
        seq.messages, seq.n_dropped, seq.n_keep, seq.maybe_shared = None, 0, 0, False
        seq.cut_after_restore, seq.encoder_input, seq.last_logits = None, None, None
        seq.checkpoints.clear()
        seq.checkpoint_at.clear()
        seq.ready_logits, seq.ready_at = None, -1
        if self._encoded_for is not None and self._encoded_for[0] == key:
            self._encoded_for = None

    def tokens(self, key: int) -> list[int]:
        """The tokens the sequence's cache holds."""
        return list(self._seq(key).tokens)

    def pending_tokens(self, key: int) -> list[int]:
        return list(self._seq(key).pending)

    def is_busy(self, key: int) -> bool:
        return self._seq(key).busy

    def has_work(self) -> bool:
        return any(s.busy for s in self._seqs.values())

    def info(self, key: int) -> SequenceInfo:
        seq = self._seq(key)
        return SequenceInfo(
            key=key,
            n_tokens=len(seq.tokens) + len(seq.pending),
            n_ctx=self.n_ctx_seq,
            resident=seq.seq_id is not None,
            busy=seq.busy,
            generating=seq.generating,
            prompt_done=seq.prompt_done,
            prompt_total=seq.prompt_total,
        )

    def keep_only(self, key: int) -> None:
        """Drop every other sequence's cells (``seq_keep``), e.g. before a whole-context save."""
        seq = self._seq(key)
        ctx = self._need_ctx()
        if self.has_work():
            raise EngineError("Stop generation in every tab first.")
        self._ensure_resident(seq, self._side_events)
        if seq.seq_id is None:
            raise EngineError("No free sequence slot for this sequence.")
        ctx.seq_keep(seq.seq_id)
        for other in self._seqs.values():
            if other is not seq and other.seq_id is not None:
                other.seq_id = None
                other.pending = other.tokens + other.pending
                self._set_held(other, 0)

    def fork(self, key: int, n_tokens: int | None = None) -> int:
        """A new sequence holding the first ``n_tokens`` of ``key``'s cache, without recomputing.

        The whole state is copied (a recurrent state cannot be copied in part), then cut
        back to ``n_tokens`` like any other cut: exactly where the cache allows it, else from
        the checkpoint at or before ``n_tokens``, the rest queued to be processed again.
        """
        src = self._seq(key)
        self._require_idle(src)
        ctx = self._need_ctx()
        if n_tokens is None:
            n_tokens = len(src.tokens)
        if not 0 <= n_tokens <= len(src.tokens):
            raise EngineError(
                f"Cannot fork at token {n_tokens}: the sequence holds {len(src.tokens)}."
            )
        if self._need_model().has_encoder:
            raise EngineError("Encoder-decoder models cannot fork a conversation.")
        dst = self._seqs[self.open_sequence()]
        dst.messages = list(src.messages) if src.messages is not None else None
        dst.n_keep, dst.n_dropped = min(src.n_keep, n_tokens), src.n_dropped
        events = self._side_events
        no_slot = (
            "No free sequence slot to fork into: stop a tab or raise the number of resident tabs."
        )
        try:
            self._ensure_resident(src, events, protect={src.key, dst.key})
            if src.seq_id is None:
                raise EngineError(no_slot)
            self._assign_slot(dst, events, protect={src.key, dst.key})
            if dst.seq_id is None:
                raise EngineError(no_slot)
            if ctx.settings.kv_unified:
                ctx.seq_cp(src.seq_id, dst.seq_id, -1, -1)
                src.maybe_shared = dst.maybe_shared = True
            elif not ctx.state_set(dst.seq_id, ctx.state_get(src.seq_id)):
                # A split cache cannot share cells: copy the data instead.
                raise StateError("Could not copy the sequence state for the fork.")
        except BaseException:
            self.close_sequence(dst.key)
            raise
        dst.tokens = list(src.tokens)
        dst.checkpoints = src.checkpoints.copy(up_to=n_tokens)
        dst.ready_logits, dst.ready_at = src.ready_logits, src.ready_at
        kept = self._truncate(dst, n_tokens)
        dst.pending = src.tokens[kept:n_tokens]
        if n_tokens == len(src.tokens):
            dst.pending += src.pending
        return dst.key

    # ---------------------------------------------------------------- prompting

    def set_chat(
        self,
        key: int,
        messages: list[Message],
        system: str | None = None,
        add_generation_prompt: bool = True,
        reserve: int | None = None,
        reasoning: ReasoningOptions | None = None,
    ) -> int:
        """Queue a conversation; only the suffix the cache does not hold is processed.

        Returns the number of tokens that will be processed. When the conversation does not
        fit, the oldest messages after the system prompt are left out (the same ones a
        context shift dropped), keeping room for ``reserve`` new tokens.
        """
        seq = self._seq(key)
        self._require_idle(seq)
        model = self._need_model()
        msgs = [dict(m) for m in messages]
        if system:
            msgs = [
                {"role": "system", "content": system},
                *[m for m in msgs if m.get("role") != "system"],
            ]
        head = msgs[:1] if msgs and msgs[0].get("role") == "system" else []
        body = msgs[len(head) :]
        room = reserve if reserve is not None and reserve > 0 else max(16, self.n_ctx_seq // 4)
        budget = self.n_ctx_seq - min(room, self.n_ctx_seq // 2)
        dropped = min(seq.n_dropped, max(0, len(body) - 1)) if seq.messages is not None else 0
        while True:
            kept = head + body[dropped:]
            text = self.render_chat(kept, add_generation_prompt, reasoning)
            tokens = model.tokenize(text, add_special=True, parse_special=True)
            if len(tokens) <= budget or dropped >= len(body) - 1:
                break
            dropped += 1
        if len(tokens) >= self.n_ctx_seq:
            raise ContextFullError(
                f"The conversation needs {len(tokens):,} tokens but the context holds {self.n_ctx_seq:,}: "
                "raise the context size in Settings or start a new conversation."
            )
        seq.messages, seq.n_dropped, seq.reasoning = msgs, dropped, reasoning
        seq.n_keep = (
            self._system_tokens(head, tokens, reasoning) if head else (1 if model.add_bos else 0)
        )
        template = self.template
        assert template is not None
        seq.reasoning_format = (
            template.reasoning_format if add_generation_prompt else ReasoningFormat.NONE
        )
        seq.opens_reasoning = prompt_opens_reasoning(text, seq.reasoning_format)
        tokens = self._reuse_sampled_tokens(seq, text, tokens)
        marks = self._chat_marks(seq, kept, tokens) if self._traits.needs_checkpoints else ()
        return self._set_tokens(seq, tokens, marks)

    def _chat_marks(self, seq: _Seq, kept: list[Message], tokens: list[int]) -> list[int]:
        """Where to checkpoint a chat prompt besides its end: after the system prompt and
        before the last user message (an edit of that message restores there)."""
        marks = [seq.n_keep] if seq.n_keep > 1 else []
        last_user = max((i for i, m in enumerate(kept) if m.get("role") == "user"), default=0)
        if last_user > 0:
            text = self.render_chat(kept[:last_user], False, seq.reasoning)
            before = self._need_model().tokenize(text, add_special=True, parse_special=True)
            if _common_prefix(before, tokens) == len(before):
                marks.append(len(before))
        return marks

    def _reuse_sampled_tokens(self, seq: _Seq, text: str, tokens: list[int]) -> list[int]:
        """Keep the tokens the model sampled when the new prompt text continues them.

        Re-tokenizing a reply does not always give back the tokens the model sampled (a
        BPE can split the same text another way), and every token after the first
        difference would be processed again. When the rendered text starts with exactly the
        text the cache holds, only the new tail is tokenized.
        """
        model = self._need_model()
        common = _common_prefix(seq.tokens, tokens)
        if common == len(seq.tokens):
            return tokens
        # Walk the cached tokens past the common prefix while their text is the start of
        # the new text: the sampled reply, and whatever followed it that the new prompt
        # still has (a regenerated later turn keeps the earlier replies' sampled tokens).
        new = b"".join(model.piece(t, special=True) for t in tokens[common:])
        held, offset, rest = common, 0, ""
        for token in seq.tokens[common:]:
            piece = model.piece(token, special=True)
            if not piece or new[offset : offset + len(piece)] != piece:
                break
            held, offset = held + 1, offset + len(piece)
        while held > common:
            try:
                rest = new[offset:].decode("utf-8")
                break
            except UnicodeDecodeError:  # the cut falls inside a character: step back
                held -= 1
                offset -= len(model.piece(seq.tokens[held], special=True))
        if held == common:
            return tokens
        tail = model.tokenize(rest, add_special=False, parse_special=True) if rest else []
        candidate = seq.tokens[:held] + tail
        # Accept only the same bytes split another way: a vocabulary that adds a space in
        # front of every text run (SentencePiece) would otherwise slip in text the template
        # never rendered.
        same_text = b"".join(model.piece(t, special=True) for t in candidate[common:]) == new
        return candidate if same_text else tokens

    def _system_tokens(
        self, head: list[Message], tokens: list[int], reasoning: ReasoningOptions | None
    ) -> int:
        model = self._need_model()
        prefix = model.tokenize(
            self.render_chat(head, False, reasoning), add_special=True, parse_special=True
        )
        n = _common_prefix(prefix, tokens)
        return n

    def set_prompt(self, key: int, text: str, raw: bool = True) -> int:
        """Queue raw text (BOS per the model's rule, special tokens parsed)."""
        if not raw:
            return self.set_chat(key, [{"role": "user", "content": text}])
        tokens = self.tokenize(text, add_special=True, parse_special=True)
        return self.set_tokens(key, tokens)

    def set_tokens(self, key: int, tokens: list[int]) -> int:
        seq = self._seq(key)
        self._require_idle(seq)
        seq.messages, seq.n_dropped = None, 0
        seq.reasoning_format, seq.opens_reasoning = ReasoningFormat.NONE, False
        seq.n_keep = 1 if self._need_model().add_bos else 0
        return self._set_tokens(seq, list(tokens))

    def append_text(self, key: int, text: str) -> int:
        """Queue more text after what the sequence holds (no BOS)."""
        return self.append_tokens(
            key, self.tokenize(text, add_special=False, parse_special=True) if text else []
        )

    def append_tokens(self, key: int, tokens: list[int]) -> int:
        seq = self._seq(key)
        self._require_idle(seq)
        self._check_tokens(tokens)
        total = len(seq.tokens) + len(seq.pending) + len(tokens)
        if total >= self.n_ctx_seq and self._policy(seq) == "stop":
            raise ContextFullError(
                f"The sequence would need {total:,} tokens; the context holds {self.n_ctx_seq:,}."
            )
        seq.pending.extend(tokens)
        seq.prompt_total, seq.prompt_done = len(seq.pending), 0
        return len(seq.pending)

    def _check_tokens(self, tokens: list[int]) -> None:
        model = self._need_model()
        bad = next((t for t in tokens if not isinstance(t, int) or not model.valid_token(t)), None)
        if bad is not None:
            raise EngineError(
                f"Token id {bad} is not in this model's vocabulary (0..{model.n_vocab - 1})."
            )

    def _set_tokens(self, seq: _Seq, tokens: list[int], marks: Iterable[int] = ()) -> int:
        self._check_tokens(tokens)
        model = self._need_model()
        if model.has_encoder:
            return self._set_encoder_input(seq, tokens)
        if len(tokens) >= self.n_ctx_seq:
            raise ContextFullError(
                f"The prompt is {len(tokens):,} tokens but the context holds {self.n_ctx_seq:,}: "
                "shorten it or raise the context size."
            )
        kept = self._truncate(seq, _common_prefix(seq.tokens, tokens))
        seq.pending = tokens[kept:]
        if not seq.pending:
            self._queue_for_logits(seq)
        if self._traits.needs_checkpoints:
            seq.checkpoint_at = {
                m for m in (*marks, len(tokens)) if len(seq.tokens) < m <= len(tokens)
            }
        seq.prompt_total, seq.prompt_done = len(seq.pending), 0
        seq.completion = Completion(n_prompt=len(tokens), n_prompt_processed=len(seq.pending))
        self._touch(seq)
        return len(seq.pending)

    def _queue_for_logits(self, seq: _Seq) -> None:
        """Make sure the next step has logits for the token after what the cache holds: a
        checkpoint's saved logits, or the last token(s) queued to be decoded again."""
        if not seq.tokens or self._ready_logits(seq) is not None:
            return
        held = list(seq.tokens)
        kept = self._truncate(seq, len(held) - 1)
        seq.pending = held[kept:] + seq.pending

    def _ready_logits(self, seq: _Seq) -> np.ndarray | None:
        if seq.ready_logits is None or seq.ready_at != len(seq.tokens) or seq.pending:
            return None
        return np.frombuffer(seq.ready_logits, dtype=np.float32)

    def _set_encoder_input(self, seq: _Seq, tokens: list[int]) -> int:
        """Encoder-decoder models: the prompt goes through ``llama_encode``; decoding starts
        from the decoder start token."""
        ctx = self._need_ctx()
        model = self._need_model()
        if not tokens:
            raise EngineError("There is nothing to encode: the prompt is empty.")
        limit = ctx.batch.capacity
        if len(tokens) > limit:
            raise ContextFullError(
                f"The prompt is {len(tokens):,} tokens; this encoder-decoder model reads at most {limit:,} "
                "at once (raise the micro-batch size)."
            )
        self._truncate(seq, 0)
        seq.parked = None
        seq.encoder_input = list(tokens)
        if self._encoded_for is not None and self._encoded_for[0] == seq.key:
            self._encoded_for = None
        start = int(llama_cpp.llama_model_decoder_start_token(model.handle))
        seq.pending = [start if start >= 0 else model.bos]
        seq.prompt_total, seq.prompt_done = len(tokens), 0
        seq.completion = Completion(n_prompt=len(tokens), n_prompt_processed=len(tokens))
        self._touch(seq)
        return len(tokens)

    def _encode(self, seq: _Seq) -> bool:
        ctx = self._need_ctx()
        assert seq.seq_id is not None and seq.encoder_input is not None
        if seq.tokens:
            # llama.cpp validates encoder positions against the sequence's cells: encode into
            # an empty sequence and decode what it held again (the encoder output was lost,
            # e.g. by a context rebuild or another sequence's turn).
            ctx.seq_rm(seq.seq_id, -1, -1)
            seq.pending = seq.tokens + seq.pending
            seq.tokens = []
        ctx.batch.clear()
        ctx.batch.add_span(seq.encoder_input, 0, seq.seq_id, False)
        ctx.batch.mark_all_outputs()
        code = ctx.encode()
        if code != 0:
            return False
        self._encoded_for = (seq.key, seq.seq_id)
        return True

    def _truncate(self, seq: _Seq, n: int) -> int:
        """Keep at most the first ``n`` cached tokens; returns how many are kept.

        Fewer than ``n`` when the cache cannot be cut there (recurrent state, a sliding
        window that forgot): the latest checkpoint before ``n`` is restored, or the cache is
        emptied. The caller queues the tokens past the returned count again.
        """
        if n >= len(seq.tokens):
            return len(seq.tokens)
        if seq.seq_id is not None:
            n = self._cut(seq, n)
        elif seq.parked is not None:
            seq.cut_after_restore = n if n > 0 else None
            if n == 0:
                seq.parked = None
        self._set_held(seq, n)
        return n

    def _cut(self, seq: _Seq, n: int) -> int:
        ctx = self._need_ctx()
        sid = seq.seq_id
        assert sid is not None
        traits = ctx.traits
        if traits.can_cut(n, len(seq.tokens), ctx.seq_pos_min(sid)) and ctx.seq_rm(sid, n, -1):
            return n
        checkpoint = seq.checkpoints.best_for(n)
        if (
            checkpoint is not None
            and ctx.partial_state_set(sid, checkpoint.blob)
            and ctx.seq_rm(sid, checkpoint.n_tokens, -1)
        ):
            log.debug(
                "sequence %d: restored the checkpoint at %d of %d tokens",
                seq.key,
                checkpoint.n_tokens,
                n,
            )
            if checkpoint.logits is not None:
                seq.ready_logits, seq.ready_at = checkpoint.logits, checkpoint.n_tokens
            return checkpoint.n_tokens
        log.debug("sequence %d: no checkpoint before %d tokens; processing again", seq.key, n)
        ctx.seq_rm(sid, -1, -1)
        return 0

    def _set_held(self, seq: _Seq, n: int) -> None:
        """The cache now holds the first ``n`` of the tokens we counted."""
        del seq.tokens[n:]
        seq.checkpoints.drop_after(n)
        if seq.ready_at > n:
            seq.ready_logits, seq.ready_at = None, -1

    def _take_checkpoint(self, seq: _Seq, logits: np.ndarray | None) -> None:
        ctx = self._need_ctx()
        assert seq.seq_id is not None
        try:
            blob = ctx.partial_state_get(seq.seq_id)
        except StateError as exc:
            log.warning("no checkpoint for sequence %d: %s", seq.key, exc)
            return
        raw = None
        if logits is not None:
            same = seq.ready_at == len(seq.tokens) and seq.ready_logits is not None
            raw = seq.ready_logits if same else logits.astype(np.float32).tobytes()
        seq.checkpoints.add(Checkpoint(len(seq.tokens), blob, raw))

    # ---------------------------------------------------------------- generation

    def start(self, key: int, params: SamplingParams | None = None) -> None:
        """Generate after the queued prompt (or from what the cache holds)."""
        seq = self._seq(key)
        self._require_idle(seq)
        model = self._need_model()
        params = params or SamplingParams()
        params.validate()
        if not seq.pending:
            if not seq.tokens:
                seq.pending = [model.bos] if model.bos >= 0 else []
                if not seq.pending:
                    raise EngineError("There is nothing to generate from: the prompt is empty.")
            else:
                self._queue_for_logits(seq)
        if seq.sampler:
            seq.sampler.close()
        seq.sampler = Sampler(model.vocab, model.n_vocab, params, self.n_ctx_seq)
        if params.repeat_penalty != 1.0 or params.frequency_penalty or params.presence_penalty:
            if not params.grammar:  # the grammar must not see the prompt
                last_n = self.n_ctx_seq if params.repeat_last_n < 0 else params.repeat_last_n
                history = (seq.tokens + seq.pending[:-1])[-last_n:] if last_n else []
                for token in history:
                    seq.sampler.accept(token)
        seq.params = params
        seq.utf8 = Utf8Stream()
        seq.stopper = StopMatcher(params.stop)
        seq.splitter = (
            ReasoningSplitter(seq.reasoning_format, seq.opens_reasoning)
            if seq.reasoning_format is not ReasoningFormat.NONE
            else None
        )
        seq.busy = seq.want_generation = True
        seq.generating = False
        seq.stop_requested = False
        seq.completion = Completion(
            n_prompt=len(seq.tokens) + len(seq.pending), n_prompt_processed=len(seq.pending)
        )
        seq.prompt_total, seq.prompt_done = len(seq.pending), 0
        self._touch(seq)

    def prefill(self, key: int, logits: bool = False) -> None:
        """Process the queued prompt without generating (e.g. to save a session).

        With ``logits`` the last token is decoded with output and its logits kept for
        :meth:`last_logits` (the cached last token is re-decoded if nothing is queued).
        """
        seq = self._seq(key)
        self._require_idle(seq)
        if logits and not seq.pending and seq.tokens:
            ready = self._ready_logits(seq)
            if ready is not None:
                seq.last_logits = ready.copy()
                return
            self._queue_for_logits(seq)
        if seq.pending:
            seq.busy, seq.want_generation, seq.generating = True, False, False
            seq.want_logits = logits
            seq.last_logits = None
            seq.stop_requested = False
            seq.prompt_total, seq.prompt_done = len(seq.pending), 0
            self._touch(seq)

    def next_logits(self, key: int) -> np.ndarray:
        """Logits for the token after what the sequence holds (runs the queued prompt)."""
        self.prefill(key, logits=True)
        self.run_until_done(key)
        logits = self._seq(key).last_logits
        if logits is None:
            raise EngineError("No logits were produced (the prompt was stopped or empty).")
        return logits

    def stop(self, key: int | None = None) -> None:
        """Stop one sequence or all; safe from any thread, effective within one micro-batch."""
        # Called from other threads: take a snapshot (tuple() of a dict view is atomic under the GIL).
        targets = (
            tuple(self._seqs.values())
            if key is None
            else tuple(s for s in [self._seqs.get(key)] if s)
        )
        hit = False
        for seq in targets:
            if seq.busy:
                seq.stop_requested = True
                hit = True
        if hit and self.context is not None:
            self.context.abort_requested = True

    def complete(
        self,
        key: int,
        params: SamplingParams | None = None,
        on_event: Callable[[Event], None] | None = None,
    ) -> Completion:
        """Start ``key`` and run steps until it finishes (other sequences advance too)."""
        self.start(key, params)
        return self.run_until_done(key, on_event)

    def run_until_done(
        self, key: int, on_event: Callable[[Event], None] | None = None
    ) -> Completion:
        seq = self._seq(key)
        while seq.busy:
            for event in self.step():
                if on_event is not None:
                    on_event(event)
        return seq.completion

    def chat(
        self, messages: list[Message], params: SamplingParams | None = None, key: int | None = None
    ) -> Completion:
        """One chat turn: render, process the new suffix, generate the reply."""
        if key is None:
            key = self.open_sequence()
        self.set_chat(
            key, messages, reserve=(params.max_tokens if params and params.max_tokens > 0 else None)
        )
        return self.complete(key, params)

    # ---------------------------------------------------------------- the scheduler

    def step(self) -> list[Event]:
        """One batched decode over every busy sequence. Returns what happened."""
        # Events of work done outside a step (evictions by fork, restore...) come first.
        events, self._side_events = self._side_events, []
        ctx = self._need_ctx()
        ctx.abort_requested = False
        for seq in self._seqs.values():
            if seq.busy and seq.stop_requested:
                self._finish(seq, "aborted", events)
        busy = [s for s in self._seqs.values() if s.busy]
        if not busy:
            return events
        if self._need_model().has_encoder:
            # The context holds one encoder output at a time: encoder-decoder sequences take turns.
            current = [s for s in busy if (s.key, s.seq_id) == self._encoded_for]
            busy = current or busy[:1]
            self._ensure_resident(busy[0], events, protect={busy[0].key})
            if busy[0].seq_id is not None and self._encoded_for != (busy[0].key, busy[0].seq_id):
                if busy[0].encoder_input is None or not self._encode(busy[0]):
                    self._finish(busy[0], "error", events, "llama.cpp could not encode the prompt.")
                    return events
        for seq in sorted(busy, key=lambda s: s.seq_id is None):
            self._ensure_resident(seq, events, protect={s.key for s in busy})
        for seq in busy:
            ready = self._ready_logits(seq) if seq.want_generation and not seq.generating else None
            if ready is not None and seq.seq_id is not None:
                # A checkpoint kept the prompt's last logits: the reply starts without a decode.
                assert seq.sampler is not None
                seq.generating = True
                seq.t_gen_start = time.perf_counter()
                self._on_token(seq, seq.sampler.sample_logits(ready), events)
        prompt_cap: int | None = None  # shrinks when the cache has no room for the batch
        for _attempt in range(12):
            spans = self._build_batch(events, prompt_cap)
            if not spans:
                return events
            ctx.set_abort_check(any(not seq.generating for seq, _, _ in spans))
            started = time.perf_counter()
            result = ctx.decode()
            elapsed_ms = (time.perf_counter() - started) * 1000.0
            if result.ok:
                self._after_decode(spans, elapsed_ms, events)
                return events
            self._resync(spans)
            if result.aborted:
                log.info("decode aborted (stop requested)")
                return events
            if result.code < 0:
                message = f"llama.cpp failed to process the batch (error {result.code}). The reply was stopped; try again."
                for seq, _, _ in spans:
                    self._finish(seq, "error", events, message)
                return events
            prompt_cap = self._make_pool_room(spans, prompt_cap, events)
        return events

    def _build_batch(
        self, events: list[Event], prompt_cap: int | None = None
    ) -> list[tuple[_Seq, list[int], int | None]]:
        ctx = self._need_ctx()
        batch = ctx.batch
        batch.clear()
        spans: list[tuple[_Seq, list[int], int | None]] = []
        resident = [s for s in self._seqs.values() if s.busy and s.seq_id is not None and s.pending]
        if self._encoded_for is not None and self._need_model().has_encoder:
            resident = [s for s in resident if (s.key, s.seq_id) == self._encoded_for]
        generating = [s for s in resident if s.generating]
        prefilling = [s for s in resident if not s.generating]
        # Rotate both lists so that no sequence waits behind others step after step.
        self._rotation += 1
        if len(generating) > 1:
            r = self._rotation % len(generating)
            generating = generating[r:] + generating[:r]
        if len(prefilling) > 1:
            r = self._rotation % len(prefilling)
            prefilling = prefilling[r:] + prefilling[:r]
        prompt_room = batch.capacity if prompt_cap is None else prompt_cap
        for seq in generating + prefilling:
            room = batch.free if seq.generating else min(batch.free, prompt_room)
            if room <= 0:
                continue
            if not self._make_room(seq, min(len(seq.pending), room), events):
                continue
            # A chunk ends where a checkpoint is due, so the state can be taken there.
            mark = min((m for m in seq.checkpoint_at if m > len(seq.tokens)), default=None)
            if mark is not None:
                room = min(room, mark - len(seq.tokens))
            chunk = seq.pending[:room]
            if not seq.generating:
                prompt_room -= len(chunk)
            completes = len(chunk) == len(seq.pending)
            at_mark = mark == len(seq.tokens) + len(chunk)
            # The last prompt token's logits are always kept (one row): a reply, or a later
            # regenerate, starts from them.
            want_logits = at_mark or completes
            assert seq.seq_id is not None
            index = batch.add_span(chunk, len(seq.tokens), seq.seq_id, want_logits)
            spans.append((seq, chunk, index if want_logits else None))
        return spans

    def _after_decode(
        self,
        spans: list[tuple[_Seq, list[int], int | None]],
        elapsed_ms: float,
        events: list[Event],
    ) -> None:
        ctx = self._need_ctx()
        now = time.perf_counter()
        for seq, chunk, index in spans:
            seq.tokens.extend(chunk)
            del seq.pending[: len(chunk)]
            logits = ctx.logits(index) if index is not None and not seq.generating else None
            if logits is not None and not seq.pending:
                # The prompt's last logits: a regenerated reply starts here without a decode.
                seq.ready_logits, seq.ready_at = logits.tobytes(), len(seq.tokens)
            if len(seq.tokens) in seq.checkpoint_at:
                seq.checkpoint_at.discard(len(seq.tokens))
                self._take_checkpoint(seq, logits)
            if not seq.generating:
                seq.prompt_done += len(chunk)
                seq.completion.prompt_ms += elapsed_ms
                events.append(PromptProgress(seq.key, seq.prompt_done, seq.prompt_total))
                if logits is not None and seq.want_logits and not seq.pending:
                    seq.last_logits = logits
                if not seq.pending and not seq.want_generation:
                    seq.busy = seq.want_logits = False
                    events.append(Finished(seq.key, seq.completion))
                    continue
            if index is None or seq.pending:
                continue
            if not seq.generating:
                seq.generating = True
                seq.t_gen_start = now
            assert seq.sampler is not None and seq.params is not None
            token = seq.sampler.sample(ctx.handle, index)
            self._on_token(seq, token, events)

    def _on_token(self, seq: _Seq, token: int, events: list[Event]) -> None:
        model = self._need_model()
        params = seq.params
        assert params is not None
        seq.pending = [
            token
        ]  # decoded next step; kept when finishing, so a resume continues exactly
        if model.is_eog(token):
            self._finish(seq, "eog", events)
            return
        seq.completion.tokens.append(token)
        # A reasoning format's markers may be control tokens (gpt-oss's <|channel|>): the
        # splitter reads them and keeps them out of the text.
        piece = model.piece(token, special=seq.splitter is not None)
        self._emit_text(seq, seq.stopper.feed(seq.utf8.feed(piece)), token, events)
        if seq.stopper.stopped is not None:
            self._finish(seq, "stop", events)
        elif 0 < params.max_tokens <= len(seq.completion.tokens):
            self._finish(seq, "length", events)

    def _emit_text(self, seq: _Seq, text: str, token: int, events: list[Event]) -> None:
        if text:
            pieces = (
                [Piece(Channel.ANSWER, text)] if seq.splitter is None else seq.splitter.feed(text)
            )
            self._emit_pieces(seq, pieces, token, events)

    def _emit_pieces(self, seq: _Seq, pieces: list[Piece], token: int, events: list[Event]) -> None:
        completion = seq.completion
        for piece in pieces:
            if not piece.text:
                continue
            if piece.channel is Channel.REASONING:
                completion.reasoning += piece.text
            else:
                if completion.reasoning and completion.reasoning_ms is None:
                    completion.reasoning_ms = (time.perf_counter() - seq.t_gen_start) * 1000.0
                completion.text += piece.text
            events.append(TokenText(seq.key, piece.text, token, piece.channel))

    def _finish(
        self, seq: _Seq, reason: str, events: list[Event], error: str | None = None
    ) -> None:
        if reason != "stop":
            tail = seq.stopper.feed(seq.utf8.flush()) + seq.stopper.flush()
            self._emit_text(seq, tail, -1, events)
        if seq.splitter is not None:
            self._emit_pieces(seq, seq.splitter.flush(), -1, events)
            seq.splitter = None
        if seq.completion.reasoning and seq.completion.reasoning_ms is None and seq.generating:
            seq.completion.reasoning_ms = (time.perf_counter() - seq.t_gen_start) * 1000.0
        if seq.generating:
            seq.completion.gen_ms = (time.perf_counter() - seq.t_gen_start) * 1000.0
            if (
                reason in ("eog", "stop", "length")
                and seq.seq_id is not None
                and self._traits.needs_checkpoints
            ):
                self._take_checkpoint(seq, None)  # after the reply: the next turn starts here
        seq.checkpoint_at.clear()
        seq.completion.finish_reason = reason
        seq.completion.error = error
        seq.busy = seq.generating = seq.want_generation = seq.want_logits = False
        seq.stop_requested = False
        self._touch(seq)
        if error is not None:
            events.append(SequenceFailed(seq.key, error))
        events.append(Finished(seq.key, seq.completion))

    def _resync(self, spans: list[tuple[_Seq, list[int], int | None]]) -> None:
        """After a failed decode, make the bookkeeping match the cache again.

        Aborted and fatal decodes keep the micro-batches that finished; a "no slot" decode
        keeps nothing. ``seq_pos_max`` tells which, per sequence.
        """
        ctx = self._need_ctx()
        for seq, chunk, _ in spans:
            assert seq.seq_id is not None
            held = ctx.seq_pos_max(seq.seq_id) + 1
            base = len(seq.tokens)
            if held < base:  # the cache lost cells we counted: process them again
                seq.pending = seq.tokens[held:] + seq.pending
                self._set_held(seq, held)
                continue
            done = min(len(chunk), held - base)
            if done:
                seq.tokens.extend(chunk[:done])
                del seq.pending[:done]
                if not seq.generating:
                    seq.prompt_done += done
            if done and not seq.pending and (seq.want_generation or seq.want_logits):
                # Its logits were never read: decode the last token again (from a
                # checkpoint where the cache cannot drop one token).
                self._queue_for_logits(seq)

    def _make_pool_room(
        self,
        spans: list[tuple[_Seq, list[int], int | None]],
        prompt_cap: int | None,
        events: list[Event],
    ) -> int | None:
        """The cache had no free cells for the batch: evict, shrink the prompt part, or shift.

        Returns the prompt-token cap for the next attempt.
        """
        idle = sorted(
            (s for s in self._seqs.values() if not s.busy and s.seq_id is not None and s.tokens),
            key=lambda s: s.last_used,
        )
        if idle:
            self._evict(idle[0], events)
            return prompt_cap
        prompt_tokens = sum(len(chunk) for seq, chunk, _ in spans if not seq.generating)
        if prompt_tokens > 1:
            return prompt_tokens // 2
        largest = max((s for s, _, _ in spans), key=lambda s: len(s.tokens))
        if self._policy(largest) == "shift" and self._shift(
            largest, max(1, len(largest.tokens) // 2), events
        ):
            return prompt_cap
        self._finish(
            largest,
            "context_full",
            events,
            "The context is full: the cache has no room left. Close some tabs or raise the context size.",
        )
        return prompt_cap

    # ---------------------------------------------------------------- context room

    def _make_room(self, seq: _Seq, n_new: int, events: list[Event]) -> bool:
        """Make sure ``n_new`` more tokens fit in this sequence's share of the context."""
        limit = self.n_ctx_seq
        if len(seq.tokens) + n_new <= limit:
            return True
        if self._policy(seq) == "shift" and seq.generating:
            need = len(seq.tokens) + n_new - limit
            if self._shift(seq, need, events):
                return True
        self._finish(
            seq,
            "context_full",
            events,
            None
            if seq.generating
            else "The prompt does not fit in the context; raise the context size.",
        )
        return False

    def _message_boundaries(self, seq: _Seq) -> list[int]:
        """Token offsets where messages start in the cache, for cutting at whole messages."""
        if not seq.messages:
            return []
        model = self._need_model()
        head = seq.messages[:1] if seq.messages[0].get("role") == "system" else []
        body = seq.messages[len(head) + seq.n_dropped :]
        bounds = []
        for i in range(1, len(body) + 1):
            text = self.render_chat(head + body[:i], False, seq.reasoning)
            toks = model.tokenize(text, add_special=True, parse_special=True)
            n = _common_prefix(toks, seq.tokens)
            if n == len(toks):
                bounds.append(n)
            else:
                break
        return bounds

    def _shift(self, seq: _Seq, need: int, events: list[Event]) -> bool:
        """Drop the oldest tokens after the system prompt: ``seq_rm`` then ``seq_add``.

        Frees at least ``need`` cells, at least half of what follows the kept prefix, and
        cuts at a message boundary when the sequence came from a chat.
        """
        ctx = self._need_ctx()
        n_keep = min(seq.n_keep, len(seq.tokens))
        movable = len(seq.tokens) - n_keep
        target = max(need, movable // 2)
        if target > movable or movable <= 0:
            return False
        n_discard = target
        bounds = [b - n_keep for b in self._message_boundaries(seq) if b - n_keep >= target]
        dropped_messages = 0
        if bounds and bounds[0] < movable:
            n_discard = bounds[0]
            dropped_messages = 1 + len(
                [b for b in self._message_boundaries(seq) if 0 < b - n_keep < target]
            )
        assert seq.seq_id is not None
        sid = seq.seq_id
        original = list(seq.tokens)
        # A recurrent state keeps what a shift drops: there the kept text is processed
        # again instead (from the system prompt's checkpoint where there is one).
        exact = ctx.traits.shifts_exactly
        if exact and seq.maybe_shared and not self._make_physical(seq):
            self._set_held(seq, 0)  # no room for a copy: the cache was emptied
            exact = False
        seq.checkpoint_at.clear()
        if exact:
            ctx.seq_rm(sid, n_keep, n_keep + n_discard)
            ctx.seq_add(sid, n_keep + n_discard, -1, -n_discard)
            self._set_held(seq, n_keep)
            seq.tokens = original[:n_keep] + original[n_keep + n_discard :]
        else:
            kept = self._truncate(seq, n_keep)
            seq.pending = original[kept:n_keep] + original[n_keep + n_discard :] + seq.pending
        seq.n_dropped += dropped_messages
        events.append(ContextShifted(seq.key, n_discard, n_keep))
        return True

    def _make_physical(self, seq: _Seq) -> bool:
        """Give a forked sequence cells of its own, so a shift cannot move its partner's.

        False when there was no room for the copy: the sequence's cache is then empty and
        the caller re-processes its tokens.
        """
        ctx = self._need_ctx()
        assert seq.seq_id is not None
        blob = ctx.state_get(seq.seq_id)
        ctx.seq_rm(seq.seq_id, -1, -1)
        seq.maybe_shared = False
        if ctx.state_set(seq.seq_id, blob):
            return True
        ctx.seq_rm(seq.seq_id, -1, -1)
        return False

    # ---------------------------------------------------------------- residency

    def _assign_slot(self, seq: _Seq, events: list[Event], protect: set[int]) -> None:
        ctx = self._need_ctx()
        used = {s.seq_id for s in self._seqs.values() if s.seq_id is not None}
        free = [i for i in range(ctx.n_seq_max) if i not in used]
        if not free:
            victims = sorted(
                (
                    s
                    for s in self._seqs.values()
                    if s.seq_id is not None and not s.busy and s.key not in protect
                ),
                key=lambda s: s.last_used,
            )
            if not victims:
                return
            self._evict(victims[0], events)
            free = [victims[0].seq_id] if victims[0].seq_id is not None else []
            used = {s.seq_id for s in self._seqs.values() if s.seq_id is not None}
            free = [i for i in range(ctx.n_seq_max) if i not in used]
        seq.seq_id = free[0]
        ctx.seq_rm(seq.seq_id, -1, -1)

    def _ensure_resident(
        self, seq: _Seq, events: list[Event], protect: set[int] | None = None
    ) -> None:
        if seq.seq_id is not None:
            return
        self._assign_slot(seq, events, protect or {seq.key})
        if seq.seq_id is None:
            return  # every slot is busy: this sequence waits for one
        parked, seq.parked = seq.parked, None
        cut, seq.cut_after_restore = seq.cut_after_restore, None
        if parked is not None and self._restore_into(seq, parked):
            if cut is not None:
                held = list(seq.tokens)
                kept = self._truncate(seq, cut)
                seq.pending = held[kept:cut] + seq.pending
        elif seq.tokens:
            seq.pending = seq.tokens + seq.pending
            self._set_held(seq, 0)

    def _restore_into(self, seq: _Seq, state: SequenceState) -> bool:
        ctx = self._need_ctx()
        assert seq.seq_id is not None
        try:
            state.check_compatible(self.model_fingerprint, self._layout())
        except StateError as exc:
            log.info("state of sequence %d refused: %s", seq.key, exc)
            return False
        if len(state.tokens) >= self.n_ctx_seq:
            return False
        while not ctx.state_set(seq.seq_id, state.blob):
            ctx.seq_rm(seq.seq_id, -1, -1)
            # No room in the shared cache: idle tabs leave for their parked state first,
            # since re-processing would cost far more than restoring.
            idle = sorted(
                (
                    s
                    for s in self._seqs.values()
                    if s is not seq and not s.busy and s.seq_id is not None and s.tokens
                ),
                key=lambda s: s.last_used,
            )
            if not idle:
                return False
            self._evict(idle[0], self._side_events)
        if ctx.seq_pos_max(seq.seq_id) + 1 != len(state.tokens):
            ctx.seq_rm(seq.seq_id, -1, -1)
            return False
        seq.tokens = list(state.tokens)
        return True

    def _evict(self, seq: _Seq, events: list[Event]) -> None:
        ctx = self._need_ctx()
        assert seq.seq_id is not None
        seq.parked = self._state_of(seq) if seq.tokens else None
        ctx.seq_rm(seq.seq_id, -1, -1)
        if self._encoded_for == (seq.key, seq.seq_id):
            self._encoded_for = None
        seq.seq_id = None
        seq.maybe_shared = False
        events.append(Evicted(seq.key))

    def _require_idle(self, seq: _Seq) -> None:
        if seq.busy:
            raise EngineError("This conversation is still generating; stop it first.")

    # ---------------------------------------------------------------- state

    def _layout(self) -> dict[str, Any]:
        layout = self._need_ctx().settings.layout_key()
        layout["n_ctx_train"] = self._need_model().n_ctx_train
        return layout

    def _state_of(self, seq: _Seq) -> SequenceState:
        ctx = self._need_ctx()
        assert seq.seq_id is not None
        return SequenceState(
            model_fingerprint=self.model_fingerprint,
            layout=self._layout(),
            tokens=list(seq.tokens),
            blob=ctx.state_get(seq.seq_id),
            pending=list(seq.pending),
            n_keep=seq.n_keep,
            extra={"n_dropped": seq.n_dropped},
            checkpoints=self._saved_checkpoints(seq),
        )

    def save_state(self, key: int) -> bytes:
        """The sequence's cache with our verified header (see :mod:`app.engine.state_file`)."""
        seq = self._seq(key)
        self._require_idle(seq)
        if seq.seq_id is None:
            if seq.parked is None:
                state = SequenceState(
                    self.model_fingerprint, self._layout(), [], b"", list(seq.tokens + seq.pending)
                )
                return state.to_bytes()
            parked = seq.parked
            if seq.cut_after_restore is not None:
                self._ensure_resident(seq, self._side_events)
                if seq.seq_id is None:
                    raise StateError("No free sequence slot to save this state from.")
                return self._state_of(seq).to_bytes()
            return SequenceState(
                parked.model_fingerprint,
                parked.layout,
                parked.tokens,
                parked.blob,
                list(seq.pending),
                seq.n_keep,
                {"n_dropped": seq.n_dropped},
                self._saved_checkpoints(seq),
            ).to_bytes()
        return self._state_of(seq).to_bytes()

    def save_state_file(self, key: int, path: str | os.PathLike[str]) -> int:
        data = self.save_state(key)
        try:
            atomic_write_bytes(Path(path), data)
        except OSError as exc:
            raise StateError(
                f"The state file {path} cannot be written: {exc.strerror or exc}."
            ) from exc
        return len(data)

    def restore_state(self, key: int, data: bytes) -> bool:
        """Load a saved state into ``key``. False when refused (the caller re-processes text).

        Everything is checked before llama.cpp sees the blob: envelope, checksums, model
        fingerprint, cache layout, size, token ids. When the blob is refused but its token
        list is trustworthy (same model), the tokens are queued for re-processing instead.
        ``last_restore_error`` says why a restore was refused.
        """
        seq = self._seq(key)
        self._require_idle(seq)
        self.last_restore_error = None
        try:
            state = SequenceState.from_bytes(data)
            same_model = state.model_fingerprint == self.model_fingerprint
            if same_model:
                self._check_tokens(state.tokens + state.pending)
        except EngineError as exc:  # StateError, or token ids this vocabulary lacks
            self.last_restore_error = str(exc)
            log.warning("refused a saved state: %s", exc)
            return False
        self.clear_sequence(key)
        seq.n_keep = state.n_keep
        seq.n_dropped = int(state.extra.get("n_dropped", 0))
        fits = len(state.tokens) + len(state.pending) < self.n_ctx_seq
        try:
            state.check_compatible(self.model_fingerprint, self._layout())
        except StateError as exc:
            self.last_restore_error = str(exc)
            if same_model and fits:
                seq.pending = list(state.tokens + state.pending)
            return False
        if not state.blob:
            self.last_restore_error = "The saved state holds no cache data."
            if fits:
                seq.pending = list(state.tokens + state.pending)
            return False
        self._ensure_resident(seq, self._side_events, protect={key})
        if seq.seq_id is None:  # every slot is busy: restored when one frees up
            seq.parked = state
            seq.tokens = list(state.tokens)
            seq.pending = list(state.pending)
            self._adopt_checkpoints(seq, state)
            return True
        if self._restore_into(seq, state):
            seq.pending = list(state.pending)
            self._adopt_checkpoints(seq, state)
            return True
        self.last_restore_error = (
            "llama.cpp did not accept the saved cache (it does not fit this context)."
        )
        if fits:
            seq.pending = list(state.tokens + state.pending)
        return False

    @staticmethod
    def _saved_checkpoints(seq: _Seq) -> list[Checkpoint]:
        """The checkpoints, and the prompt's last logits as one without state data."""
        saved = list(seq.checkpoints)
        if seq.ready_logits is not None and 0 < seq.ready_at <= len(seq.tokens):
            if seq.checkpoints.at(seq.ready_at) is None:
                saved.append(Checkpoint(seq.ready_at, b"", seq.ready_logits))
                saved.sort(key=lambda c: c.n_tokens)
        return saved

    def _adopt_checkpoints(self, seq: _Seq, state: SequenceState) -> None:
        """Keep a restored state's checkpoints (logits of another size are dropped)."""
        logits_size = 4 * self._need_model().n_vocab
        for c in state.checkpoints:
            if c.logits is not None and len(c.logits) != logits_size:
                c = Checkpoint(c.n_tokens, c.blob, None)
            if c.logits is not None and c.n_tokens >= seq.ready_at:
                seq.ready_logits, seq.ready_at = c.logits, c.n_tokens
            if c.blob:
                seq.checkpoints.add(c)

    def restore_state_file(self, key: int, path: str | os.PathLike[str]) -> bool:
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            log.warning("cannot read state file %s: %s", path, exc)
            return False
        return self.restore_state(key, data)

    def parked_state(self, key: int) -> bytes | None:
        """The state of an evicted sequence, for the caller to persist."""
        seq = self._seq(key)
        return self.save_state(key) if seq.parked is not None else None

    # ---------------------------------------------------------------- settings

    def set_threads(self, n_threads: int, n_threads_batch: int | None = None) -> None:
        ctx = self._need_ctx()
        trial = ContextSettings(
            **{
                **ctx.settings.to_dict(),
                "n_threads": n_threads,
                "n_threads_batch": n_threads_batch or n_threads,
            }
        )
        trial.validate()
        ctx.set_threads(trial.n_threads, trial.n_threads_batch)

    def reconfigure(self, settings: ContextSettings) -> None:
        """Apply new context settings, rebuilding the context only when needed.

        Every sequence is kept: its cache is saved, the context rebuilt, and the cache
        restored; where the layout changed (KV type, RoPE...) its text is re-processed.
        """
        ctx = self._need_ctx()
        model = self._need_model()
        settings.validate(model.info)
        if not ctx.settings.needs_rebuild(settings):
            ctx.set_threads(settings.n_threads, settings.n_threads_batch)
            return
        if self.has_work():
            raise EngineError("Stop generation in every tab before changing these settings.")
        old_settings = ctx.settings
        resident = sorted(
            (s for s in self._seqs.values() if s.seq_id is not None), key=lambda s: -s.last_used
        )
        for seq in resident:
            seq.parked = self._state_of(seq) if seq.tokens else None
            seq.seq_id = None
            seq.maybe_shared = False
        ctx.close()
        self.context = None
        self._encoded_for = None  # the encoder output went with the old context
        try:
            self.context = Context(model, settings)
        except ContextError:
            self.context = Context(model, old_settings)
            self._restore_resident(resident)
            raise
        self._restore_resident(resident)

    def _restore_resident(self, resident: list[_Seq]) -> None:
        ctx = self._need_ctx()
        layout = self._layout()
        for seq in self._seqs.values():
            if seq.parked is not None and (
                seq.parked.layout != layout or len(seq.parked.tokens) >= ctx.n_ctx_seq
            ):
                # seq.tokens already reflects a cut made while parked.
                everything = seq.tokens + seq.pending
                seq.pending = everything if len(everything) < ctx.n_ctx_seq else []
                seq.parked, seq.cut_after_restore = None, None
                self._set_held(seq, 0)
        for seq in resident[: ctx.n_seq_max]:
            if seq.parked is not None:
                self._ensure_resident(seq, self._side_events, protect={seq.key})

    # ---------------------------------------------------------------- whole context

    def save_context_state(self) -> bytes:
        """Every resident sequence at once (``llama_state_get_data``) with our header."""
        ctx = self._need_ctx()
        seqs = {
            str(s.key): {
                "seq_id": s.seq_id,
                "tokens": s.tokens,
                "pending": s.pending,
                "n_keep": s.n_keep,
            }
            for s in self._seqs.values()
            if s.seq_id is not None
        }
        state = SequenceState(
            self.model_fingerprint,
            {**self._layout(), "n_ctx": ctx.n_ctx, "n_seq_max": ctx.n_seq_max},
            [],
            ctx.full_state_get(),
            extra={"sequences": seqs},
        )
        return state.to_bytes()

    def restore_context_state(self, data: bytes) -> list[int]:
        """Restore a whole-context save; returns the keys of the restored sequences.

        Everything is validated before any open sequence is touched; on failure the
        engine is left as it was (or, if llama.cpp refuses the blob itself, empty).
        """
        ctx = self._need_ctx()
        model = self._need_model()
        if self.has_work():
            raise EngineError("Stop generation before restoring a saved context.")
        state = SequenceState.from_bytes(data)
        state.check_compatible(
            self.model_fingerprint,
            {**self._layout(), "n_ctx": ctx.n_ctx, "n_seq_max": ctx.n_seq_max},
        )
        entries = []
        try:
            raw = state.extra.get("sequences", {})
            for info in raw.values():
                seq_id, n_keep = int(info["seq_id"]), int(info["n_keep"])
                tokens, pending = list(info["tokens"]), list(info["pending"])
                entries.append((seq_id, tokens, pending, n_keep))
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise StateError("The saved context's list of sequences is damaged.") from exc
        ids = [e[0] for e in entries]
        if len(set(ids)) != len(ids) or any(not 0 <= i < ctx.n_seq_max for i in ids):
            raise StateError("The saved context names sequence ids this context does not have.")
        for _, tokens, pending, n_keep in entries:
            if not all(isinstance(t, int) and model.valid_token(t) for t in tokens + pending):
                raise StateError("The saved context holds token ids this model does not have.")
            if len(tokens) >= ctx.n_ctx_seq or not 0 <= n_keep <= len(tokens):
                raise StateError("The saved context does not fit this context.")
        for key in list(self._seqs):
            self.close_sequence(key)
        if not ctx.full_state_set(state.blob):
            ctx.clear()
            raise StateError("llama.cpp refused the saved context.")
        if any(ctx.seq_pos_max(seq_id) + 1 != len(tokens) for seq_id, tokens, _, _ in entries):
            ctx.clear()
            raise StateError("The saved context's cache does not match its token lists.")
        keys = []
        for seq_id, tokens, pending, n_keep in entries:
            key = self.open_sequence()
            seq = self._seqs[key]
            seq.seq_id, seq.tokens, seq.pending, seq.n_keep = seq_id, tokens, pending, n_keep
            keys.append(key)
        return keys

    # ---------------------------------------------------------------- embeddings

    def embed(self, texts: list[str], normalize: bool = True) -> list[np.ndarray]:
        """Pooled embeddings, one per text (the context must have embeddings enabled)."""
        ctx = self._need_ctx()
        model = self._need_model()
        if not ctx.settings.embeddings:
            raise EngineError("Embeddings need a context created with embeddings enabled.")
        if self.has_work():
            raise EngineError("Stop generation before computing embeddings.")
        n_embd = int(llama_cpp.llama_model_n_embd(model.handle))
        results = []
        scratch = self.open_sequence()
        try:
            seq = self._seqs[scratch]
            self._ensure_resident(seq, self._side_events, protect={scratch})
            if seq.seq_id is None:
                raise EngineError("No free sequence slot for embeddings.")
            for text in texts:
                tokens = model.tokenize(text, add_special=True, parse_special=False)
                if not tokens:
                    raise EngineError("Cannot embed empty text.")
                if len(tokens) > min(ctx.batch.capacity, ctx.n_ctx_seq):
                    raise ContextFullError(
                        f"The text is {len(tokens)} tokens; embeddings take at most {ctx.batch.capacity} at once (raise the micro-batch size)."
                    )
                ctx.batch.clear()
                ctx.batch.add_span(tokens, 0, seq.seq_id, True)
                ctx.batch.mark_all_outputs()
                result = ctx.decode()
                if not result.ok:
                    raise EngineError(
                        f"llama.cpp could not compute the embedding (error {result.code})."
                    )
                vector = ctx.embeddings_seq(seq.seq_id, n_embd)
                ctx.seq_rm(seq.seq_id, -1, -1)
                if normalize:
                    norm = float(np.linalg.norm(vector))
                    vector = vector / norm if norm > 0 else vector
                results.append(vector)
        finally:
            self.close_sequence(scratch)
        return results


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    # Compare in blocks first: conversations share thousands of tokens.
    while i + 256 <= n and a[i : i + 256] == b[i : i + 256]:
        i += 256
    while i < n and a[i] == b[i]:
        i += 1
    return i
