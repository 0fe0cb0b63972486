"""The UI's one way to run work off the GUI thread: Qt's thread pool.

Engine work goes to the session thread (``EngineWorker.call``); everything else the UI
does in the background (a folder scan, a search, an export, a Hub request, binding the
local server, a file or keyring write of the MCP settings, an MCP server's connection) is
a job of a :class:`BackgroundJobs`: a ``QThreadPool`` of its own, one thread by default,
so that its jobs run one after another on the same thread (a search's database connection
stays on the thread that opened it; two exports never interleave).

Three ways to hear back, one mechanism underneath:

- :meth:`BackgroundJobs.submit`: the job reports through a signal of an object living on
  the GUI thread (queued by Qt); it never touches a widget.
- :meth:`BackgroundJobs.run`: ``done(result or exception)`` is called on the GUI thread
  (the same queued signal, kept here once rather than in every page).
- :meth:`BackgroundJobs.call`: awaited from a coroutine (replaces ``asyncio.to_thread``,
  whose default executor is a second, unnamed pool nobody waits for at shutdown).

Why the pool and not qasync's loop: the window's asyncio loop is Qt's (qasync), so a
coroutine there runs on the GUI thread and any blocking call in it (a keyring, a file, a
subprocess start) freezes the window; and the tests drive the window with Qt's loop alone.
The MCP SDK is asynchronous, so :mod:`app.ui.mcp_runtime` runs a plain asyncio loop as one
long job of its own pool, and its blocking calls go to that pool's other threads with
:meth:`call`: every thread the window starts is a pool thread with a name.

Functions that run as jobs say so in their name or their first line ("on a pool thread").
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from PySide6.QtCore import QObject, QThreadPool, Signal, Slot

log = logging.getLogger(__name__)

T = TypeVar("T")

Job = Callable[[], None]


class GuiRelay(QObject):
    """Lives on the GUI thread (made there): results cross to it queued."""

    delivered = Signal(object, object)  # (callback, result or exception)

    def __init__(self) -> None:
        super().__init__()
        self.delivered.connect(self._deliver)

    @Slot(object, object)
    def _deliver(self, done: Callable[[Any], None], result: object) -> None:
        try:
            done(result)
        except RuntimeError as exc:  # the widget the callback touches is gone
            log.debug("background result for a closed widget: %s", exc)

    def send(self, done: Callable[[Any], None], result: object) -> None:
        """From any thread: ``done(result)`` on the GUI thread."""
        try:
            self.delivered.emit(done, result)
        except RuntimeError:  # the application is gone
            pass


class BackgroundJobs:
    """Jobs run on a thread pool of ``threads`` threads (1: one after another, always on
    the same thread), named ``name`` in logs and tracebacks."""

    def __init__(self, name: str, threads: int = 1) -> None:
        self.name = name
        self._pool = QThreadPool()
        self._pool.setObjectName(name)
        self._pool.setMaxThreadCount(max(1, threads))
        # Kept while idle: a job's thread-bound resources (a SQLite connection) stay valid
        # for the next job.
        self._pool.setExpiryTimeout(-1)
        # Counted here rather than with QThreadPool.waitForDone, which ends the pool's
        # threads when it returns (the next job would run on a new thread).
        self._pending = 0
        self._idle = threading.Condition()
        self._relay: GuiRelay | None = None  # made by the first run(), on the GUI thread

    def submit(self, job: Job) -> None:
        """Run ``job`` on a pool thread (after the jobs before it, with one thread)."""
        with self._idle:
            self._pending += 1
        self._pool.start(lambda: self._run(job))

    def run(self, fn: Callable[[], T], done: Callable[[T | BaseException], None]) -> None:
        """Called on the GUI thread: ``fn()`` on a pool thread, then ``done`` on the GUI
        thread with its result, or the exception it raised."""
        if self._relay is None:
            self._relay = GuiRelay()
        relay = self._relay

        def job() -> None:  # on a pool thread
            try:
                result: object = fn()
            except Exception as exc:
                result = exc
            relay.send(done, result)

        self.submit(job)

    async def call(self, fn: Callable[[], T]) -> T:
        """Await ``fn()`` run on a pool thread, from a coroutine on any loop."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()

        def settle(result: object, error: BaseException | None) -> None:  # on the loop
            if future.done():  # the awaiting task was cancelled meanwhile
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)  # type: ignore[arg-type]

        def job() -> None:  # on a pool thread
            try:
                result, error = fn(), None
            except Exception as exc:
                result, error = None, exc
            try:
                loop.call_soon_threadsafe(settle, result, error)
            except RuntimeError:  # the loop is closed: nobody waits any more
                pass

        self.submit(job)
        return await future

    def _run(self, job: Job) -> None:  # on a pool thread
        threading.current_thread().name = self.name
        try:
            job()
        except Exception:  # a bug in a job: the pool goes on
            log.exception("background job of %s failed", self.name)
        finally:
            with self._idle:
                self._pending -= 1
                self._idle.notify_all()

    def wait_idle(self, timeout_s: float | None = None) -> bool:
        """Block until every submitted job has run; True if it did within the timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout_s)
