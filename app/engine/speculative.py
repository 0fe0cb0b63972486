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
before every guessing step and a restore plus a re-decode after each reject.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

from app.engine.cache import CacheTraits

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


class SpecMode(enum.Enum):
    OFF = "off"
    NGRAM = "ngram"  # prompt lookup in the conversation's own tokens
    DRAFT = "draft"  # a second, smaller model of the same vocabulary (not built yet)

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
        if self.mode is SpecMode.DRAFT:
            raise ValueError(
                "Speculation with a draft model is not available yet; use 'ngram' or 'off'."
            )

    @classmethod
    def of(cls, mode: SpecMode | str, draft_max: int = DEFAULT_DRAFT_MAX) -> SpecSettings:
        return cls(SpecMode.parse(mode), draft_max)

    def to_dict(self) -> dict[str, object]:
        return {"mode": self.mode.value, "draft_max": self.draft_max}


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


@dataclass
class SpecState:
    """One sequence's speculation for a turn: its drafter, counts and adaptivity."""

    settings: SpecSettings
    drafter: Drafter = field(default_factory=NgramDrafter)
    drafted: int = 0  # guesses verified this turn
    accepted: int = 0  # ... of which kept
    length: int = 0  # the next guess's length at most (adapts between 1 and draft_max)
    misses: int = 0  # verified guesses in a row with nothing kept
    pause: int = 0  # steps left without guessing
    next_pause: int = FIRST_PAUSE_STEPS
    n_pauses: int = 0  # how often it stopped guessing this turn

    def __post_init__(self) -> None:
        self.length = self.settings.draft_max

    def propose(self, history: Sequence[int], n_room: int) -> list[int]:
        """This step's guesses (none while paused or without room)."""
        if self.pause > 0:
            self.pause -= 1
            return []
        return self.drafter.draft(history, min(self.length, n_room))

    def record(self, drafted: int, accepted: int) -> None:
        """A verified guess: ``accepted`` of its ``drafted`` tokens were kept."""
        self.drafted += drafted
        self.accepted += accepted
        if accepted == 0:
            self.misses += 1
            self.length = max(1, self.length // 2)
            if self.misses >= MISSES_BEFORE_PAUSE:
                self.pause, self.misses = self.next_pause, 0
                self.next_pause = min(MAX_PAUSE_STEPS, self.next_pause * 2)
                self.n_pauses += 1
                self.length = self.settings.draft_max  # a fresh start after the pause
            return
        self.misses = 0
        self.next_pause = FIRST_PAUSE_STEPS
        if accepted == drafted:
            self.length = min(self.settings.draft_max, self.length * 2)
        else:
            self.length = max(1, accepted + 1)
