"""Saving and restoring sequences (and the whole context) as verified state files.

Everything is checked before llama.cpp sees a blob (envelope, checksums, model
fingerprint, cache layout, size, token ids; see :mod:`app.engine.state_file`). A refused
blob whose token list is trustworthy (same model) becomes text to re-process instead.
"""

from __future__ import annotations

import logging
from typing import Any

from app.engine.errors import EngineError, StateError
from app.engine.events import RestoreOutcome
from app.engine.handles import Handles
from app.engine.prompt_queue import PromptQueue
from app.engine.residency import Fit, Residency
from app.engine.sequence import Sequence
from app.engine.snapshots import Snapshots
from app.engine.state_file import SequenceState

log = logging.getLogger(__name__)


class SavedStates:
    def __init__(
        self,
        handles: Handles,
        snapshots: Snapshots,
        residency: Residency,
        prompts: PromptQueue,
    ) -> None:
        self._h = handles
        self._snapshots = snapshots
        self._residency = residency
        self._prompts = prompts
        self.last_restore_error: str | None = None  # why the last restore was refused

    def save(self, seq: Sequence) -> bytes:
        """The sequence's cache (resident or parked) with our verified header."""
        h = self._h
        if seq.seq_id is None and seq.parked is None:
            # Nothing cached: the tokens alone, to be processed on restore.
            fingerprint = h.need_model().fingerprint
            tokens = list(seq.tokens + seq.pending)
            return SequenceState(fingerprint, h.layout(), [], b"", tokens).to_bytes()
        if seq.seq_id is None and seq.cut_after_restore is None:
            assert seq.parked is not None
            return self._snapshots.with_bookkeeping(seq, seq.parked).to_bytes()
        # A parked state still to be cut is restored first, to save it cut.
        self._residency.ensure_resident(seq, h.side_events)
        if seq.seq_id is None:
            raise StateError("No free sequence slot to save this state from.")
        return self._snapshots.state_of(seq).to_bytes()

    def restore(self, seq: Sequence, data: bytes) -> RestoreOutcome:
        """Load a saved state into ``seq``: RESTORED, PARKED (every slot busy, or busy
        sequences hold the room: kept in the engine until the sequence is used and has room;
        llama.cpp is not asked to restore what cannot fit), or REFUSED (the caller
        re-processes text; ``last_restore_error`` says why)."""
        h = self._h
        self.last_restore_error = None
        fingerprint = h.need_model().fingerprint
        try:
            state = SequenceState.from_bytes(data)
            same_model = state.model_fingerprint == fingerprint
            if same_model:
                self._prompts.check_tokens(state.tokens + state.pending)
        except EngineError as exc:  # StateError, or token ids this vocabulary lacks
            self.last_restore_error = str(exc)
            log.warning("refused a saved state: %s", exc)
            return RestoreOutcome.REFUSED
        self._residency.forget(seq)
        seq.n_keep = state.n_keep
        seq.n_dropped = int(state.extra.get("n_dropped", 0))
        fits = len(state.tokens) + len(state.pending) < h.n_ctx_seq
        try:
            state.check_compatible(fingerprint, h.layout())
        except StateError as exc:
            return self._refused(seq, state, str(exc), same_model and fits)
        if not state.blob:
            return self._refused(seq, state, "The saved state holds no cache data.", fits)
        if len(state.tokens) >= h.n_ctx_seq:
            why = Fit.TOO_LONG.reason(len(state.tokens), h.n_ctx_seq)
            return self._refused(seq, state, why, False)
        self._residency.ensure_resident(seq, h.side_events, protect={seq.key})
        outcome = RestoreOutcome.RESTORED
        why_parked = (
            "Every resident slot is busy: it is restored when this conversation is next used."
        )
        if seq.seq_id is not None:
            why_parked = Fit.NO_ROOM.reason(len(state.tokens))
            # Idle tabs leave for their parked state to make room (restoring them later
            # costs far less than re-reading this one); busy ones keep their cells.
            fate = self._residency.restore_into(seq, state)
            if fate is Fit.NO_ROOM:
                seq.seq_id = None  # the slot goes back: nothing of it is in the cache
            elif fate is not Fit.RESTORED:
                return self._refused(seq, state, fate.reason(len(state.tokens)), fits)
        if seq.seq_id is None:
            # Every slot is busy, or the cache has no room while the others hold theirs:
            # restored (or, failing that, re-read and reported) when the sequence is used.
            seq.parked = state
            seq.tokens = list(state.tokens)
            seq.report_restore = True
            outcome = RestoreOutcome.PARKED
            self.last_restore_error = why_parked
        seq.pending = list(state.pending)
        self._snapshots.adopt_checkpoints(seq, state)
        return outcome

    def _refused(
        self, seq: Sequence, state: SequenceState, why: str, requeue: bool
    ) -> RestoreOutcome:
        self.last_restore_error = why
        if requeue:
            seq.pending = list(state.tokens + state.pending)
        return RestoreOutcome.REFUSED

    # ------------------------------------------------------------ the whole context

    def _context_layout(self) -> dict[str, Any]:
        ctx = self._h.need_ctx()
        return {**self._h.layout(), "n_ctx": ctx.n_ctx, "n_seq_max": ctx.n_seq_max}

    def save_context(self) -> bytes:
        """Every resident sequence at once (``llama_state_get_data``) with our header."""
        h = self._h
        seqs = {
            str(s.key): {
                "seq_id": s.seq_id,
                "tokens": s.tokens,
                "pending": s.pending,
                "n_keep": s.n_keep,
            }
            for s in h.table.resident()
        }
        state = SequenceState(
            h.need_model().fingerprint,
            self._context_layout(),
            [],
            h.need_ctx().full_state_get(),
            extra={"sequences": seqs},
        )
        return state.to_bytes()

    def restore_context(self, data: bytes) -> list[int]:
        """Replace every sequence by a whole-context save's; returns their keys.

        Everything is validated before any open sequence is touched; on failure the
        engine is left as it was (or, if llama.cpp refuses the blob itself, empty).
        """
        h = self._h
        ctx = h.need_ctx()
        model = h.need_model()
        state = SequenceState.from_bytes(data)
        state.check_compatible(model.fingerprint, self._context_layout())
        entries = []
        try:
            raw = state.extra.get("sequences", {})
            for info in raw.values():
                seq_id, n_keep = int(info["seq_id"]), int(info["n_keep"])
                tokens, pending = list(info["tokens"]), list(info["pending"])
                entries.append((seq_id, tokens, pending, n_keep))
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise StateError("The saved context's list of sequences is damaged.") from exc
        ids = [e[0] for e in entries]
        if len(set(ids)) != len(ids) or any(not 0 <= i < ctx.n_seq_max for i in ids):
            raise StateError("The saved context names sequence ids this context does not have.")
        for _, tokens, pending, n_keep in entries:
            if not all(isinstance(t, int) and model.valid_token(t) for t in tokens + pending):
                raise StateError("The saved context holds token ids this model does not have.")
            if len(tokens) >= ctx.n_ctx_seq or not 0 <= n_keep <= len(tokens):
                raise StateError("The saved context does not fit this context.")
        for key in list(h.table.by_key):
            self._residency.close(key)
        if not ctx.full_state_set(state.blob):
            ctx.clear()
            raise StateError("llama.cpp refused the saved context.")
        if any(ctx.seq_pos_max(seq_id) + 1 != len(tokens) for seq_id, tokens, _, _ in entries):
            ctx.clear()
            raise StateError("The saved context's cache does not match its token lists.")
        keys = []
        for seq_id, tokens, pending, n_keep in entries:
            seq = h.table.open()
            seq.seq_id, seq.tokens, seq.pending, seq.n_keep = seq_id, tokens, pending, n_keep
            keys.append(seq.key)
        return keys
