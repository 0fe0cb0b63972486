"""Where a session's events go: each conversation's subscribers, and the session's own.

Subscribing is thread-safe; events are handed out on the session thread (a GUI marshals
them). A subscriber that raises is logged and the others still get the event.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from app.errors import LlamaDeskError
from app.session import events as ev
from app.session.registry import Registry
from app.session.session_thread import on_session_thread
from app.session.types import ConversationId, FinishReason, TurnId, TurnResult

log = logging.getLogger(__name__)

ConversationCallback = Callable[[ev.ConversationEvent], None]
SessionCallback = Callable[[ev.SessionEvent], None]
TurnEnded = Callable[[ConversationId, TurnId, TurnResult], None]


class Outbox:
    """See the module docstring."""

    def __init__(self, registry: Registry) -> None:
        self._registry = registry
        self._lock = threading.Lock()
        self._subscribers: dict[ConversationId, list[ConversationCallback]] = {}
        self._session_subscribers: list[SessionCallback] = []
        # told of every turn's end before its subscribers are (the recorder writes it first)
        self.turn_ended: list[TurnEnded] = []

    # ---------------------------------------------------------------- any thread

    def subscribe(self, cid: ConversationId, callback: ConversationCallback) -> Callable[[], None]:
        with self._lock:
            self._subscribers.setdefault(cid, []).append(callback)

        def unsubscribe() -> None:
            with self._lock:
                callbacks = self._subscribers.get(cid, [])
                if callback in callbacks:
                    callbacks.remove(callback)
                if not callbacks:
                    self._subscribers.pop(cid, None)

        return unsubscribe

    def subscribe_session(self, callback: SessionCallback) -> Callable[[], None]:
        with self._lock:
            self._session_subscribers.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._session_subscribers:
                    self._session_subscribers.remove(callback)

        return unsubscribe

    # ---------------------------------------------------------------- session thread

    def emit(self, event: ev.ConversationEvent) -> None:
        with self._lock:
            callbacks = list(self._subscribers.get(event.conversation_id, ()))
        for callback in callbacks:
            try:
                callback(event)
            except Exception:
                log.exception("a subscriber of conversation %d failed", event.conversation_id)

    def emit_session(self, event: ev.SessionEvent) -> None:
        with self._lock:
            callbacks = list(self._session_subscribers)
        for callback in callbacks:
            try:
                callback(event)
            except Exception:
                log.exception("a session subscriber failed")

    @on_session_thread
    def status(self, cid: ConversationId) -> None:
        """The conversation's context meter and residency (when it has a sequence)."""
        engine = self._registry.live()
        conv = self._registry.get(cid)
        if engine is None or conv is None or conv.key is None:
            return
        try:
            view = engine.status(conv.key)
        except LlamaDeskError:
            return
        self.emit(
            ev.SequenceStatus(
                cid,
                view.n_tokens,
                view.n_ctx,
                view.resident,
                view.busy,
                view.generating,
                n_reserved=view.n_reserved,
                n_dropped=view.n_dropped,
            )
        )

    def fail_turn(self, cid: ConversationId, turn: TurnId, message: str, aborted: bool) -> None:
        """A turn that did not run: its failure (unless the user stopped it), then its end."""
        if not aborted:
            self.emit(ev.TurnFailed(cid, message))
        reason = FinishReason.ABORTED if aborted else FinishReason.ERROR
        self.finish_turn(
            cid, turn, TurnResult(finish_reason=reason, error=None if aborted else message)
        )

    def finish_turn(self, cid: ConversationId, turn: TurnId, result: TurnResult) -> None:
        """A turn ended: whoever records it, then the conversation's subscribers."""
        for told in self.turn_ended:
            try:
                told(cid, turn, result)
            except Exception:
                log.exception("recording the end of a turn of conversation %d failed", cid)
        self.emit(ev.TurnFinished(cid, turn, result))
