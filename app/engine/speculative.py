"""Speculative decoding: guess a few tokens cheaply, verify them in the step's one decode.

The seam is about *token positions* only. A generating sequence holds ``n`` tokens in its
cache and has one sampled token queued (position ``n``). A :class:`Drafter` looks at the
sequence's history (every token so far, prompt and reply) and proposes up to ``k`` tokens for
positions ``n+1 .. n+k``. The scheduler puts the queued token and the guesses into the same
``llama_decode`` as every other tab's tokens, with a logits row for each; after the decode
the sequence's own sampler chain samples row by row and keeps a guess only while it equals
what the chain drew. The first draw that differs is the next queued token, and the cache
is cut back past the last kept position (``llama_memory_seq_rm``).

Sampling row by row with the tab's own chain *is* the standard acceptance rule for a
drafter whose proposal is a point mass (prompt lookup): the guess ``t`` is kept with
probability ``p(t)``, and on a reject the drawn token follows ``p`` without ``t``,
renormalised (the residual). The chain's state (penalty history, grammar, RNG) sees exactly
the tokens it would have seen without guesses, so greedy output is token-for-token the same,
given the same logits (a batch of several positions may change llama.cpp's last bits on
trained weights: DESIGN.md section 7).

Guesses never decide correctness, only speed: a wrong or stale guess costs a wider decode.
Later, non-text chunks (images, issue 30) occupy positions too: a drafter sees them as the
token ids the history holds for those positions and simply proposes nothing after them.

Which caches can take it: attention caches and sliding-window caches that keep every
position (``swa_full``) cut a suffix with ``seq_rm``. Recurrent and hybrid caches cannot
(their state folds every token); there, and where a sliding window forgets positions,
speculation is off (:func:`supported`): a verify would need a partial-state checkpoint
before every guessing step, and a reject a restore plus a decode of the kept tokens again.
Measured on the tiny models (tests/support/arch_models.py, one thread): the checkpoint alone
costs about a one-token decode (get 0.07-0.10 ms, set 0.04 ms, against 0.04-0.06 ms per
decode on qwen35, lfm2, mamba2), and on this project's CPUs guesses seldom pay even where
a cut is free (SmolLM2: a decode's cost grows almost linearly with its tokens), so it would
cost more than it saves.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

from app.engine.cache import CacheTraits
from app.engine.settings import SamplingParams

DEFAULT_DRAFT_MAX: Final = 8
MAX_DRAFT: Final = 64
# Prompt lookup: the longest and shortest suffix of the history looked up (longest first).
NGRAM_MAX: Final = 4
NGRAM_MIN: Final = 2
# Adaptivity: this many verified guesses in a row with nothing kept, and the sequence stops
# guessing for a while (the pause doubles each time, up to the cap, and resets on a hit).
MISSES_BEFORE_PAUSE: Final = 3
FIRST_PAUSE_STEPS: Final = 16
MAX_PAUSE_STEPS: Final = 256
# A guess must promise this many times the tokens per second of a step without one. On a
# CPU a decode's cost grows almost linearly with its tokens (measured here on SmolLM2 Q4_1,
# one thread: 1 token 22 ms, 2: 31, 9: 119, 16: 197 ms; at 1,700 tokens of context 61, 107,
# 425, 744 ms), so a guess pays only where nearly all of it is kept.
MIN_GAIN: Final = 1.05
# Before any measurement: the extra cost of one guessed token, as a fraction of a step, and
# the chance that a guessed token is kept (prior counts, decayed as guesses are verified).
PRIOR_EXTRA_COST: Final = 0.3
PRIOR_KEPT, PRIOR_LOST = 3.0, 1.0
PROBE_LENGTH: Final = 4  # a guess made to learn whether guesses are kept (SpecState.probe)
DECAY: Final = 0.9  # per verified guess: recent guesses count most
EMA: Final = 0.3  # weight of a new timing


class SpecMode(enum.Enum):
    OFF = "off"
    NGRAM = "ngram"  # prompt lookup in the conversation's own tokens

    @classmethod
    def parse(cls, value: SpecMode | str) -> SpecMode:
        if isinstance(value, SpecMode):
            return value
        for mode in cls:
            if mode.value == value:
                return mode
        names = ", ".join(m.value for m in cls)
        raise ValueError(f"The speculative mode must be one of {names}, not {value!r}.")


@dataclass(frozen=True)
class SpecSettings:
    """How a sequence guesses ahead: the mode and the longest guess per step."""

    mode: SpecMode = SpecMode.OFF
    draft_max: int = DEFAULT_DRAFT_MAX

    def __post_init__(self) -> None:
        if not 1 <= self.draft_max <= MAX_DRAFT:
            raise ValueError(
                f"The draft length must be between 1 and {MAX_DRAFT}, not {self.draft_max}."
            )

    @classmethod
    def of(cls, mode: SpecMode | str, draft_max: int = DEFAULT_DRAFT_MAX) -> SpecSettings:
        return cls(SpecMode.parse(mode), draft_max)

    def to_dict(self) -> dict[str, object]:
        return {"mode": self.mode.value, "draft_max": self.draft_max}


class Counted(Protocol):
    """A reply's guess counts (the engine's Completion, the session's TurnResult)."""

    @property
    def n_drafted(self) -> int: ...

    @property
    def n_accepted(self) -> int: ...


def summary(params: SamplingParams, replies: Iterable[Counted]) -> dict[str, object]:
    """``run --json``'s ``speculative``: the choice, and the tokens guessed and verified and
    those kept over the replies."""
    done = list(replies)
    return {
        "mode": params.speculative,
        "draft_max": params.draft_max,
        "drafted": sum(r.n_drafted for r in done),
        "accepted": sum(r.n_accepted for r in done),
    }


def supported(traits: CacheTraits) -> bool:
    """Whether this cache can drop rejected guesses with ``seq_rm`` (see the docstring)."""
    return not traits.needs_checkpoints


class Drafter(Protocol):
    """Proposes up to ``n_max`` tokens to follow ``history`` (may propose none)."""

    def draft(self, history: Sequence[int], n_max: int) -> list[int]: ...


class NgramDrafter:
    """Prompt lookup: find the latest earlier place where the history's last few tokens
    occurred, and propose what followed there.

    An index maps each n-gram (``NGRAM_MIN`` to ``NGRAM_MAX`` tokens) to the position right
    after its latest occurrence; it grows with the history and is rebuilt when the history
    is not an extension of what was indexed (a cut back, a shift, a new turn's edit).
    """

    def __init__(self) -> None:
        self._tokens: list[int] = []
        self._index: dict[tuple[int, ...], int] = {}

    def _sync(self, history: Sequence[int]) -> None:
        seen = self._tokens
        n = len(seen)
        # A cheap check that the indexed tokens are still the history's prefix: their tail.
        if n > len(history) or any(history[i] != seen[i] for i in range(max(0, n - 8), n)):
            self._tokens, self._index = [], {}
            n = 0
        for p in range(n, len(history)):
            self._tokens.append(history[p])
            # The n-grams ending just before p: p is what followed them.
            for size in range(NGRAM_MIN, NGRAM_MAX + 1):
                if p >= size:
                    self._index[tuple(self._tokens[p - size : p])] = p

    def draft(self, history: Sequence[int], n_max: int) -> list[int]:
        if n_max <= 0:
            return []
        self._sync(history)
        tokens = self._tokens
        n = len(tokens)
        for size in range(NGRAM_MAX, NGRAM_MIN - 1, -1):
            if n < size:
                continue
            start = self._index.get(tuple(tokens[n - size :]))
            if start is not None and start < n:
                return tokens[start : min(n, start + n_max)]
        return []


def expected_tokens(kept: float, k: int) -> float:
    """Tokens a step yields with a guess of ``k`` when each guessed token is kept with
    probability ``kept`` until the first loss (the draw after the kept ones included)."""
    if kept >= 1.0:
        return float(k + 1)
    return (1.0 - kept ** (k + 1)) / (1.0 - kept)


def best_length(kept: float, extra_cost: float, n_max: int) -> tuple[int, float]:
    """The guess length with the most tokens per unit of step time, and that gain over a
    step without a guess (a step with ``k`` guessed tokens costs ``1 + extra_cost * k``)."""
    best, gain = 0, 1.0
    for k in range(1, n_max + 1):
        g = expected_tokens(kept, k) / (1.0 + extra_cost * k)
        if g > gain:
            best, gain = k, g
    return best, gain


@dataclass
class SpecState:
    """One sequence's speculation for a turn: its drafter, counts and adaptivity.

    It guesses only where the guesses measured so far promise more tokens per second: the
    chance a guessed token is kept (decayed counts of kept and lost tokens) and the extra
    time a guessed token adds to a step (the step times with and without guesses) give the
    best length (:func:`best_length`). Where none pays, or guesses keep failing, it pauses,
    longer each time, and then tries again (what it learned may no longer hold)."""

    settings: SpecSettings
    drafter: Drafter = field(default_factory=NgramDrafter)
    drafted: int = 0  # guesses verified this turn
    accepted: int = 0  # ... of which kept
    misses: int = 0  # verified guesses in a row with nothing kept
    pause: int = 0  # steps left without guessing
    next_pause: int = FIRST_PAUSE_STEPS
    n_pauses: int = 0  # how often it stopped guessing this turn
    kept_w: float = PRIOR_KEPT  # decayed count of guessed tokens kept
    lost_w: float = PRIOR_LOST  # decayed count of guesses that ended in a loss
    plain_ms: float = 0.0  # a step without guesses (0: not measured yet)
    extra_ms: float = -1.0  # what one guessed token adds to a step (-1: not measured yet)
    adaptive: bool = True  # False: always the longest guess that fits (tests of the verify)
    probe: bool = True  # the next guess is a probe: made whatever the costs say

    @property
    def kept_rate(self) -> float:
        return self.kept_w / (self.kept_w + self.lost_w)

    @property
    def extra_cost(self) -> float:
        if self.extra_ms < 0 or self.plain_ms <= 0:
            return PRIOR_EXTRA_COST
        return max(0.0, self.extra_ms / self.plain_ms)

    def length(self, n_room: int) -> int:
        """The guess length that pays now (0: none)."""
        k, gain = best_length(self.kept_rate, self.extra_cost, min(n_room, self.settings.draft_max))
        return k if gain >= MIN_GAIN else 0

    def propose(self, history: Sequence[int], n_room: int) -> list[int]:
        """This step's guesses (none while paused, without room, or where none pays)."""
        if not self.adaptive:
            return self.drafter.draft(history, min(n_room, self.settings.draft_max))
        if self.pause > 0:
            self.pause -= 1
            return []
        if self.plain_ms <= 0:
            return []  # one step without guesses first: the measure of what they cost
        k = self.length(n_room)
        if self.probe and n_room > 0:
            # What is kept is only learned by guessing: after a start or a pause, one guess
            # of the default length, so a reply that starts to copy is noticed.
            k = max(k, min(n_room, self.settings.draft_max, PROBE_LENGTH))
        if k == 0:
            if n_room > 0:
                self._pause()
            return []
        guess = self.drafter.draft(history, k)
        if guess:
            self.probe = False
        return guess

    def timed(self, step_ms: float, drafted: int) -> None:
        """A step's decode time, with ``drafted`` guessed tokens of this sequence in it."""
        if drafted == 0:
            self.plain_ms = step_ms if self.plain_ms <= 0 else _ema(self.plain_ms, step_ms)
        elif self.plain_ms > 0:
            extra = max(0.0, step_ms - self.plain_ms) / drafted
            self.extra_ms = extra if self.extra_ms < 0 else _ema(self.extra_ms, extra)

    def record(self, drafted: int, accepted: int) -> None:
        """A verified guess: ``accepted`` of its ``drafted`` tokens were kept."""
        self.drafted += drafted
        self.accepted += accepted
        self.kept_w = self.kept_w * DECAY + accepted
        self.lost_w = self.lost_w * DECAY + (1 if accepted < drafted else 0)
        if accepted == 0:
            self.misses += 1
            if self.misses >= MISSES_BEFORE_PAUSE and self.adaptive:
                self._pause()
            return
        self.misses = 0
        if self.length(self.settings.draft_max) > 0:
            # Guessing pays again: a later pause starts short. (A kept probe alone does
            # not reset it: where no guess pays, probes grow rarer.)
            self.next_pause = FIRST_PAUSE_STEPS

    def _pause(self) -> None:
        self.pause, self.misses = self.next_pause, 0
        self.next_pause = min(MAX_PAUSE_STEPS, self.next_pause * 2)
        self.n_pauses += 1
        self.probe = True
        # After the pause, a fresh look: the prior chance that guesses are kept again.
        self.kept_w, self.lost_w = PRIOR_KEPT, PRIOR_LOST


def _ema(old: float, new: float) -> float:
    return old + EMA * (new - old)
