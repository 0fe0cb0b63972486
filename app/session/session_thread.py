"""The session thread: the session layer's one background primitive.

One ``threading.Thread`` per :class:`~app.session.Session` owns the engine and every
conversation's bookkeeping. It takes commands from a queue and, while the engine has work,
steps it, handling queued commands between steps. Work is never run elsewhere (a GUI's
thread pool, an executor): what touches the engine or the conversations runs here.

Which thread runs a function is said in its code: functions of the session's rooms that
must run here are decorated :func:`on_session_thread` (checked while assertions are on), and
the public ``Session`` methods, which may be called from any thread, only queue commands or
take a lock. (Work that is not the engine's runs in its client's own primitive: Qt's
thread pool in the window, ``app/ui/background.py``; the hub's worker, ``app/hub/background.py``.)
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, ParamSpec, Protocol, TypeVar

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")
C = TypeVar("C")
C_contra = TypeVar("C_contra", contravariant=True)

_here = threading.local()  # .session is True on a session thread


def in_session_thread() -> bool:
    """Whether the calling thread is a session thread."""
    return bool(getattr(_here, "session", False))


def on_session_thread(fn: Callable[P, R]) -> Callable[P, R]:
    """Mark ``fn`` as one that runs on the session thread only (it touches the engine or
    the conversations' bookkeeping without a lock); asserted on each call."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        assert in_session_thread(), f"{fn.__qualname__} runs on the session thread only"
        return fn(*args, **kwargs)

    wrapper.__session_thread__ = True  # type: ignore[attr-defined]
    return wrapper


class Worker(Protocol[C_contra]):
    """What the loop drives; every method runs on the session thread."""

    def busy(self) -> bool:
        """Whether the engine has work (a step to take)."""
        ...

    def step(self) -> None: ...

    def settled(self) -> None:
        """The last generation ended: hand out everything still buffered."""
        ...

    def handle(self, command: C_contra) -> None: ...

    def crashed(self) -> None:
        """The loop failed (a bug): leave nothing half-open."""
        ...

    def ended(self) -> None:
        """The thread is about to end (after a shutdown or a crash)."""
        ...


class SessionThread(Generic[C]):
    """The queue and the loop (see the module docstring). ``post``, ``hold`` and ``close``
    may be called from any thread."""

    def __init__(self, worker: Worker[C], name: str) -> None:
        self._worker = worker
        self._queue: queue.SimpleQueue[C] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._holds = 0  # open hold() blocks: no engine step until they end
        self._released = threading.Condition(self._lock)
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def post(self, command: C) -> None:
        self._queue.put(command)

    @contextmanager
    def hold(self) -> Iterator[None]:
        """No engine step while the block runs (commands are still handled)."""
        with self._lock:
            self._holds += 1
        try:
            yield
        finally:
            with self._lock:
                self._holds -= 1
                self._released.notify_all()

    def close(self) -> None:
        """End the loop after the command being handled."""
        self._closed.set()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def join(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def is_alive(self) -> bool:
        return self._thread.is_alive()

    # ---------------------------------------------------------------- the loop

    def _run(self) -> None:
        _here.session = True
        worker = self._worker
        was_busy = False
        try:
            while not self._closed.is_set():
                if worker.busy():
                    was_busy = True
                    self._drain(block=False)
                    self._await_holds()
                    # a command may have closed the session or replaced the engine
                    if not self._closed.is_set() and worker.busy():
                        worker.step()
                    continue
                if was_busy:
                    was_busy = False
                    worker.settled()
                self._drain(block=True)
        except BaseException:  # a bug: say so, and leave nothing half-open
            log.exception("the session thread failed")
            worker.crashed()
            self._closed.set()
        finally:
            worker.ended()

    def _await_holds(self) -> None:
        while not self._closed.is_set():
            with self._lock:
                if not self._holds:
                    return
                self._released.wait(0.01)
            self._drain(block=False)

    def _drain(self, block: bool) -> None:
        while not self._closed.is_set():
            try:
                command = self._queue.get(timeout=0.5) if block else self._queue.get_nowait()
            except queue.Empty:
                return
            block = False
            self._worker.handle(command)
