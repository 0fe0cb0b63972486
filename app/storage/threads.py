"""The storage's thread rule, in its one place: a connection serves the thread that opened it.

SQLite connections must not be shared between threads, and a
:class:`~app.storage.Database` enforces it: its connection is opened with
``check_same_thread`` (another thread gets ``sqlite3.ProgrammingError``), and closing it
from another thread leaves it to the garbage collector. So every thread that uses the
database has a connection of its own:

- a job that ends (an export, a scan, a command): ``with Database.open(path) as db:`` on
  its thread, or ``db.clone()`` there for another connection to the file ``db`` has open;
- a thread that serves many calls (a storage worker, a search thread, a pool):
  :class:`PerThread`, which opens one connection on each thread's first :meth:`~PerThread.get`
  and keeps it for that thread, e.g. ``PerThread(db.clone)`` or
  ``Database.per_thread(path)``.

Readers never block writers (WAL); writers wait up to ``BUSY_TIMEOUT_S`` (10 s) for each
other. :class:`~app.storage.StateStore` holds no connection and may be shared.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar


class Closable(Protocol):
    def close(self) -> None: ...


C = TypeVar("C", bound=Closable)


class PerThread(Generic[C]):
    """One connection per thread, made by ``open_connection`` on that thread the first
    time it asks (:meth:`get`) and closed by :meth:`close` on that thread.

    ``open_connection`` runs on the asking thread; an error it raises (a
    :class:`~app.storage.DatabaseOpenError`...) reaches that caller, and the next
    :meth:`get` tries again.
    """

    def __init__(self, open_connection: Callable[[], C]) -> None:
        self._open = open_connection
        self._local = threading.local()

    def get(self) -> C:
        """The calling thread's connection, opened now if it has none."""
        connection: C | None = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._open()
            self._local.connection = connection
        return connection

    def opened(self) -> bool:
        """Whether the calling thread has its connection open."""
        return getattr(self._local, "connection", None) is not None

    def close(self) -> None:
        """Close the calling thread's connection, if it has one (idempotent); the next
        :meth:`get` on this thread opens a new one. Other threads' stay open: each closes
        its own (a connection left open is closed when its thread's storage is collected)."""
        connection: C | None = getattr(self._local, "connection", None)
        self._local.connection = None
        if connection is not None:
            connection.close()
