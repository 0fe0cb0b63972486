"""The hub's one background primitive: :class:`HubWorker`, a named daemon thread that runs
the calls submitted to it one after another, in order, each answering with a ``Future``.

Which thread runs what in the hub (function names end in the thread's name):

- the caller's thread (the window's GUI thread, the command line): every public method of
  :class:`~app.hub.download.DownloadManager` and :class:`~app.hub.client.HubClient`. The
  manager's methods only change job records under its lock and hand work to its worker;
  the client's calls block on the network, so a GUI calls them from its own pool.
- the download thread (``llamadesk-downloads``, one per manager): ``*_on_hub_thread``
  functions, which run one job at a time: HEAD, GET with resume, verify, move into the
  library. A running job's events (progress, retries, the end) are emitted from here.
- the hash thread (``llamadesk-sha256``, one per manager): ``*_on_hash_thread``, the
  SHA-256 of the file being downloaded, fed chunk by chunk (hashlib releases the GIL, so
  hashing overlaps the transfer instead of following it).

The threads are daemons, as a download must never keep the program from exiting: an
unfinished file stays as its partial file and the next run continues it. (This is why the
worker is not a ``ThreadPoolExecutor``: the interpreter joins those threads at exit, so a
download in progress would hold the program open until it ended.) ``close`` stops a
worker after the calls already submitted.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

_Call = tuple[Callable[[], object], "Future[object]"]


class HubWorker:
    """One named daemon thread running submitted calls in order (started on first use)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        """Run ``fn`` on this worker's thread after the calls submitted before it; its
        result (or exception) arrives in the returned future."""
        future: Future[T] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError(f"the {self.name} worker is closed")
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            self._calls.put((fn, future))  # type: ignore[arg-type]
        return future

    def close(self, timeout: float | None = None) -> None:
        """Refuse new calls, let the submitted ones run, then end the thread (waiting up to
        ``timeout`` seconds for it; a call still running then ends on its own)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
            self._calls.put(None)
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self) -> None:
        while (call := self._calls.get()) is not None:
            fn, future = call
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn()
            except BaseException as exc:
                future.set_exception(exc)
                if not isinstance(exc, Exception):
                    raise
            else:
                future.set_result(result)
