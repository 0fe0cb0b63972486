"""The sequence table: per conversation, what its cache holds and what it is doing.

A sequence's *phase* says what the scheduler does with it; it changes only through the
named transitions below, on the engine's thread. A stop request is not a phase: another
thread may ask for it at any moment (``Engine.stop``), so it is a flag that the scheduler
turns into a transition at its next step.
"""

from __future__ import annotations

import enum
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.engine.chat_template import ReasoningOptions
from app.engine.checkpoints import Checkpoints
from app.engine.context_policy import ContextFullPolicy
from app.engine.errors import EngineError
from app.engine.events import Completion
from app.engine.output import ReplyStream

# The one definition lives in app.engine.prefix; re-exported for older importers.
from app.engine.prefix import common_prefix as common_prefix
from app.engine.reasoning import ReasoningFormat
from app.engine.sampling import Sampler
from app.engine.settings import SamplingParams
from app.engine.speculative import SpecState
from app.engine.state_file import SequenceState
from app.engine.tool_calls.request import ToolRequest, ToolTurn

Message = dict[str, Any]


class Phase(enum.Enum):
    IDLE = "idle"
    PREFILLING = "prefilling"  # process the queued prompt, then idle (e.g. before a save)
    PREFILLING_FOR_LOGITS = "prefilling for logits"  # ... and keep its last token's logits
    PREFILLING_TO_GENERATE = "prefilling to generate"  # ... then sample a reply (start())
    GENERATING = "generating"  # one sampled token per step


_TRANSITIONS: dict[Phase, frozenset[Phase]] = {
    Phase.IDLE: frozenset(
        {Phase.PREFILLING, Phase.PREFILLING_FOR_LOGITS, Phase.PREFILLING_TO_GENERATE}
    ),
    Phase.PREFILLING: frozenset({Phase.IDLE}),
    Phase.PREFILLING_FOR_LOGITS: frozenset({Phase.IDLE}),
    Phase.PREFILLING_TO_GENERATE: frozenset({Phase.GENERATING, Phase.IDLE}),
    Phase.GENERATING: frozenset({Phase.IDLE}),
}


@dataclass(frozen=True)
class ReadyLogits:
    """Logits (float32 bytes) for the token after the first ``n_tokens`` cached tokens:
    generation can start there without decoding the last token again."""

    n_tokens: int
    data: bytes

    def array(self) -> np.ndarray:
        return np.frombuffer(self.data, dtype=np.float32)


@dataclass
class Sequence:
    key: int
    seq_id: int | None = None  # the llama.cpp sequence while resident
    tokens: list[int] = field(default_factory=list)  # what the cache holds, position = index
    pending: list[int] = field(default_factory=list)  # to decode next (prompt, or last sample)
    parked: SequenceState | None = None  # the cache while not resident
    cut_after_restore: int | None = None  # truncate the restored cache to this many tokens
    report_restore: bool = False  # a saved state waits for room: say when it comes back
    checkpoints: Checkpoints = field(default_factory=Checkpoints)
    checkpoint_at: set[int] = field(default_factory=set)  # take one when the cache holds this many
    ready: ReadyLogits | None = None
    maybe_shared: bool = False  # cells may be shared with a fork (seq_cp in a unified cache)
    phase: Phase = Phase.IDLE
    stop_requested: bool = False  # set from any thread; the next step finishes the sequence
    last_logits: np.ndarray | None = None  # kept by a PREFILLING_FOR_LOGITS run
    encoder_input: list[int] | None = None  # encoder-decoder models: the prompt for llama_encode
    params: SamplingParams | None = None
    sampler: Sampler | None = None
    reply: ReplyStream | None = None  # this turn's text output while generating
    completion: Completion = field(default_factory=Completion)
    prompt_total: int = 0
    prompt_done: int = 0
    n_keep: int = 0  # tokens a context shift keeps (BOS and the system prompt)
    messages: list[Message] | None = None
    n_dropped: int = 0  # chat messages dropped from the front by context shifts
    reserve: int = 0  # cells the last chat fit kept free for the reply
    policy: ContextFullPolicy | None = None  # when the context is full; None: the engine's
    last_used: int = 0
    # How this turn's reply is split into reasoning and answer (NONE: all answer).
    reasoning: ReasoningOptions | None = None  # thinking on/off and effort, per chat
    reasoning_format: ReasoningFormat = ReasoningFormat.NONE
    opens_reasoning: bool = False  # the prompt ended inside an open reasoning block
    # The tools the chat offers (rendered into its prompt), and how this reply runs them.
    tools: ToolRequest | None = None
    tool_turn: ToolTurn | None = None
    spec: SpecState | None = None  # speculative decoding: this turn's guessing

    @property
    def n_past(self) -> int:
        return len(self.tokens)

    # What the phase means, for the scheduler and for callers that read the old flags.

    @property
    def busy(self) -> bool:
        return self.phase is not Phase.IDLE

    @property
    def generating(self) -> bool:
        return self.phase is Phase.GENERATING

    @property
    def want_generation(self) -> bool:
        return self.phase is Phase.PREFILLING_TO_GENERATE or self.phase is Phase.GENERATING

    @property
    def want_logits(self) -> bool:
        return self.phase is Phase.PREFILLING_FOR_LOGITS

    # The transitions.

    def _go(self, phase: Phase) -> None:
        if phase not in _TRANSITIONS[self.phase]:
            raise EngineError(
                f"Internal error: sequence {self.key} cannot go from {self.phase.value} "
                f"to {phase.value}."
            )
        self.phase = phase

    def begin_prefill(self, keep_logits: bool) -> None:
        self._go(Phase.PREFILLING_FOR_LOGITS if keep_logits else Phase.PREFILLING)
        self.stop_requested = False

    def begin_generation(self) -> None:
        self._go(Phase.PREFILLING_TO_GENERATE)
        self.stop_requested = False

    def first_token(self, now: float) -> None:
        """The prompt is processed and the first token is about to be sampled."""
        self._go(Phase.GENERATING)
        assert self.reply is not None
        self.reply.t_start = now

    def prefill_done(self) -> None:
        self._go(Phase.IDLE)

    def finish(self) -> None:
        """Back to idle from any phase: the turn ended (or was stopped or failed)."""
        self.phase = Phase.IDLE
        self.stop_requested = False

    # The cache's contents.

    def set_held(self, n: int) -> None:
        """The cache now holds the first ``n`` of the tokens we counted."""
        del self.tokens[n:]
        self.checkpoints.drop_after(n)
        if self.ready is not None and self.ready.n_tokens > n:
            self.ready = None

    def ready_logits(self) -> np.ndarray | None:
        """The ready logits if they are for exactly what the cache holds and nothing is queued."""
        ready = self.ready
        if ready is None or ready.n_tokens != len(self.tokens) or self.pending:
            return None
        return ready.array()

    def requeue_all(self) -> None:
        """The cache is gone (or never was): everything it held is processed again."""
        self.pending = self.tokens + self.pending
        self.set_held(0)


@dataclass(frozen=True)
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
    n_reserved: int = 0  # cells kept free for the reply (what is left of them while generating)
    n_dropped: int = 0  # leading messages after the system prompt the model no longer sees


class SequenceTable:
    """Every open sequence by key, and a clock for least-recently-used eviction."""

    def __init__(self) -> None:
        self.by_key: dict[int, Sequence] = {}
        self.default_policy = ContextFullPolicy.SHIFT  # what a full context does by default
        self._next_key = 1
        self._clock = 0

    def open(self) -> Sequence:
        seq = Sequence(self._next_key)
        self._next_key += 1
        self.touch(seq)
        self.by_key[seq.key] = seq
        return seq

    def get(self, key: int) -> Sequence:
        seq = self.by_key.get(key)
        if seq is None:
            raise EngineError(f"Sequence {key} does not exist (it was closed).")
        return seq

    def touch(self, seq: Sequence) -> None:
        self._clock += 1
        seq.last_used = self._clock

    def policy(self, seq: Sequence) -> ContextFullPolicy:
        return seq.policy or self.default_policy

    def any_busy(self) -> bool:
        return any(s.phase is not Phase.IDLE for s in self.by_key.values())

    def resident(self) -> list[Sequence]:
        return [s for s in self.by_key.values() if s.seq_id is not None]

    def idle_resident_lru(
        self, exclude: Collection[int] = (), holding: bool = True
    ) -> list[Sequence]:
        """Idle resident sequences (that hold something, with ``holding``), least recently
        used first: the ones to evict when the cache or the slots run out."""
        return sorted(
            (
                s
                for s in self.by_key.values()
                if s.seq_id is not None
                and s.phase is Phase.IDLE
                and (s.tokens or not holding)
                and s.key not in exclude
            ),
            key=lambda s: s.last_used,
        )


def require_idle(seq: Sequence) -> None:
    if seq.phase is not Phase.IDLE:
        raise EngineError("This conversation is still generating; stop it first.")
