"""What one scheduler step reports: plain data, safe to hand to any thread."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from app.engine.reasoning import Channel
from app.engine.tool_calls.events import ToolCall


@dataclass
class Completion:
    """The outcome of one generation on one sequence."""

    text: str = ""  # the answer (a reasoning model's thinking is in ``reasoning``)
    tokens: list[int] = field(default_factory=list)
    finish_reason: str = ""  # eog | length | stop | tool_calls | aborted | context_full | error
    n_prompt: int = 0  # prompt tokens this turn (cached + processed)
    n_prompt_processed: int = 0  # prompt tokens actually decoded this turn
    prompt_ms: float = 0.0
    gen_ms: float = 0.0
    error: str | None = None
    reasoning: str = ""  # what a reasoning model thought before its answer
    reasoning_ms: float | None = None  # how long it thought (None: it did not)
    n_sampled: int = 0  # tokens sampled, the end-of-generation one included
    first_token_at: float = 0.0  # perf_counter() when the first token was sampled
    last_token_at: float = 0.0  # ... and the last
    # The reply's tokens where no ids are held (a remote server's count); None: len(tokens)
    n_reply_tokens: int | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)  # the reply's calls, parsed
    tool_errors: list[str] = field(default_factory=list)  # calls that broke or do not fit
    # Speculative decoding (app.engine.speculative): guesses verified, and kept, this turn.
    n_drafted: int = 0
    n_accepted: int = 0

    @property
    def stream_ms(self) -> float:
        """Time from the first sampled token to the last."""
        return max(0.0, self.last_token_at - self.first_token_at) * 1000.0

    @property
    def tokens_per_second(self) -> float:
        """How fast tokens followed one another: see :func:`generation_rate`."""
        return generation_rate(len(self.tokens), self.gen_ms, self.n_sampled, self.stream_ms)

    @property
    def prompt_tokens_per_second(self) -> float:
        n = self.n_prompt_processed
        return n / (self.prompt_ms / 1000.0) if self.prompt_ms > 0 and n else 0.0


def generation_rate(n_tokens: int, gen_ms: float, n_sampled: int, stream_ms: float) -> float:
    """Tokens per second of a reply: the tokens sampled after the first, over the time from
    the first sampled token to the last.

    The first token comes from the prompt's logits (its time is the prompt's), and every later
    one costs one decode step, so this is the same figure for a reply of 8 tokens and one of
    800 generated side by side, whatever else the steps did before the first token. Without
    sample times (``n_sampled == 0``: a record from before they were kept) it falls back to
    ``n_tokens`` over ``gen_ms``; one sampled token alone has no rate (0).
    """
    if n_sampled == 0:
        return n_tokens / (gen_ms / 1000.0) if gen_ms > 0 and n_tokens else 0.0
    if n_sampled < 2 or stream_ms <= 0:
        return 0.0
    return (n_sampled - 1) / (stream_ms / 1000.0)


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
class ToolCallStarted:
    """A tool call begins in the reply: its index among the reply's calls, id and name."""

    key: int
    index: int
    call_id: str
    name: str


@dataclass(frozen=True)
class ToolCallArguments:
    """More of the arguments (JSON text, only ever appended) of the call at ``index``."""

    key: int
    index: int
    fragment: str


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


@dataclass(frozen=True)
class StateRestored:
    """A parked cache came back (``restored``), or could not and its text is re-read
    (``reason`` says why): after a restore that had to wait for room, or a context rebuild
    its state no longer fits."""

    key: int
    restored: bool
    reason: str | None = None


class RestoreOutcome(enum.Enum):
    """What a saved state's restore did (:meth:`Engine.restore_state`)."""

    RESTORED = "restored"  # the cache holds it
    PARKED = "parked"  # kept in the engine, restored when the sequence is used and has room
    REFUSED = "refused"  # not used: its text (if trustworthy) is queued to be processed again


Event = (
    PromptProgress
    | TokenText
    | ToolCallStarted
    | ToolCallArguments
    | ContextShifted
    | Finished
    | SequenceFailed
    | Evicted
    | StateRestored
)
