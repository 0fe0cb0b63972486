"""KV slots: which sequences are resident (bound to a llama.cpp ``seq_id``), and eviction.

At most ``n_seq_max`` sequences are resident at once. When another needs a slot, or the
shared cache runs out of cells, the least recently used idle one leaves: its cache is
parked as a state blob inside the engine and restored when it is needed again (restoring
costs far less than re-processing its text).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Collection

from app.engine.cache import CacheFamily
from app.engine.errors import StateError
from app.engine.events import Event, Evicted, StateRestored
from app.engine.handles import Handles
from app.engine.sequence import Sequence
from app.engine.snapshots import Snapshots
from app.engine.state_file import SequenceState

log = logging.getLogger(__name__)


class Fit(enum.Enum):
    """What became of a parked state offered to the cache."""

    RESTORED = "restored"
    NO_ROOM = "no room"  # other sequences hold the cells: it waits, parked
    TOO_LONG = "too long"  # longer than the context holds
    INCOMPATIBLE = "incompatible"  # another model or cache layout
    FAILED = "failed"  # llama.cpp did not accept it

    def reason(self, n_tokens: int, n_ctx_seq: int = 0) -> str:
        """The sentence a window shows when the state's text is re-read instead."""
        if self is Fit.TOO_LONG:
            held = f"the context holds {n_ctx_seq:,}" if n_ctx_seq else "the context is smaller"
            return (
                f"Its cache of {n_tokens:,} tokens no longer fits ({held}): the conversation "
                "is read again from its text, the oldest messages left out."
            )
        if self is Fit.INCOMPATIBLE:
            return "The context settings changed the cache's layout: the conversation is read again from its text."
        if self is Fit.NO_ROOM:
            return (
                "The cache has no room for it while other conversations hold theirs: it is "
                "restored when this conversation is next used."
            )
        return "llama.cpp did not accept the saved cache: the conversation is read again from its text."


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
        self,
        seq: Sequence,
        events: list[Event],
        protect: Collection[int] | None = None,
        evict: bool = True,
    ) -> None:
        """Give ``seq`` a slot and its cache back (restored from its parked state, or its
        tokens queued again); leaves it unbound when no slot can be had, or when its parked
        state has no room yet (it waits, parked, for others to finish or leave)."""
        if seq.seq_id is not None:
            return
        self.assign_slot(seq, events, protect or {seq.key})
        if seq.seq_id is None:
            return  # every slot is busy: this sequence waits for one
        parked, seq.parked = seq.parked, None
        cut, seq.cut_after_restore = seq.cut_after_restore, None
        if parked is None:
            if seq.tokens:
                seq.requeue_all()
            return
        fate = self.restore_into(seq, parked, evict=evict)
        if fate is Fit.NO_ROOM:
            # Others hold the cells (busy, or not to be evicted now): wait parked, no slot.
            seq.seq_id = None
            seq.parked, seq.cut_after_restore = parked, cut
            return
        if fate is Fit.RESTORED:
            if cut is not None:
                # A cut made while parked promised ``cut`` tokens; a cache that can only
                # go back to a checkpoint keeps fewer: the turn processes those too.
                requeued = self._snapshots.cut_and_requeue(seq, cut)
                if requeued and seq.busy:
                    seq.completion.n_prompt_processed += requeued
                    seq.prompt_total += requeued
            if seq.report_restore:
                events.append(StateRestored(seq.key, True))
        else:
            seq.requeue_all()
            events.append(StateRestored(seq.key, False, fate.reason(len(parked.tokens))))
        seq.report_restore = False

    def restore_into(self, seq: Sequence, state: SequenceState, evict: bool = True) -> Fit:
        """Load ``state``'s cache into the resident ``seq``.

        llama.cpp is asked only when the cache has room for it (a restore without room
        fails inside llama.cpp, which logs "failed to find N available cells"): idle
        sequences leave for their parked state first with ``evict``, else NO_ROOM.
        """
        ctx = self._h.need_ctx()
        assert seq.seq_id is not None
        try:
            state.check_compatible(self._h.need_model().fingerprint, self._h.layout())
        except StateError as exc:
            log.info("state of sequence %d refused: %s", seq.key, exc)
            return Fit.INCOMPATIBLE
        if len(state.tokens) >= ctx.n_ctx_seq:
            return Fit.TOO_LONG
        idle_now = self._h.table.idle_resident_lru(exclude={seq.key}) if evict else []
        if self.free_cells(seq, leaving=idle_now) < len(state.tokens):
            # Busy tabs hold the room: parking every idle tab would not make enough.
            return Fit.NO_ROOM
        while self.free_cells(seq) < len(state.tokens):
            # Restoring costs far less than re-processing: idle tabs leave first.
            idle = self._h.table.idle_resident_lru(exclude={seq.key}) if evict else []
            if not idle:
                return Fit.NO_ROOM
            self.evict(idle[0], self._h.side_events)
        for _attempt in range(3):
            if ctx.state_set(seq.seq_id, state.blob):
                break
            ctx.seq_rm(seq.seq_id, -1, -1)
            # Room enough in total but not in one piece (llama.cpp restores into contiguous
            # cells): another idle tab leaving may free such a run.
            idle = self._h.table.idle_resident_lru(exclude={seq.key}) if evict else []
            if not idle:
                return Fit.FAILED
            self.evict(idle[0], self._h.side_events)
        else:
            return Fit.FAILED
        if ctx.seq_pos_max(seq.seq_id) + 1 != len(state.tokens):
            ctx.seq_rm(seq.seq_id, -1, -1)
            return Fit.FAILED
        seq.tokens = list(state.tokens)
        return Fit.RESTORED

    def free_cells(self, seq: Sequence, leaving: Collection[Sequence] = ()) -> int:
        """Cells ``seq`` may fill (once ``leaving`` are evicted): its own share in a split
        cache; in a unified one, what the other resident sequences do not hold (cells shared
        by a fork are counted twice, so this errs on the side of no room). A recurrent-only
        cache has one state per slot."""
        ctx = self._h.need_ctx()
        if self._h.traits.family is CacheFamily.RECURRENT or not ctx.settings.kv_unified:
            return ctx.n_ctx_seq
        gone = {s.key for s in leaving}
        others = sum(
            len(s.tokens)
            for s in self._h.table.resident()
            if s is not seq and s.seq_id is not None and s.key not in gone
        )
        return max(0, ctx.n_ctx - others)

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
        """After a rebuild: states the new context cannot take become text to re-process
        (each reported with its reason); the sequences that were resident come back, as many
        as there are slots and room (the others stay parked, reported as evicted)."""
        ctx = self._h.need_ctx()
        layout = self._h.layout()
        events = self._h.side_events
        for seq in self._h.table.by_key.values():
            if seq.parked is None:
                continue
            n = len(seq.parked.tokens)
            if seq.parked.layout != layout:
                fate = Fit.INCOMPATIBLE
            elif n >= ctx.n_ctx_seq:
                fate = Fit.TOO_LONG
            else:
                continue
            # seq.tokens already reflects a cut made while parked.
            everything = seq.tokens + seq.pending
            seq.pending = everything if len(everything) < ctx.n_ctx_seq else []
            seq.parked, seq.cut_after_restore = None, None
            seq.report_restore = False
            seq.set_held(0)
            events.append(StateRestored(seq.key, False, fate.reason(n, ctx.n_ctx_seq)))
        slots = {s.key for s in resident[: ctx.n_seq_max]}
        for seq in resident:
            if seq.parked is None:
                continue
            if seq.key in slots:
                # The most recently used first: none of them pushes out one restored before.
                self.ensure_resident(seq, events, protect={seq.key}, evict=False)
            if seq.seq_id is None and seq.parked is not None:
                events.append(Evicted(seq.key))  # parked: restored when next used

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
        seq.reserve = 0
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
