"""What a model's cache can and cannot do, by architecture family.

llama.cpp gives every architecture one of four kinds of memory, and they differ in exactly
the operations a chat app leans on (measured on tiny models of each, llama.cpp as vendored
by llama-cpp-python 0.3.36; see the README's "Models that work" table):

- attention (llama, qwen3, qwen3moe...): ``seq_rm`` of a suffix, partial ``seq_cp`` and
  shifting positions all work;
- sliding window (gemma3, gemma4, gpt-oss): the same while ``swa_full`` keeps every
  position; without it the cache forgets positions older than the window, so cutting back
  far is impossible (``seq_pos_min`` says how far back it still remembers);
- recurrent (mamba2, rwkv7) and hybrid (qwen35, qwen3next, granitehybrid, lfm2...): the
  recurrent part holds one state per sequence, folded over every token: a suffix cannot be
  removed, ``seq_cp`` copies the whole state whatever range is asked, and dropped tokens
  stay folded in after a "shift".

Where the cache cannot be cut, the engine restores a checkpoint (:mod:`app.engine.checkpoints`)
or re-processes text; it never decodes on top of a cache that does not hold what it thinks.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class CacheFamily(enum.Enum):
    ATTENTION = "attention"
    SLIDING_WINDOW = "sliding window"
    HYBRID = "hybrid"
    RECURRENT = "recurrent"


@dataclass(frozen=True)
class CacheTraits:
    """The cache of one context: its family and what follows from it."""

    family: CacheFamily
    n_swa: int  # the sliding window in tokens (0: none)
    swa_full: bool  # sliding-window layers keep every position
    can_shift: bool  # llama_memory_can_shift

    @classmethod
    def of(
        cls, recurrent: bool, hybrid: bool, n_swa: int, swa_full: bool, can_shift: bool
    ) -> CacheTraits:
        if hybrid:
            family = CacheFamily.HYBRID
        elif recurrent:
            family = CacheFamily.RECURRENT
        elif n_swa > 0:
            family = CacheFamily.SLIDING_WINDOW
        else:
            family = CacheFamily.ATTENTION
        return cls(family, max(0, n_swa), swa_full, can_shift)

    @property
    def has_recurrent_state(self) -> bool:
        return self.family in (CacheFamily.HYBRID, CacheFamily.RECURRENT)

    @property
    def forgets_positions(self) -> bool:
        """Sliding-window layers drop positions older than the window."""
        return self.family is CacheFamily.SLIDING_WINDOW and not self.swa_full

    @property
    def needs_checkpoints(self) -> bool:
        """Cutting back needs a saved state: the cache alone cannot go back."""
        return self.has_recurrent_state or self.forgets_positions

    @property
    def shifts_exactly(self) -> bool:
        """A context shift leaves a cache equal to processing the kept tokens (up to RoPE)."""
        return self.can_shift and not self.has_recurrent_state

    def can_cut(self, n: int, held: int, pos_min: int) -> bool:
        """Whether ``seq_rm(seq, n, -1)`` leaves an exact cache of the first ``n`` tokens.

        ``held`` is how many tokens the sequence holds and ``pos_min`` its oldest position
        still in memory (``llama_memory_seq_pos_min``).
        """
        if n >= held:
            return True
        if self.has_recurrent_state:
            return False
        if self.family is CacheFamily.SLIDING_WINDOW:
            # The next token at position n attends to the window before it: every one of
            # those positions must still be there (llama-server's check, tools/server). Even
            # with swa_full a restored state holds only the window (llama.cpp saves no more).
            return pos_min <= 0 or pos_min < n - self.n_swa
        return True
