"""Checkpoints: a sequence's state at a message boundary, for caches that cannot be cut back.

A recurrent or hybrid cache folds every token into one state, and a sliding-window cache
forgets old positions, so "keep only the first n tokens" needs the state as it was at n.
Like llama-server's context checkpoints, the engine saves the part that cannot be cut back
(``llama_state_seq_get_data_ext`` with ``LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY``: the recurrent
or sliding-window part; the attention part is cut with ``seq_rm``) after the prompt of a turn,
before the last user message and after each reply. A checkpoint taken right after a prompt
also keeps the logits of its last token, so a regenerated reply starts without decoding
anything. They are bounded in number and bytes per sequence, and saved with its state file.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

# llama-server keeps 8 per slot (--ctx-checkpoints); a tab needs fewer, since they are taken
# only at message boundaries: the last two turns' worth (prompt, before-user, reply each).
DEFAULT_MAX_COUNT = 6
DEFAULT_MAX_BYTES = 256 << 20


@dataclass(frozen=True)
class Checkpoint:
    """The uncuttable part of a sequence's state after its first ``n_tokens`` tokens."""

    n_tokens: int
    blob: bytes
    logits: bytes | None = None  # float32 logits for the token after ``n_tokens`` (or None)

    @property
    def nbytes(self) -> int:
        return len(self.blob) + (len(self.logits) if self.logits else 0)


class Checkpoints:
    """A sequence's checkpoints, ordered by position, bounded in count and bytes."""

    def __init__(
        self,
        items: Iterable[Checkpoint] = (),
        max_count: int = DEFAULT_MAX_COUNT,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.max_count = max_count
        self.max_bytes = max_bytes
        # The position kept longest (the end of the system prompt): when old messages are
        # dropped, the kept ones are processed again from there, not from the start.
        self.pinned: int | None = None
        self._items: list[Checkpoint] = []
        for item in items:
            self.add(item)

    def __iter__(self) -> Iterator[Checkpoint]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self._items)

    def positions(self) -> list[int]:
        return [c.n_tokens for c in self._items]

    def add(self, checkpoint: Checkpoint) -> None:
        """Keep ``checkpoint``, replacing one at the same position; the oldest go first."""
        if self.max_count <= 0 or checkpoint.nbytes > self.max_bytes:
            return
        keys = self.positions()
        i = bisect.bisect_left(keys, checkpoint.n_tokens)
        if i < len(keys) and keys[i] == checkpoint.n_tokens:
            existing = self._items[i]
            if checkpoint.logits is None and existing.logits is not None:
                # Same state; keep the logits the earlier one had.
                checkpoint = Checkpoint(checkpoint.n_tokens, checkpoint.blob, existing.logits)
            self._items[i] = checkpoint
        else:
            self._items.insert(i, checkpoint)
        # The earliest positions are the least likely to be cut back to; the newest is the
        # one just taken, so it always stays, and the pinned one goes last.
        while len(self._items) > self.max_count or (
            self.nbytes > self.max_bytes and len(self._items) > 1
        ):
            self._items.pop(self._victim(checkpoint))

    def _victim(self, newest: Checkpoint) -> int:
        spare = [i for i, c in enumerate(self._items) if c is not newest]
        unpinned = [i for i in spare if self._items[i].n_tokens != self.pinned]
        return (unpinned or spare)[0]

    def best_for(self, n: int) -> Checkpoint | None:
        """The latest checkpoint at or before ``n`` tokens."""
        i = bisect.bisect_right(self.positions(), n)
        return self._items[i - 1] if i else None

    def at(self, n: int) -> Checkpoint | None:
        best = self.best_for(n)
        return best if best is not None and best.n_tokens == n else None

    def drop_after(self, n: int) -> None:
        """Forget checkpoints past ``n`` tokens (the sequence no longer holds them)."""
        self._items = [c for c in self._items if c.n_tokens <= n]

    def clear(self) -> None:
        self._items.clear()

    def copy(self, up_to: int | None = None) -> Checkpoints:
        kept = self._items if up_to is None else [c for c in self._items if c.n_tokens <= up_to]
        copy = Checkpoints((), self.max_count, self.max_bytes)
        copy.pinned = self.pinned
        for item in kept:
            copy.add(item)
        return copy
