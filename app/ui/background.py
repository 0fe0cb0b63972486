"""The UI's one way to run work off the GUI thread: Qt's thread pool.

Engine work goes to the session thread (``EngineWorker.call``); everything else the UI
does in the background (a folder scan, a search, an export, a Hub request, binding the
local server) is a job of a :class:`BackgroundJobs`: a ``QThreadPool`` of its own, one
thread by default, so that its jobs run one after another on the same thread (a search's
database connection stays on the thread that opened it; two exports never interleave).

A job reports back to the GUI thread through a signal of an object living there (queued by
Qt); it never touches a widget. Functions that run as jobs say so in their name or their
first line ("on a pool thread").
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from PySide6.QtCore import QThreadPool

log = logging.getLogger(__name__)

Job = Callable[[], None]


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

    def submit(self, job: Job) -> None:
        """Run ``job`` on a pool thread (after the jobs before it, with one thread)."""
        with self._idle:
            self._pending += 1
        self._pool.start(lambda: self._run(job))

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
