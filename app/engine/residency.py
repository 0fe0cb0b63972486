"""KV slots: which sequences are resident (bound to a llama.cpp ``seq_id``), and eviction.

At most ``n_seq_max`` sequences are resident at once. When another needs a slot, or the
shared cache runs out of cells, the least recently used idle one leaves: its cache is
parked as a state blob inside the engine and restored when it is needed again (restoring
costs far less than re-processing its text).
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from app.engine.errors import StateError
from app.engine.events import Event, Evicted
from app.engine.handles import Handles
from app.engine.sequence import Sequence
from app.engine.snapshots import Snapshots
from app.engine.state_file import SequenceState

log = logging.getLogger(__name__)


class Residency:
    def __init__(self, handles: Handles, snapshots: Snapshots) -> None:
        self._h = handles
        self._snapshots = snapshots

    def assign_slot(self, seq: Sequence, events: list[Event], protect: Collection[int]) -> None:
        """Bind ``seq`` to a free ``seq_id``, evicting an idle one if needed; leaves it
        unbound when every slot is busy or protected."""
        ctx = self._h.need_ctx()
        free = self._free_slots()
        if not free:
            victims = self._h.table.idle_resident_lru(exclude=protect, holding=False)
            if not victims:
                return
            self.evict(victims[0], events)
            free = self._free_slots()
        seq.seq_id = free[0]
        ctx.seq_rm(seq.seq_id, -1, -1)

    def _free_slots(self) -> list[int]:
        used = {s.seq_id for s in self._h.table.by_key.values() if s.seq_id is not None}
        return [i for i in range(self._h.need_ctx().n_seq_max) if i not in used]

    def ensure_resident(
        self, seq: Sequence, events: list[Event], protect: Collection[int] | None = None
    ) -> None:
        """Give ``seq`` a slot and its cache back (restored from its parked state, or its
        tokens queued again); leaves it unbound when no slot can be had."""
        if seq.seq_id is not None:
            return
        self.assign_slot(seq, events, protect or {seq.key})
        if seq.seq_id is None:
            return  # every slot is busy: this sequence waits for one
        parked, seq.parked = seq.parked, None
        cut, seq.cut_after_restore = seq.cut_after_restore, None
        if parked is not None and self.restore_into(seq, parked):
            if cut is not None:
                self._snapshots.cut_and_requeue(seq, cut)
        elif seq.tokens:
            seq.requeue_all()

    def restore_into(self, seq: Sequence, state: SequenceState) -> bool:
        """Load ``state``'s cache into the resident ``seq``; False when it was refused."""
        ctx = self._h.need_ctx()
        assert seq.seq_id is not None
        try:
            state.check_compatible(self._h.need_model().fingerprint, self._h.layout())
        except StateError as exc:
            log.info("state of sequence %d refused: %s", seq.key, exc)
            return False
        if len(state.tokens) >= ctx.n_ctx_seq:
            return False
        while not ctx.state_set(seq.seq_id, state.blob):
            ctx.seq_rm(seq.seq_id, -1, -1)
            # No room in the shared cache: idle tabs leave for their parked state first,
            # since re-processing would cost far more than restoring.
            idle = self._h.table.idle_resident_lru(exclude={seq.key})
            if not idle:
                return False
            self.evict(idle[0], self._h.side_events)
        if ctx.seq_pos_max(seq.seq_id) + 1 != len(state.tokens):
            ctx.seq_rm(seq.seq_id, -1, -1)
            return False
        seq.tokens = list(state.tokens)
        return True

    def evict(self, seq: Sequence, events: list[Event]) -> None:
        ctx = self._h.need_ctx()
        assert seq.seq_id is not None
        seq.parked = self._snapshots.state_of(seq) if seq.tokens else None
        ctx.seq_rm(seq.seq_id, -1, -1)
        if self._h.encoded_for == (seq.key, seq.seq_id):
            self._h.encoded_for = None
        seq.seq_id = None
        seq.maybe_shared = False
        events.append(Evicted(seq.key))

    def evict_lru_idle(self, events: list[Event]) -> bool:
        """Make room in the shared cache: the least recently used idle sequence leaves."""
        idle = self._h.table.idle_resident_lru()
        if not idle:
            return False
        self.evict(idle[0], events)
        return True

    # ------------------------------------------------------------ the whole table

    def park_all(self) -> list[Sequence]:
        """Before the context is rebuilt: every resident sequence's cache to its parked
        state. Returns them, most recently used first."""
        resident = sorted(self._h.table.resident(), key=lambda s: -s.last_used)
        for seq in resident:
            seq.parked = self._snapshots.state_of(seq) if seq.tokens else None
            seq.seq_id = None
            seq.maybe_shared = False
        return resident

    def restore_parked(self, resident: list[Sequence]) -> None:
        """After a rebuild: states the new context cannot take become text to re-process;
        the sequences that were resident come back, as many as there are slots."""
        ctx = self._h.need_ctx()
        layout = self._h.layout()
        for seq in self._h.table.by_key.values():
            if seq.parked is not None and (
                seq.parked.layout != layout or len(seq.parked.tokens) >= ctx.n_ctx_seq
            ):
                # seq.tokens already reflects a cut made while parked.
                everything = seq.tokens + seq.pending
                seq.pending = everything if len(everything) < ctx.n_ctx_seq else []
                seq.parked, seq.cut_after_restore = None, None
                seq.set_held(0)
        for seq in resident[: ctx.n_seq_max]:
            if seq.parked is not None:
                self.ensure_resident(seq, self._h.side_events, protect={seq.key})

    def unbind_all_but(self, keep: Sequence) -> None:
        """After ``seq_keep``: every other sequence lost its cells; its tokens are queued."""
        for other in self._h.table.by_key.values():
            if other is not keep and other.seq_id is not None:
                other.seq_id = None
                other.requeue_all()

    def forget(self, seq: Sequence) -> None:
        """Empty the sequence's cache and everything known about what it held."""
        if seq.seq_id is not None:
            self._h.need_ctx().seq_rm(seq.seq_id, -1, -1)
        seq.tokens, seq.pending, seq.parked = [], [], None
        seq.messages, seq.n_dropped, seq.n_keep, seq.maybe_shared = None, 0, 0, False
        seq.cut_after_restore, seq.encoder_input, seq.last_logits = None, None, None
        seq.checkpoints.clear()
        seq.checkpoint_at.clear()
        seq.ready = None
        self._h.forget_encoder_output(seq.key)

    def close(self, key: int) -> None:
        seq = self._h.table.by_key.pop(key, None)
        if seq is None:
            return
        if seq.seq_id is not None and self._h.context is not None:
            self._h.context.seq_rm(seq.seq_id, -1, -1)
        self._h.forget_encoder_output(key)
        if seq.sampler:
            seq.sampler.close()
