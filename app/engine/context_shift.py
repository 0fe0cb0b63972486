"""A full context: drop the oldest tokens after the system prompt and keep generating.

``seq_rm(seq, n_keep, n_keep + n_discard)`` then ``seq_add(seq, n_keep + n_discard, -1,
-n_discard)``, cut at a message boundary when the sequence came from a chat. Where the
cache cannot shift exactly (a recurrent state keeps what a shift drops), the kept text is
processed again instead, from the system prompt's checkpoint where there is one.
"""

from __future__ import annotations

from app.engine.chat_fit import ChatFitter
from app.engine.events import ContextShifted, Event
from app.engine.handles import Handles
from app.engine.sequence import Sequence
from app.engine.snapshots import Snapshots


class ContextShift:
    def __init__(self, handles: Handles, snapshots: Snapshots, fitter: ChatFitter) -> None:
        self._h = handles
        self._snapshots = snapshots
        self._fitter = fitter

    def shift(self, seq: Sequence, need: int, events: list[Event]) -> bool:
        """Free at least ``need`` cells, and at least half of what follows the kept prefix.

        False when there is not that much to drop.
        """
        ctx = self._h.need_ctx()
        n_keep = min(seq.n_keep, len(seq.tokens))
        movable = len(seq.tokens) - n_keep
        target = max(need, movable // 2)
        if target > movable or movable <= 0:
            return False
        n_discard = target
        boundaries = [b - n_keep for b in self._fitter.message_boundaries(seq)]
        later = [b for b in boundaries if b >= target]
        dropped_messages = 0
        if later and later[0] < movable:
            n_discard = later[0]
            dropped_messages = 1 + len([b for b in boundaries if 0 < b < target])
        assert seq.seq_id is not None
        sid = seq.seq_id
        original = list(seq.tokens)
        exact = ctx.traits.shifts_exactly
        if exact and seq.maybe_shared and not self._make_physical(seq):
            seq.set_held(0)  # no room for a copy: the cache was emptied
            exact = False
        seq.checkpoint_at.clear()
        if exact:
            ctx.seq_rm(sid, n_keep, n_keep + n_discard)
            ctx.seq_add(sid, n_keep + n_discard, -1, -n_discard)
            seq.set_held(n_keep)
            seq.tokens = original[:n_keep] + original[n_keep + n_discard :]
        else:
            kept = self._snapshots.truncate(seq, n_keep)
            seq.pending = original[kept:n_keep] + original[n_keep + n_discard :] + seq.pending
        seq.n_dropped += dropped_messages
        events.append(ContextShifted(seq.key, n_discard, n_keep))
        return True

    def _make_physical(self, seq: Sequence) -> bool:
        """Give a forked sequence cells of its own, so a shift cannot move its partner's
        (in a unified cache ``seq_cp`` shares cells, and ``seq_add`` moves both).

        False when there was no room for the copy: the sequence's cache is then empty and
        the caller re-processes its tokens.
        """
        ctx = self._h.need_ctx()
        assert seq.seq_id is not None
        blob = ctx.state_get(seq.seq_id)
        ctx.seq_rm(seq.seq_id, -1, -1)
        seq.maybe_shared = False
        if ctx.state_set(seq.seq_id, blob):
            return True
        ctx.seq_rm(seq.seq_id, -1, -1)
        return False
