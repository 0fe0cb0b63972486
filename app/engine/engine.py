"""The engine: one model, one context, many sequences, one batched decode per step.

A sequence is what a chat tab talks to. The caller holds an int *key*; while a sequence is
resident it is bound to a llama.cpp ``seq_id`` (at most ``n_seq_max`` at once) and the
least recently used idle one is evicted into a parked state blob when another needs its
place. ``step()`` decodes one batch over every busy sequence and returns events. The
engine is not thread-safe except for :meth:`stop`: one thread (the UI's worker) owns it.

:class:`Engine` is the facade; the work lives in rooms of their own:

- :mod:`app.engine.sequence`: the sequence table, each sequence's :class:`Phase`;
- :mod:`app.engine.scheduler`: batch building, the decode loop, failed decodes;
- :mod:`app.engine.residency`: KV slots, parked states and eviction;
- :mod:`app.engine.snapshots`: cutting a cache back, checkpoints, ready logits, states;
- :mod:`app.engine.saved_states`: state files of a sequence or the whole context;
- :mod:`app.engine.chat_fit` and :mod:`app.engine.prompt_queue`: what a prompt queues;
- :mod:`app.engine.forks`: a new sequence from part of another's cache;
- :mod:`app.engine.context_shift`: a full context; :mod:`app.engine.output`: reply text;
- :mod:`app.engine.embeddings`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from app.engine import batching, template_choice
from app.engine.batching import BatchingChoice, BatchMode
from app.engine.cache import CacheTraits
from app.engine.chat_fit import ChatFitter
from app.engine.chat_template import (
    ChatTemplate,
    ReasoningDefaults,
    ReasoningOptions,
    TemplateChoice,
    user_template_problem,
)
from app.engine.context import Context
from app.engine.context_policy import ContextFullPolicy
from app.engine.context_shift import ContextShift
from app.engine.embeddings import embed
from app.engine.errors import ContextError, EngineError, StateError
from app.engine.events import Completion, Event, RestoreOutcome
from app.engine.forks import Forks
from app.engine.handles import Handles
from app.engine.memory_use import memory_in_use
from app.engine.metadata import ModelInfo
from app.engine.model import Model, ProgressCallback
from app.engine.prompt_queue import PromptQueue
from app.engine.reasoning import ReasoningFormat
from app.engine.residency import Residency
from app.engine.saved_states import SavedStates
from app.engine.scheduler import Scheduler
from app.engine.sequence import Message, Phase, Sequence, SequenceInfo, require_idle
from app.engine.settings import ContextSettings, ModelSettings, SamplingParams, SettingsError
from app.engine.snapshots import Snapshots
from app.engine.tool_calls.request import ToolRequest, tool_turn
from app.fsutil import atomic_write_bytes

__all__ = ["Engine", "Message", "SequenceInfo"]  # SequenceInfo: where it was imported from

log = logging.getLogger(__name__)


class Engine:
    """Owns the model and the context; see the module docstring."""

    def __init__(self) -> None:
        h = self._h = Handles()
        self._snapshots = Snapshots(h)
        self._residency = Residency(h, self._snapshots)
        self._fitter = ChatFitter(h)
        self._prompts = PromptQueue(h, self._snapshots)
        self._shifter = ContextShift(h, self._snapshots, self._fitter)
        self._scheduler = Scheduler(h, self._snapshots, self._residency, self._shifter)
        self._states = SavedStates(h, self._snapshots, self._residency, self._prompts)
        self._forks = Forks(h, self._snapshots, self._residency)
        self._batching_pin: BatchMode | None = None

    # ---------------------------------------------------------------- what it holds

    @property
    def model(self) -> Model | None:
        return self._h.model

    @property
    def context(self) -> Context | None:
        return self._h.context

    @property
    def template(self) -> ChatTemplate | None:
        return self._h.template

    @property
    def reasoning_defaults(self) -> ReasoningDefaults:
        """How the loaded model's template reasons: its format, and whether a turn without
        a choice thinks (llama-server's rule: :mod:`app.engine.chat_template.thinking`)."""
        template = self._h.template
        if template is None:
            raise EngineError("No model is loaded. Load a model first.")
        return template.reasoning_defaults

    @property
    def _seqs(self) -> dict[int, Sequence]:
        """key -> sequence (tests read a sequence's ``seq_id`` and bookkeeping here)."""
        return self._h.table.by_key

    def _seq(self, key: int) -> Sequence:
        return self._h.table.get(key)

    def _layout(self) -> dict[str, object]:
        return self._h.layout()

    @property
    def context_full_policy(self) -> ContextFullPolicy:
        """What a full context does to sequences without a policy of their own."""
        return self._h.table.default_policy

    @context_full_policy.setter
    def context_full_policy(self, policy: ContextFullPolicy | str) -> None:
        self._h.table.default_policy = _policy(policy)

    @property
    def last_restore_error(self) -> str | None:
        """Why the last ``restore_state`` was refused, or parked (None: restored)."""
        return self._states.last_restore_error

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
        model = self._h.model = Model(path, model_settings, progress)
        self.set_chat_template(model.settings.chat_template)
        return model.info

    def set_chat_template(self, choice: str = "") -> TemplateChoice:
        """Use a bundled template (by name) or a Jinja file for the next turns; "" chooses
        automatically (the model's own, else by its vocabulary). Says which is in use."""
        problem = user_template_problem(choice)
        if problem is not None:
            raise SettingsError("chat_template", problem)
        self._h.template, self._h.end_markers = template_choice.choose(self._h.need_model(), choice)
        log.info("chat template: %s", self._h.template.choice.reason)
        return self._h.template.choice

    @property
    def template_choice(self) -> TemplateChoice:
        """Which chat template is in use and why (``run --json``, ``/props``, the window)."""
        template = self._h.template
        if template is None:
            raise EngineError("No model is loaded. Load a model first.")
        return template.choice

    def create_context(self, settings: ContextSettings) -> None:
        model = self._h.need_model()
        if self._h.context is not None:
            self.reconfigure(settings)
            return
        self._h.context = Context(model, settings)
        self._measure_batching()

    def _measure_batching(self) -> None:
        """Batched or in turn, for this context (before any sequence holds cells)."""
        if self._batching_pin is not None:
            self._scheduler.batching = batching.pinned(self._batching_pin)
            return
        self._scheduler.batching = batching.measure(self._h.need_ctx(), self._h.need_model())

    @property
    def batching(self) -> BatchingChoice:
        """How generating tabs share a step, and why (the session reports it)."""
        return self._scheduler.batching

    def pin_batching(self, mode: BatchMode | None) -> None:
        """Use ``mode`` from now on instead of measuring (None: measure at the next
        context). Tests pin it; greedy output may differ in the last bits between modes."""
        self._batching_pin = mode
        if mode is not None:
            self._scheduler.batching = batching.pinned(mode)

    def close(self) -> None:
        """Free the context before the model (the context points into it)."""
        h = self._h
        for seq in h.table.by_key.values():
            if seq.sampler:
                seq.sampler.close()
        h.table.by_key.clear()
        # What was reported about those sequences, and whose encoder output the context
        # holds, went with them: a next model's first step must not see them.
        h.side_events.clear()
        h.encoded_for = None
        if h.context is not None:
            h.context.close()
            h.context = None
        if h.model is not None:
            h.model.close()
            h.model = None

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- properties

    @property
    def model_info(self) -> ModelInfo:
        return self._h.need_model().info

    @property
    def settings(self) -> ContextSettings:
        return self._h.need_ctx().settings

    @property
    def n_ctx_seq(self) -> int:
        return self._h.n_ctx_seq

    @property
    def model_fingerprint(self) -> str:
        return self._h.need_model().fingerprint

    @property
    def cache_traits(self) -> CacheTraits:
        """What this context's cache can do (its architecture family)."""
        return self._h.traits

    def memory(self) -> dict[str, int]:
        """Bytes used by the weights and by the KV cache (the status bar shows these)."""
        return memory_in_use(self._h.need_model(), self._h.context, self._h.table.by_key.values())

    # ---------------------------------------------------------------- tokens and text

    def tokenize(
        self, text: str, add_special: bool = True, parse_special: bool = True
    ) -> list[int]:
        return self._h.need_model().tokenize(text, add_special, parse_special)

    def detokenize(self, tokens: Iterable[int], special: bool = False) -> str:
        return self._h.need_model().detokenize(list(tokens), special)

    def render_chat(
        self,
        messages: list[Message],
        add_generation_prompt: bool = True,
        reasoning: ReasoningOptions | None = None,
    ) -> str:
        return self._h.render_chat(messages, add_generation_prompt, reasoning)

    # ---------------------------------------------------------------- sequences

    def open_sequence(self) -> int:
        self._h.need_ctx()
        return self._h.table.open().key

    def set_policy(self, key: int, policy: ContextFullPolicy | str | None) -> None:
        """What a full context does to this sequence (None: the engine's default)."""
        self._seq(key).policy = None if policy is None else _policy(policy)

    def sequences(self) -> list[int]:
        return list(self._h.table.by_key)

    def close_sequence(self, key: int) -> None:
        self._residency.close(key)

    def clear_sequence(self, key: int) -> None:
        """Forget what the sequence holds (a new conversation in the same tab)."""
        seq = self._seq(key)
        require_idle(seq)
        self._residency.forget(seq)

    def tokens(self, key: int) -> list[int]:
        """The tokens the sequence's cache holds."""
        return list(self._seq(key).tokens)

    def pending_tokens(self, key: int) -> list[int]:
        return list(self._seq(key).pending)

    def is_busy(self, key: int) -> bool:
        return self._seq(key).busy

    def has_work(self) -> bool:
        return self._h.table.any_busy()

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
            n_reserved=self._reserved(seq),
            n_dropped=seq.n_dropped if seq.messages is not None else 0,
        )

    @staticmethod
    def _reserved(seq: Sequence) -> int:
        """The reply's reserve still free: all of it while idle (the next reply's), what
        the reply has not used yet while it is written."""
        if seq.generating:
            return max(0, seq.reserve - len(seq.completion.tokens))
        return seq.reserve

    def keep_only(self, key: int) -> None:
        """Drop every other sequence's cells (``seq_keep``), e.g. before a whole-context save."""
        seq = self._seq(key)
        ctx = self._h.need_ctx()
        if self.has_work():
            raise EngineError("Stop generation in every tab first.")
        self._residency.ensure_resident(seq, self._h.side_events)
        if seq.seq_id is None:
            raise EngineError("No free sequence slot for this sequence.")
        ctx.seq_keep(seq.seq_id)
        self._residency.unbind_all_but(seq)

    def fork(self, key: int, n_tokens: int | None = None) -> int:
        """A new sequence holding the first ``n_tokens`` of ``key``'s cache, without
        recomputing (see :mod:`app.engine.forks`)."""
        return self._forks.fork(self._seq(key), n_tokens).key

    # ---------------------------------------------------------------- prompting

    def set_chat(
        self,
        key: int,
        messages: list[Message],
        system: str | None = None,
        add_generation_prompt: bool = True,
        reserve: int | None = None,
        reasoning: ReasoningOptions | None = None,
        tools: ToolRequest | None = None,
    ) -> int:
        """Queue a conversation; only the suffix the cache does not hold is processed.
        ``tools``: the functions the reply may call (app.engine.tool_calls.turns).

        Returns the number of tokens that will be processed. When the conversation does not
        fit, the oldest messages after the system prompt are left out (the same ones a
        context shift dropped), keeping room for ``reserve`` new tokens.
        """
        seq = self._seq(key)
        require_idle(seq)
        seq.tools = tools
        fit = self._fitter.fit(seq, messages, system, add_generation_prompt, reserve, reasoning)
        off = fit.reasoning is not None and fit.reasoning.enable_thinking is False
        seq.tool_turn = tool_turn(
            self._h.template, tools, fit.reasoning_format, fit.opens_reasoning, off
        )
        seq.messages, seq.n_dropped, seq.reasoning = fit.messages, fit.n_dropped, fit.reasoning
        seq.n_keep, seq.reserve = fit.n_keep, fit.reserve
        seq.reasoning_format, seq.opens_reasoning = fit.reasoning_format, fit.opens_reasoning
        # The system prompt's checkpoint is kept longest: dropping old messages re-reads
        # the kept ones from there.
        seq.checkpoints.pinned = fit.n_keep if fit.n_keep > 1 else None
        return self._prompts.set_tokens(seq, fit.tokens, fit.marks)

    def set_prompt(self, key: int, text: str, raw: bool = True) -> int:
        """Queue raw text (BOS per the model's rule, special tokens parsed)."""
        if not raw:
            return self.set_chat(key, [{"role": "user", "content": text}])
        tokens = self.tokenize(text, add_special=True, parse_special=True)
        return self.set_tokens(key, tokens)

    def set_tokens(self, key: int, tokens: list[int]) -> int:
        seq = self._seq(key)
        require_idle(seq)
        seq.messages, seq.n_dropped, seq.tools, seq.tool_turn = None, 0, None, None
        seq.reasoning_format, seq.opens_reasoning = ReasoningFormat.NONE, False
        seq.n_keep = 1 if self._h.need_model().add_bos else 0
        return self._prompts.set_tokens(seq, list(tokens))

    def append_text(self, key: int, text: str) -> int:
        """Queue more text after what the sequence holds (no BOS)."""
        return self.append_tokens(
            key, self.tokenize(text, add_special=False, parse_special=True) if text else []
        )

    def append_tokens(self, key: int, tokens: list[int]) -> int:
        seq = self._seq(key)
        require_idle(seq)
        return self._prompts.append_tokens(seq, tokens)

    # ---------------------------------------------------------------- generation

    def start(self, key: int, params: SamplingParams | None = None) -> None:
        """Generate after the queued prompt (or from what the cache holds)."""
        seq = self._seq(key)
        require_idle(seq)
        model = self._h.need_model()
        params = params or SamplingParams()
        params.validate()
        if not seq.pending:
            if not seq.tokens:
                seq.pending = [model.bos] if model.bos >= 0 else []
                if not seq.pending:
                    raise EngineError("There is nothing to generate from: the prompt is empty.")
            else:
                self._snapshots.queue_for_logits(seq)
        self._scheduler.begin_generation(seq, params)

    def prefill(self, key: int, logits: bool = False) -> None:
        """Process the queued prompt without generating (e.g. to save a session).

        With ``logits`` the last token is decoded with output and its logits kept for
        :meth:`next_logits` (the cached last token is re-decoded if nothing is queued).
        """
        seq = self._seq(key)
        require_idle(seq)
        if logits and not seq.pending and seq.tokens:
            ready = seq.ready_logits()
            if ready is not None:
                seq.last_logits = ready.copy()
                return
            self._snapshots.queue_for_logits(seq)
        if seq.pending:
            self._scheduler.begin_prefill(seq, logits)

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
        # Called from other threads: take a snapshot (tuple() of a dict view is atomic under
        # the GIL) and only set flags; the engine's thread makes the transitions.
        seqs = self._h.table.by_key
        targets = tuple(seqs.values()) if key is None else tuple(s for s in [seqs.get(key)] if s)
        hit = False
        for seq in targets:
            if seq.phase is not Phase.IDLE:
                seq.stop_requested = True
                hit = True
        context = self._h.context
        if hit and context is not None:
            context.abort_requested = True

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
        while seq.phase is not Phase.IDLE:
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

    def step(self) -> list[Event]:
        """One batched decode over every busy sequence. Returns what happened."""
        return self._scheduler.step()

    # ---------------------------------------------------------------- state

    def save_state(self, key: int) -> bytes:
        """The sequence's cache with our verified header (see :mod:`app.engine.state_file`)."""
        seq = self._seq(key)
        require_idle(seq)
        return self._states.save(seq)

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
        return self.restore_state_outcome(key, data) is not RestoreOutcome.REFUSED

    def restore_state_outcome(self, key: int, data: bytes) -> RestoreOutcome:
        """:meth:`restore_state`, saying whether the cache holds the state now (RESTORED) or
        keeps it until the sequence is used and has room (PARKED: a :class:`StateRestored`
        event follows then, either way); REFUSED as ``restore_state``'s False."""
        seq = self._seq(key)
        require_idle(seq)
        return self._states.restore(seq, data)

    def restore_state_file(self, key: int, path: str | os.PathLike[str]) -> bool:
        return self.restore_state_file_outcome(key, path) is not RestoreOutcome.REFUSED

    def restore_state_file_outcome(self, key: int, path: str | os.PathLike[str]) -> RestoreOutcome:
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            # Say so like any other refusal (not the previous restore's reason).
            self._states.last_restore_error = f"The state file cannot be read: {exc}."
            log.warning("cannot read state file %s: %s", path, exc)
            return RestoreOutcome.REFUSED
        return self.restore_state_outcome(key, data)

    def take_events(self) -> list[Event]:
        """What happened outside a step (evictions and restores while binding, restoring or
        rebuilding) and was not reported yet; the next ``step()`` reports it otherwise."""
        events, self._h.side_events = self._h.side_events, []
        return events

    def parked_state(self, key: int) -> bytes | None:
        """The state of an evicted sequence, for the caller to persist."""
        seq = self._seq(key)
        return self.save_state(key) if seq.parked is not None else None

    def save_context_state(self) -> bytes:
        """Every resident sequence at once (``llama_state_get_data``) with our header."""
        return self._states.save_context()

    def restore_context_state(self, data: bytes) -> list[int]:
        """Restore a whole-context save; returns the keys of the restored sequences.

        Everything is validated before any open sequence is touched; on failure the
        engine is left as it was (or, if llama.cpp refuses the blob itself, empty).
        """
        self._h.need_ctx()
        if self.has_work():
            raise EngineError("Stop generation before restoring a saved context.")
        return self._states.restore_context(data)

    # ---------------------------------------------------------------- settings

    def set_threads(self, n_threads: int, n_threads_batch: int | None = None) -> None:
        ctx = self._h.need_ctx()
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
        h = self._h
        ctx = h.need_ctx()
        model = h.need_model()
        settings.validate(model.info)
        if not ctx.settings.needs_rebuild(settings):
            ctx.set_threads(settings.n_threads, settings.n_threads_batch)
            return
        if self.has_work():
            raise EngineError("Stop generation in every tab before changing these settings.")
        old_settings = ctx.settings
        resident = self._residency.park_all()
        ctx.close()
        h.context = None
        h.encoded_for = None  # the encoder output went with the old context
        try:
            h.context = Context(model, settings)
        except ContextError:
            h.context = Context(model, old_settings)
            self._measure_batching()
            self._residency.restore_parked(resident)
            raise
        self._measure_batching()
        self._residency.restore_parked(resident)

    # ---------------------------------------------------------------- embeddings

    def embed(self, texts: list[str], normalize: bool = True) -> list[np.ndarray]:
        """Pooled embeddings, one per text (the context must have embeddings enabled)."""
        if not self._h.need_ctx().settings.embeddings:
            raise EngineError("Embeddings need a context created with embeddings enabled.")
        self._h.need_model()
        if self.has_work():
            raise EngineError("Stop generation before computing embeddings.")
        scratch = self._h.table.open()
        try:
            return embed(self._h, self._residency, scratch, texts, normalize)
        finally:
            self.close_sequence(scratch.key)


def _policy(value: ContextFullPolicy | str) -> ContextFullPolicy:
    """``value`` as a policy (the plain words are accepted), or a clear error."""
    policy = ContextFullPolicy.parse(value)
    if policy is None:
        names = " or ".join(repr(p.value) for p in ContextFullPolicy)
        raise EngineError(f"The context-full policy must be {names}, not {value!r}.")
    return policy
