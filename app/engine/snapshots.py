"""Cutting a sequence's cache back, and the saved states that make it possible.

The correctness core for caches that cannot simply drop a suffix (recurrent, hybrid, a
sliding window that forgot): :meth:`Snapshots.truncate` keeps at most the first n tokens
exactly where the cache allows it, else restores the latest checkpoint before n, else
empties the cache, and says how many tokens it kept; callers queue the rest again. A
checkpoint may carry the logits after its last token, and the prompt's last logits are
kept as :class:`ReadyLogits`, so a regenerated reply starts without any decode.
"""

from __future__ import annotations

import logging

import numpy as np

from app.engine.checkpoints import Checkpoint
from app.engine.errors import StateError
from app.engine.handles import Handles
from app.engine.sequence import ReadyLogits, Sequence
from app.engine.state_file import SequenceState

log = logging.getLogger(__name__)


class Snapshots:
    def __init__(self, handles: Handles) -> None:
        self._h = handles

    def truncate(self, seq: Sequence, n: int) -> int:
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
            # Not resident: cut the parked state when it is restored.
            seq.cut_after_restore = n if n > 0 else None
            if n == 0:
                seq.parked = None
        seq.set_held(n)
        return n

    def _cut(self, seq: Sequence, n: int) -> int:
        ctx = self._h.need_ctx()
        sid = seq.seq_id
        assert sid is not None
        if ctx.traits.can_cut(n, len(seq.tokens), ctx.seq_pos_min(sid)) and ctx.seq_rm(sid, n, -1):
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
                seq.ready = ReadyLogits(checkpoint.n_tokens, checkpoint.logits)
            return checkpoint.n_tokens
        log.debug("sequence %d: no checkpoint before %d tokens; processing again", seq.key, n)
        ctx.seq_rm(sid, -1, -1)
        return 0

    def cut_and_requeue(self, seq: Sequence, n: int) -> int:
        """Keep the first ``n`` cached tokens, queueing again what the cut could not keep;
        returns how many were queued again."""
        held = list(seq.tokens)
        kept = self.truncate(seq, n)
        seq.pending = held[kept:n] + seq.pending
        return n - kept

    def queue_for_logits(self, seq: Sequence) -> None:
        """Make sure the next step has logits for the token after what the cache holds: a
        checkpoint's saved logits, or the last token(s) queued to be decoded again."""
        if not seq.tokens or seq.ready_logits() is not None:
            return
        held = list(seq.tokens)
        kept = self.truncate(seq, len(held) - 1)
        seq.pending = held[kept:] + seq.pending

    def take_checkpoint(self, seq: Sequence, logits: np.ndarray | None) -> None:
        ctx = self._h.need_ctx()
        assert seq.seq_id is not None
        try:
            blob = ctx.partial_state_get(seq.seq_id)
        except StateError as exc:
            log.warning("no checkpoint for sequence %d: %s", seq.key, exc)
            return
        raw = None
        if logits is not None:
            ready = seq.ready
            same = ready is not None and ready.n_tokens == len(seq.tokens)
            raw = ready.data if ready is not None and same else logits.tobytes()
        seq.checkpoints.add(Checkpoint(len(seq.tokens), blob, raw))

    # ------------------------------------------------------------ whole sequence states

    def state_of(self, seq: Sequence) -> SequenceState:
        """The resident sequence's cache, tokens and checkpoints, ready to save or park."""
        ctx = self._h.need_ctx()
        assert seq.seq_id is not None
        return self.with_bookkeeping(
            seq,
            SequenceState(
                self._h.need_model().fingerprint,
                self._h.layout(),
                list(seq.tokens),
                ctx.state_get(seq.seq_id),
            ),
        )

    def with_bookkeeping(self, seq: Sequence, cache: SequenceState) -> SequenceState:
        """``cache``'s KV data with the sequence's queue, prefix and checkpoints."""
        return SequenceState(
            cache.model_fingerprint,
            cache.layout,
            cache.tokens,
            cache.blob,
            list(seq.pending),
            seq.n_keep,
            {"n_dropped": seq.n_dropped},
            self._saved_checkpoints(seq),
        )

    @staticmethod
    def _saved_checkpoints(seq: Sequence) -> list[Checkpoint]:
        """The checkpoints, and the prompt's last logits as one without state data."""
        saved = list(seq.checkpoints)
        ready = seq.ready
        if ready is not None and 0 < ready.n_tokens <= len(seq.tokens):
            if seq.checkpoints.at(ready.n_tokens) is None:
                saved.append(Checkpoint(ready.n_tokens, b"", ready.data))
                saved.sort(key=lambda c: c.n_tokens)
        return saved

    def adopt_checkpoints(self, seq: Sequence, state: SequenceState) -> None:
        """Keep a restored state's checkpoints (logits of another size are dropped)."""
        logits_size = 4 * self._h.need_model().n_vocab
        for c in state.checkpoints:
            if c.logits is not None and len(c.logits) != logits_size:
                c = Checkpoint(c.n_tokens, c.blob, None)
            if c.logits is not None and (seq.ready is None or c.n_tokens >= seq.ready.n_tokens):
                seq.ready = ReadyLogits(c.n_tokens, c.logits)
            if c.blob:
                seq.checkpoints.add(c)
