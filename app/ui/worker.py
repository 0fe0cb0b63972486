"""The Qt side of the session: session events become signals on the GUI thread.

The :class:`~app.session.Session` (Qt-free) owns the engine on its own thread and calls
its subscribers there. :class:`EngineWorker` is the thin adapter: it subscribes, and
re-emits each event through a signal of an object living on the GUI thread, so Qt queues
it there. Each chat tab connects its own conversation's :class:`ConversationStream`
(``worker.stream(conversation_id)``); the window connects ``sessionEvent`` (model loaded,
memory figures...). Nobody relays another object's events. Commands go straight to the
session (``worker.session``): its methods only enqueue.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, TypeVar

from PySide6.QtCore import QObject, Signal, Slot

from app.session import Session
from app.session import events as ev
from app.storage import Database, StateStore

if TYPE_CHECKING:
    from app.engine import Engine
    from app.session.engine_port import EngineLoader

T = TypeVar("T")

# How long a thread may hold the GIL while another waits for it (seconds).
GIL_SWITCH_INTERVAL_S = 0.001


class ConversationStream(QObject):
    """One conversation's events, delivered on the GUI thread."""

    received = Signal(object)  # an app.session.events.ConversationEvent


class EngineWorker(QObject):
    """See the module docstring."""

    sessionEvent = Signal(object)  # an app.session.events.SessionEvent
    conversationEvent = Signal(object)  # every conversation's events (observers: tests, benchmarks)
    _called = Signal(object, object)  # (callback, result or exception), to the GUI thread

    def __init__(
        self,
        store: StateStore | None,
        database: Database | None = None,
        loader: EngineLoader | None = None,  # None: local files only
        library_database: Database | None = None,  # the conversations' rows (default: database)
    ) -> None:
        super().__init__(None)
        # The session's Python work between decodes holds the GIL; by default a thread
        # waiting for it (the GUI) may wait 5 ms per switch, which adds up to dropped
        # frames. 1 ms keeps the GUI's waits short at a negligible cost.
        sys.setswitchinterval(min(sys.getswitchinterval(), GIL_SWITCH_INTERVAL_S))
        if loader is None:
            from app.offload_loader import OffloadLoader  # remote devices in a child (issue 22)

            loader = OffloadLoader()
        self.session = Session(
            store, database, name="engine", loader=loader, library_database=library_database
        )
        self._streams: dict[int, tuple[ConversationStream, Callable[[], None]]] = {}
        self._unsubscribe = self.session.subscribe_session(self._on_session_event)
        self._called.connect(self._deliver)

    def call(self, fn: Callable[[Engine], T], done: Callable[[T | BaseException], None]) -> None:
        """Run ``fn(engine)`` on the session thread; ``done`` gets its result (or the
        exception it raised, :class:`~app.session.NoModelError` without a model) on the GUI
        thread. For short work: every conversation waits meanwhile."""
        self.when_done(self.session.call(fn), done)

    def when_done(self, future: Future[T], done: Callable[[T | BaseException], None]) -> None:
        """``done`` gets the future's result (or its exception) on the GUI thread: a
        session future completes on the session thread, where no widget may be touched."""

        def relay(f: Future[T]) -> None:  # on the thread that completed it
            error = f.exception()
            self._called.emit(done, error if error is not None else f.result())

        future.add_done_callback(relay)

    @Slot(object, object)
    def _deliver(self, done: Callable[[Any], None], result: object) -> None:
        done(result)

    def stream(self, conversation_id: int) -> ConversationStream:
        """The conversation's event stream (created on first use; GUI thread)."""
        entry = self._streams.get(conversation_id)
        if entry is None:
            stream = ConversationStream(self)
            unsubscribe = self.session.subscribe(conversation_id, self._forwarder(stream))
            entry = self._streams[conversation_id] = (stream, unsubscribe)
        return entry[0]

    def release(self, conversation_id: int) -> None:
        """Stop delivering the conversation's events (its tab closed)."""
        entry = self._streams.pop(conversation_id, None)
        if entry is not None:
            stream, unsubscribe = entry
            unsubscribe()
            stream.deleteLater()

    def _forwarder(self, stream: ConversationStream) -> Callable[[ev.ConversationEvent], None]:
        def forward(event: ev.ConversationEvent) -> None:  # on the session thread
            stream.received.emit(event)
            self.conversationEvent.emit(event)

        return forward

    def _on_session_event(self, event: ev.SessionEvent) -> None:  # on the session thread
        self.sessionEvent.emit(event)

    def shutdown(self) -> None:
        """Stop everything, save, free the engine; ``ShutdownComplete`` follows."""
        self.session.shutdown()

    def join(self, timeout_s: float) -> bool:
        """Wait for the session thread to end (after ``ShutdownComplete``)."""
        ok = self.session.join(timeout_s)
        self._unsubscribe()
        for cid in list(self._streams):
            self.release(cid)
        return ok
