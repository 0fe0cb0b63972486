"""The :class:`Database`: one SQLite connection with every storage operation."""

from __future__ import annotations

from app.storage.conversations import ConversationsMixin
from app.storage.library import LibraryMixin


class Database(ConversationsMixin, LibraryMixin):
    """The conversation database. Open with :meth:`Database.open`; one per thread
    (:meth:`clone` gives a worker thread its own); every method commits before returning
    unless called inside ``with db.transaction():``."""
