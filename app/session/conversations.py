"""Conversations and their residency: open (bind to a sequence, restore its cache), close,
fork, policies, and what the session holds for one (a snapshot).

A conversation opened while no model is loaded gets its sequence when one is.
"""

from __future__ import annotations

import logging
import time

from app.errors import LlamaDeskError
from app.session import commands as cmd
from app.session import events as ev
from app.session.engine_port import Capability, ConversationEngine
from app.session.outbox import Outbox
from app.session.registry import Conversation, Registry
from app.session.replies import PartialReplies
from app.session.session_thread import on_session_thread
from app.session.states import States, restore_into
from app.session.streams import Streams
from app.session.types import (
    ContextFullPolicy,
    ConversationId,
    ConversationSnapshot,
    RestoreOutcome,
)

log = logging.getLogger(__name__)


class Conversations:
    """See the module docstring."""

    def __init__(
        self,
        registry: Registry,
        outbox: Outbox,
        states: States,
        streams: Streams,
        replies: PartialReplies,
    ) -> None:
        self._registry = registry
        self._outbox = outbox
        self._states = states
        self._streams = streams
        self._replies = replies

    @on_session_thread
    def open(self, cid: ConversationId, policy: ContextFullPolicy | None) -> None:
        conv = self._registry.conv(cid)
        conv.policy = policy
        self.bind(conv)

    @on_session_thread
    def bind(self, conv: Conversation) -> None:
        """Give the conversation a sequence, restoring its state file when one exists."""
        engine = self._registry.live()
        if engine is None or conv.key is not None:
            return
        self._registry.set_key(conv, engine.open())
        self.apply_policy(conv)
        outcome, reason = self._states.restore_stored(engine, conv)
        self._outbox.emit(ev.CacheRestored(conv.cid, outcome, reason))
        self._streams.deliver(engine, engine.take_events())  # tabs that left to make room
        self._outbox.status(conv.cid)
        # the memory figures ("tokens held") change with a restore: said now, not at the
        # next turn (else they disagree with the tabs that say "restored")
        self._streams.emit_stats(force=True)

    @on_session_thread
    def bind_all(self) -> None:
        for conv in list(self._registry.convs.values()):
            self.bind(conv)

    @on_session_thread
    def apply_policy(self, conv: Conversation) -> None:
        engine = self._registry.live()
        if engine is not None and conv.key is not None:
            engine.set_policy(conv.key, conv.policy)

    @on_session_thread
    def set_policy(self, cid: ConversationId, policy: ContextFullPolicy | None) -> None:
        conv = self._registry.conv(cid)
        conv.policy = policy
        self.apply_policy(conv)

    @on_session_thread
    def set_default_policy(self, policy: ContextFullPolicy) -> None:
        self._registry.default_policy = policy
        engine = self._registry.engine
        if engine is not None:
            engine.set_default_policy(policy)

    @on_session_thread
    def close(self, cid: ConversationId, save: bool) -> None:
        conv = self._registry.get(cid)
        if conv is None:
            return
        engine = self._registry.live()
        if engine is not None and conv.key is not None:
            key = conv.key
            if engine.is_busy(key):
                engine.stop(key)
                while engine.is_busy(key):
                    self._streams.step(engine)  # its TurnFinished (aborted) goes out
            self._streams.flush(conv, time.perf_counter())
            if save:
                self._states.save_one(engine, conv)
            engine.close(key)
        self._replies.end(cid)
        self._registry.forget(cid)
        self._outbox.emit(ev.ConversationClosed(cid))

    @on_session_thread
    def fork(self, command: cmd.ForkConversation) -> None:
        """Open the target with the source's cache up to the fork's messages; an engine
        that cannot fork a cache (or a source that is busy or not open) re-reads the text
        with the target's next turn instead."""
        engine = self._registry.live()
        target = self._registry.conv(command.target)
        target.policy = command.policy
        if engine is None or target.key is not None:
            return
        source = self._registry.get(command.source)
        key: int | None = None
        n = 0
        if (
            Capability.FORK_CACHE in engine.capabilities
            and source is not None
            and source.key is not None
            and not engine.is_busy(source.key)
        ):
            try:
                forked = engine.fork(source.key, command.messages, command.system)
                key, n = forked.key, forked.n_tokens
            except LlamaDeskError as exc:
                log.info("fork without the cache (%s)", exc)
                key, n = None, 0
        if key is None:
            self.bind(target)
        else:
            self._registry.set_key(target, key)
            self.apply_policy(target)
        self._outbox.emit(ev.ConversationForked(target.cid, command.source, n))
        self._outbox.status(target.cid)

    @on_session_thread
    def restore_file(self, command: cmd.RestoreStateFile) -> None:
        """Load a state file into the conversation, opening it if need be."""
        reply = command.reply
        if not reply.set_running_or_notify_cancel():
            return
        cid = command.conversation_id
        try:
            if self._registry.live() is not None:
                self.bind(self._registry.conv(cid))
            engine, key = self._states.idle_key(cid)
            outcome, reason = restore_into(
                engine, key, lambda: engine.restore_file(key, command.path)
            )
            if outcome is RestoreOutcome.REREAD:
                log.info("state file %s not restored: %s", command.path, reason)
        except LlamaDeskError as exc:
            reply.set_exception(exc)
            return
        event = ev.CacheRestored(cid, outcome, reason)
        self._outbox.emit(event)
        self._streams.deliver(engine, engine.take_events())
        self._outbox.status(cid)
        reply.set_result(event)

    @on_session_thread
    def snapshot(self, cid: ConversationId) -> ConversationSnapshot:
        conv = self._registry.get(cid)
        default = self._registry.default_policy
        if conv is None:
            return ConversationSnapshot(cid, open=False, default_policy=default)
        reasoning = conv.last_turn.reasoning if conv.last_turn is not None else None
        engine: ConversationEngine | None = self._registry.live()
        if engine is None or conv.key is None:
            return ConversationSnapshot(
                cid, open=True, policy=conv.policy, default_policy=default, reasoning=reasoning
            )
        view = engine.status(conv.key)
        return ConversationSnapshot(
            cid,
            open=True,
            tokens=engine.tokens(conv.key),
            n_ctx=view.n_ctx,
            resident=view.resident,
            busy=view.busy,
            policy=conv.policy,
            default_policy=default,
            reasoning=reasoning,
        )
