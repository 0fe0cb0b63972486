"""What one scheduler step reports: plain data, safe to hand to any thread."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.engine.reasoning import Channel


@dataclass
class Completion:
    """The outcome of one generation on one sequence."""

    text: str = ""  # the answer (a reasoning model's thinking is in ``reasoning``)
    tokens: list[int] = field(default_factory=list)
    finish_reason: str = ""  # eog | length | stop | aborted | context_full | error
    n_prompt: int = 0  # prompt tokens this turn (cached + processed)
    n_prompt_processed: int = 0  # prompt tokens actually decoded this turn
    prompt_ms: float = 0.0
    gen_ms: float = 0.0
    error: str | None = None
    reasoning: str = ""  # what a reasoning model thought before its answer
    reasoning_ms: float | None = None  # how long it thought (None: it did not)

    @property
    def tokens_per_second(self) -> float:
        n = len(self.tokens)
        return n / (self.gen_ms / 1000.0) if self.gen_ms > 0 and n else 0.0

    @property
    def prompt_tokens_per_second(self) -> float:
        n = self.n_prompt_processed
        return n / (self.prompt_ms / 1000.0) if self.prompt_ms > 0 and n else 0.0


@dataclass(frozen=True)
class PromptProgress:
    key: int
    done: int
    total: int


@dataclass(frozen=True)
class TokenText:
    """Streamed text: part of the answer, or of the reasoning before it."""

    key: int
    text: str
    token: int
    channel: Channel = Channel.ANSWER


@dataclass(frozen=True)
class ContextShifted:
    key: int
    n_discarded: int
    n_kept: int


@dataclass(frozen=True)
class Finished:
    key: int
    completion: Completion


@dataclass(frozen=True)
class SequenceFailed:
    key: int
    message: str


@dataclass(frozen=True)
class Evicted:
    """A sequence's cache left memory to make room; its state is parked in the engine."""

    key: int


Event = PromptProgress | TokenText | ContextShifted | Finished | SequenceFailed | Evicted
