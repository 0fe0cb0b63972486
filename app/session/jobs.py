"""Background jobs that are not engine work (e.g. the model library's folder scan).

The same style as the :class:`~app.session.Session`: a ``threading.Thread`` taking work
from a queue, reporting through callbacks that run on that thread (a GUI marshals them
with a signal). Jobs run one after another; the thread starts with the first job.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

Job = Callable[[], None]


class JobThread:
    """Runs queued jobs one after another on one daemon thread."""

    def __init__(self, name: str = "jobs") -> None:
        self._name = name
        self._queue: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self._cond = threading.Condition()
        self._pending = 0
        self._thread: threading.Thread | None = None

    def submit(self, job: Job) -> None:
        with self._cond:
            self._pending += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
        self._queue.put(job)

    def wait_idle(self, timeout_s: float | None = None) -> bool:
        """Block until every submitted job has run; True if it did within the timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._pending == 0, timeout_s)

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            try:
                job()
            except Exception:  # a bug in a job: the thread goes on
                log.exception("background job failed")
            finally:
                with self._cond:
                    self._pending -= 1
                    self._cond.notify_all()
