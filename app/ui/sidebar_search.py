"""The sidebar's full-text search.

Search runs on a background thread: on a 10,000-message database a common word takes
~18 ms (benchmarks/bench_search.py, "sidebar_search"), more than a frame. Typing is
debounced, and the result of a search that is no longer the latest is dropped.

:class:`Searcher` runs each query on the sidebar's pool thread (one, the same for every
query: :class:`~app.ui.background.BackgroundJobs`), on a connection of its own;
:class:`SearchBridge` queues its :class:`SearchResult` back to the GUI thread.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from app.errors import LlamaDeskError
from app.storage import Database
from app.ui.sidebar_model import SEARCH_MARKS, Row

log = logging.getLogger(__name__)

SEARCH_LIMIT = 50  # conversations listed for a search


@dataclass(frozen=True)
class SearchResult:
    generation: int
    rows: tuple[Row, ...]
    error: str | None = None


class SearchBridge(QObject):
    found = Signal(object)  # a SearchResult, queued to the GUI thread


class Searcher:
    """Runs searches on the pool thread, on its own connection (opened on first use, closed
    by :meth:`close`, both on that thread: SQLite connections stay in their thread)."""

    def __init__(self, path: Path, read_only: bool, bridge: SearchBridge) -> None:
        self._path = path
        self._read_only = read_only
        self._bridge = bridge
        self._db: Database | None = None
        self.latest = 0  # written by the GUI thread: searches older than this are skipped

    def run(self, generation: int, text: str) -> None:
        if generation != self.latest:
            return  # superseded while queued: do not spend the query
        try:
            if self._db is None:
                self._db = Database.open(self._path, read_only=self._read_only)
            found = self._db.search_conversations(text, SEARCH_LIMIT, marks=SEARCH_MARKS)
            rows = tuple(
                Row(
                    m.hit.conversation_id,
                    m.hit.title,
                    " ".join(m.hit.snippet.split()),
                    False,
                    m.hit.message_id,
                    detail=f"{m.matches} matches" if m.matches > 1 else "",
                )
                for m in found
            )
            result = SearchResult(generation, rows)
        except LlamaDeskError as exc:
            result = SearchResult(generation, (), str(exc))
        except Exception as exc:  # a bug: say so in the list rather than stay silent
            log.exception("sidebar search failed")
            result = SearchResult(generation, (), f"The search failed unexpectedly: {exc}")
        try:
            self._bridge.found.emit(result)
        except RuntimeError:  # the sidebar is gone
            pass

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
