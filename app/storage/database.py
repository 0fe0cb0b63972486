"""The :class:`Database`: one SQLite connection with every storage operation."""

from __future__ import annotations

from pathlib import Path

from app.storage.conversations import ConversationsMixin
from app.storage.library import LibraryMixin
from app.storage.threads import PerThread


class Database(ConversationsMixin, LibraryMixin):
    """The conversation database. Open with :meth:`Database.open`; it serves the thread
    that opened it (see :mod:`app.storage.threads`); every method commits before returning
    unless called inside ``with db.transaction():``."""

    @classmethod
    def per_thread(
        cls, path: Path | None = None, *, read_only: bool = False
    ) -> PerThread[Database]:
        """A connection to ``path`` for each thread that asks (:class:`PerThread`), opened
        with :meth:`open` on that thread's first ``get()``."""
        return PerThread(lambda: cls.open(path, read_only=read_only))
