"""Forks: a new sequence holding the first n tokens of another's cache, without recomputing.

The whole state is copied (a recurrent state cannot be copied in part): in a unified cache
``seq_cp`` shares the source's cells (both are marked ``maybe_shared``, so a later shift
makes them physical first), in a split cache the state is copied through get/set data.
Then the copy is cut back to n like any other cut (:meth:`Snapshots.truncate`): exactly
where the cache allows it, else from the checkpoint at or before n, the rest queued to be
processed again.
"""

from __future__ import annotations

from app.engine.errors import EngineError, StateError
from app.engine.handles import Handles
from app.engine.residency import Residency
from app.engine.sequence import Sequence, require_idle
from app.engine.snapshots import Snapshots

_NO_SLOT = "No free sequence slot to fork into: stop a tab or raise the number of resident tabs."


class Forks:
    def __init__(self, handles: Handles, snapshots: Snapshots, residency: Residency) -> None:
        self._h = handles
        self._snapshots = snapshots
        self._residency = residency

    def fork(self, src: Sequence, n_tokens: int | None = None) -> Sequence:
        """The new sequence holding ``src``'s first ``n_tokens`` (all of them by default)."""
        require_idle(src)
        ctx = self._h.need_ctx()
        if n_tokens is None:
            n_tokens = len(src.tokens)
        if not 0 <= n_tokens <= len(src.tokens):
            raise EngineError(
                f"Cannot fork at token {n_tokens}: the sequence holds {len(src.tokens)}."
            )
        if self._h.need_model().has_encoder:
            raise EngineError("Encoder-decoder models cannot fork a conversation.")
        dst = self._h.table.open()
        dst.messages = list(src.messages) if src.messages is not None else None
        dst.n_keep, dst.n_dropped = min(src.n_keep, n_tokens), src.n_dropped
        dst.reserve = src.reserve
        events = self._h.side_events
        try:
            self._residency.ensure_resident(src, events, protect={src.key, dst.key})
            if src.seq_id is None:
                raise EngineError(_NO_SLOT)
            self._residency.assign_slot(dst, events, protect={src.key, dst.key})
            if dst.seq_id is None:
                raise EngineError(_NO_SLOT)
            if ctx.settings.kv_unified:
                ctx.seq_cp(src.seq_id, dst.seq_id, -1, -1)
                src.maybe_shared = dst.maybe_shared = True
            elif not ctx.state_set(dst.seq_id, ctx.state_get(src.seq_id)):
                # A split cache cannot share cells: copy the data instead.
                raise StateError("Could not copy the sequence state for the fork.")
        except BaseException:
            self._residency.close(dst.key)
            raise
        dst.tokens = list(src.tokens)
        dst.checkpoints = src.checkpoints.copy(up_to=n_tokens)
        dst.ready = src.ready
        kept = self._snapshots.truncate(dst, n_tokens)
        dst.pending = src.tokens[kept:n_tokens]
        if kept < n_tokens and ctx.traits.needs_checkpoints:
            dst.checkpoint_at = {n_tokens}  # re-processed up to the fork point: keep it there
        if n_tokens == len(src.tokens):
            dst.pending += src.pending
        return dst
