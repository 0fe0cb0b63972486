"""Persistence of conversations' caches: the state store and state files.

An open conversation's cache is restored from the :class:`~app.storage.StateStore` when its
sequence is opened, saved when it is closed, at shutdown, before a model change, and when
the engine evicts it to make room (parked). A client may also save and restore one at a
path of its own (``llamadesk run --save-session``). An engine without
``Capability.STATE_FILES`` keeps nothing: its conversations re-read their text.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from app.engine import RestoreOutcome as EngineRestore
from app.errors import LlamaDeskError
from app.session import commands as cmd
from app.session import events as ev
from app.session.engine_port import Capability, ConversationEngine, Restored, capability_missing
from app.session.outbox import Outbox
from app.session.registry import Conversation, Registry
from app.session.session_thread import on_session_thread
from app.session.types import ConversationId, RestoreOutcome

if TYPE_CHECKING:  # storage is imported only by clients that keep a database
    from app.storage import StateStore

log = logging.getLogger(__name__)

NO_MODEL = "No model is loaded. Load a model in the model manager first."


def keeps_states(engine: ConversationEngine) -> bool:
    return Capability.STATE_FILES in engine.capabilities


class States:
    """See the module docstring."""

    def __init__(self, registry: Registry, outbox: Outbox, store: StateStore | None) -> None:
        self._registry = registry
        self._outbox = outbox
        self._store = store

    @on_session_thread
    def save_one(self, engine: ConversationEngine, conv: Conversation) -> None:
        if self._store is None or conv.key is None or not keeps_states(engine):
            return
        try:
            if not engine.holds_anything(conv.key):
                return
            data = engine.save(conv.key)
        except LlamaDeskError as exc:
            log.warning("could not save the state of conversation %d: %s", conv.cid, exc)
            return
        self._store.put(conv.cid, engine.fingerprint, data)

    @on_session_thread
    def save_all(self) -> None:
        """Every open conversation's state that is not answering (they stay open)."""
        engine = self._registry.live()
        if engine is None or self._store is None:
            return
        for conv in list(self._registry.convs.values()):
            if conv.key is not None and not engine.is_busy(conv.key):
                self.save_one(engine, conv)

    @on_session_thread
    def park(self, engine: ConversationEngine, conv: Conversation) -> None:
        """An evicted sequence's cache goes to its state file (it comes back from there)."""
        saved = False
        if self._store is not None and conv.key is not None and keeps_states(engine):
            try:
                data = engine.parked_state(conv.key)
                if data is not None:
                    saved = self._store.put(conv.cid, engine.fingerprint, data) is not None
            except LlamaDeskError as exc:
                log.warning("could not save the state of conversation %d: %s", conv.cid, exc)
        self._outbox.emit(ev.CacheParked(conv.cid, saved))
        self._outbox.status(conv.cid)

    @on_session_thread
    def restore_stored(
        self, engine: ConversationEngine, conv: Conversation
    ) -> tuple[RestoreOutcome, str | None]:
        """Restore the conversation's state file from the store into its new sequence."""
        key = conv.key
        if self._store is None or key is None or not keeps_states(engine):
            return RestoreOutcome.EMPTY, None
        data = self._store.get(conv.cid, engine.fingerprint)
        if data is None:
            return RestoreOutcome.EMPTY, None
        outcome, reason = restore_into(engine, key, lambda: engine.restore(key, data))
        if outcome is RestoreOutcome.REREAD:
            log.info("state of conversation %d not restored: %s", conv.cid, reason)
        return outcome, reason

    @on_session_thread
    def idle_key(self, cid: ConversationId) -> tuple[ConversationEngine, int]:
        """The engine and the open conversation's sequence, which must not be answering."""
        engine = self._registry.live()
        if engine is None:
            raise LlamaDeskError(NO_MODEL)
        if not keeps_states(engine):
            raise LlamaDeskError(capability_missing(Capability.STATE_FILES))
        conv = self._registry.get(cid)
        if conv is None or conv.key is None:
            raise LlamaDeskError(f"Conversation {cid} is not open.")
        if conv.turn is not None or engine.is_busy(conv.key):
            raise LlamaDeskError("This conversation is still answering.")
        return engine, conv.key

    @on_session_thread
    def save_file(self, command: cmd.SaveStateFile) -> None:
        reply = command.reply
        if not reply.set_running_or_notify_cancel():
            return
        try:
            engine, key = self.idle_key(command.conversation_id)
            size = engine.save_file(key, command.path)
        except LlamaDeskError as exc:
            reply.set_exception(exc)
            return
        reply.set_result(size)


def restore_into(
    engine: ConversationEngine, key: int, restore: Callable[[], Restored]
) -> tuple[RestoreOutcome, str | None]:
    """Run ``restore`` and say truthfully what it did: RESTORED (the cache holds it),
    PARKED (waiting for room, with the reason) or REREAD (refused: the sequence is emptied
    and its text re-read with the next turn)."""
    try:
        restored = restore()
    except LlamaDeskError as exc:
        restored = Restored(EngineRestore.REFUSED, str(exc))
    if restored.outcome is EngineRestore.RESTORED:
        return RestoreOutcome.RESTORED, None
    if restored.outcome is EngineRestore.PARKED:
        return RestoreOutcome.PARKED, restored.reason
    # Refused (other settings, damaged...): the text is re-processed later.
    engine.cut(key)
    return RestoreOutcome.REREAD, restored.reason or "the saved cache could not be used."
