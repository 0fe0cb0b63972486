"""Conversations, the message tree, tabs and full-text search: the :class:`Database` parts
that hold what users write.

Rooms, each a mixin of :class:`~app.storage._core.DatabaseCore` (or of the one below it):

- :mod:`.rows`: the columns, rows to :class:`~app.storage.models.Message` /
  :class:`~app.storage.models.Conversation` and back (:class:`NewMessage`,
  :func:`insert_message_row`);
- :mod:`.records`: conversations as records (create, rename, pin, soft delete, purge);
- :mod:`.messages`: the message tree (add, thread, branches, delete a branch, fork);
- :mod:`.replies`: a streaming reply (``begin_reply`` / ``update_reply`` /
  ``finish_reply``);
- :mod:`.tabs`: the saved tab bar;
- :mod:`.search`: FTS5 search (:func:`fts_query`, :class:`ConversationMatch`).
"""

from app.storage.conversations.messages import MessagesMixin
from app.storage.conversations.records import (
    TITLE_LENGTH,
    UNSET,
    ConversationRecordsMixin,
    make_title,
)
from app.storage.conversations.replies import RepliesMixin
from app.storage.conversations.rows import MessageRow, NewMessage, insert_message_row, json_dump
from app.storage.conversations.search import (
    PREFIX_MIN_CHARS,
    SEARCH_WINDOW,
    ConversationMatch,
    SearchMixin,
    fts_query,
)
from app.storage.conversations.tabs import TabsMixin

# The name export.py and older branches import.
_json_dump = json_dump


class ConversationsMixin(RepliesMixin, TabsMixin, SearchMixin):
    """Conversations, messages, tabs and search."""


__all__ = [
    "PREFIX_MIN_CHARS",
    "SEARCH_WINDOW",
    "TITLE_LENGTH",
    "UNSET",
    "ConversationMatch",
    "ConversationRecordsMixin",
    "ConversationsMixin",
    "MessageRow",
    "MessagesMixin",
    "NewMessage",
    "RepliesMixin",
    "SearchMixin",
    "TabsMixin",
    "fts_query",
    "insert_message_row",
    "json_dump",
    "make_title",
]
