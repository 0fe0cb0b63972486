"""Full-text search over messages (SQLite FTS5, bm25-ranked): any user text is safe."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import cast

from app.storage._core import DatabaseCore
from app.storage._snippet import has_all_terms, make_snippet, query_terms
from app.storage.models import DEFAULT_TITLE, Role, SearchHit

SEARCH_WINDOW = 10_000
"""Above this many matching messages, only the most recent ones are ranked."""
PREFIX_MIN_CHARS = 2
"""The shortest last word that also matches as a prefix."""


def _query_words(text: str) -> list[str]:
    # NUL ends an FTS5 string early; control characters are never part of a word anyway.
    text = "".join(" " if unicodedata.category(ch) == "Cc" else ch for ch in text)
    words = [w for w in re.split(r"\s+", text.strip()) if w]
    # Words without any letter or digit tokenize to nothing; drop them (else nothing matches).
    return [w for w in words if any(ch.isalnum() for ch in w)]


def _prefix_last(words: list[str]) -> bool:
    # A one-character prefix matches so many words that ranking them is slow and useless.
    return bool(words) and len(words[-1]) >= PREFIX_MIN_CHARS


def fts_query(text: str) -> str | None:
    """User text -> a safe FTS5 query: every word is a quoted phrase (so ``"``, ``*``,
    ``AND``, ``:``... are just text); all words must match; the last one also matches as a
    prefix (if it has at least two characters) so that search-as-you-type finds "llam" in
    "llama". None when there is no word."""
    words = _query_words(text)
    if not words:
        return None
    quoted = ['"' + w.replace('"', '""') + '"' for w in words]
    if _prefix_last(words):
        quoted[-1] += " *"
    return " ".join(quoted)


@dataclass(frozen=True, slots=True)
class ConversationMatch:
    """A conversation found by :meth:`SearchMixin.search_conversations`: its
    best-ranked matching message (``hit``) and how many of its messages match."""

    hit: SearchHit
    matches: int


class SearchMixin(DatabaseCore):
    """``search`` (messages) and ``search_conversations`` (one result per conversation)."""

    def _search_floor(self, query: str) -> int:
        """The lowest message id worth ranking for ``query``. bm25 costs about 1-2 us per
        matching message; a word in most of 100,000 messages would take ~150 ms. So when
        more than SEARCH_WINDOW messages match, only the most recent SEARCH_WINDOW of them
        are ranked (for such common words bm25 hardly discriminates anyway, and recent
        conversations are what people look for)."""
        row = self._maybe_one(
            "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?"
            " ORDER BY rowid DESC LIMIT 1 OFFSET ?",
            (query, SEARCH_WINDOW),
        )
        return int(row[0]) if row is not None else 0

    def search(
        self,
        text: str,
        limit: int = 50,
        *,
        marks: tuple[str, str] = ("[", "]"),
        include_archived: bool = True,
    ) -> list[SearchHit]:
        """Full-text search over all messages of conversations not deleted, best first.
        Any user text is safe (FTS syntax is quoted); every word must occur, the last one
        may be a prefix. ``marks`` surround the matches in the snippet."""
        query = fts_query(text)
        if query is None or limit <= 0:
            return []
        floor = self._search_floor(query)
        archived = "" if include_archived else " AND c.archived = 0"
        fetch = limit * 2 + 20
        while True:
            ranked = self._all(
                "SELECT rowid, bm25(messages_fts) AS score FROM messages_fts"
                " WHERE messages_fts MATCH ? AND rowid >= ? ORDER BY score LIMIT ?",
                (query, floor, fetch),
            )
            if not ranked:
                return []
            ids = [int(row[0]) for row in ranked]
            info = {
                int(row[0]): row
                for row in self._all(
                    "SELECT m.id, m.conversation_id, c.title, m.role, m.created_at, m.content"
                    " FROM messages m CROSS JOIN conversations c ON c.id = m.conversation_id"
                    f" WHERE m.id IN ({','.join('?' * len(ids))})"
                    f" AND c.deleted_at IS NULL{archived}",
                    ids,
                )
            }
            kept = [(int(row[0]), float(row[1])) for row in ranked if int(row[0]) in info]
            if len(kept) >= limit or len(ranked) < fetch:
                break
            fetch *= 4  # many hits were in deleted/archived conversations: look further
        kept = kept[:limit]
        words = _query_words(text)
        terms = query_terms(words)
        prefix = _prefix_last(words)
        hits = []
        for mid, score in kept:
            row = info[mid]
            hits.append(
                SearchHit(
                    conversation_id=int(row["conversation_id"]),
                    message_id=mid,
                    title=row["title"] or DEFAULT_TITLE,
                    role=cast(Role, row["role"]),
                    snippet=make_snippet(row["content"], terms, prefix, marks),
                    rank=score,
                    created_at=float(row["created_at"]),
                )
            )
        return hits

    def search_conversations(
        self,
        text: str,
        limit: int = 50,
        *,
        marks: tuple[str, str] = ("[", "]"),
        include_archived: bool = True,
    ) -> list[ConversationMatch]:
        """Like :meth:`search`, but one result per conversation (the sidebar's list): its
        best-ranked message and the number of its messages that match, best first. The
        same query rules and the same SEARCH_WINDOW cap on what is ranked."""
        query = fts_query(text)
        if query is None or limit <= 0:
            return []
        floor = self._search_floor(query)
        archived = "" if include_archived else " AND c.archived = 0"
        # Ranking and picking the best per conversation in one statement: the content of
        # only the kept messages is read (for their snippets), not of every match.
        rows = self._all(
            "WITH ranked AS (SELECT rowid AS id, bm25(messages_fts) AS score"
            "  FROM messages_fts WHERE messages_fts MATCH ? AND rowid >= ?),"
            " scored AS (SELECT r.id, r.score, m.conversation_id,"
            "  row_number() OVER (PARTITION BY m.conversation_id ORDER BY r.score, r.id DESC)"
            "   AS n,"
            "  count(*) OVER (PARTITION BY m.conversation_id) AS matches"
            "  FROM ranked r JOIN messages m ON m.id = r.id"
            "  JOIN conversations c ON c.id = m.conversation_id"
            f"  WHERE c.deleted_at IS NULL{archived})"
            " SELECT s.id, s.score, s.matches, s.conversation_id, c.title, m.role,"
            "  m.created_at, m.content"
            " FROM scored s JOIN messages m ON m.id = s.id"
            " JOIN conversations c ON c.id = s.conversation_id"
            " WHERE s.n = 1 ORDER BY s.score, s.id DESC LIMIT ?",
            (query, floor, limit),
        )
        words = _query_words(text)
        terms = query_terms(words)
        prefix = _prefix_last(words)
        found = [
            ConversationMatch(
                SearchHit(
                    conversation_id=int(row["conversation_id"]),
                    message_id=int(row["id"]),
                    title=row["title"] or DEFAULT_TITLE,
                    role=cast(Role, row["role"]),
                    snippet=make_snippet(row["content"], terms, prefix, marks),
                    rank=float(row["score"]),
                    created_at=float(row["created_at"]),
                ),
                int(row["matches"]),
            )
            for row in rows
        ]
        # A chat is also found by its title (a renamed one above all): those come first.
        titled = self._title_matches(terms, prefix, include_archived, limit)
        by_title = {m.hit.conversation_id: m for m in found if m.hit.conversation_id in titled}
        for cid in titled:
            if cid not in by_title:
                hit = self._first_message_hit(cid, terms, prefix, marks)
                if hit is not None:
                    by_title[cid] = ConversationMatch(hit, 0)
        first = [by_title[cid] for cid in titled if cid in by_title]
        rest = [m for m in found if m.hit.conversation_id not in by_title]
        return (first + rest)[:limit]

    def _title_matches(
        self, terms: list[str], prefix: bool, include_archived: bool, limit: int
    ) -> list[int]:
        """Conversations whose title holds every query term, most recently updated first."""
        archived = "" if include_archived else " AND archived = 0"
        rows = self._all(
            "SELECT id, title FROM conversations WHERE deleted_at IS NULL"
            f" AND title_source != 'default'{archived} ORDER BY updated_at DESC",
            (),
        )
        matched = [int(r["id"]) for r in rows if has_all_terms(r["title"] or "", terms, prefix)]
        return matched[:limit]

    def _first_message_hit(
        self, conversation_id: int, terms: list[str], prefix: bool, marks: tuple[str, str]
    ) -> SearchHit | None:
        row = self._maybe_one(
            "SELECT m.id, m.role, m.created_at, m.content, c.title FROM messages m"
            " JOIN conversations c ON c.id = m.conversation_id"
            " WHERE m.conversation_id = ? ORDER BY m.id LIMIT 1",
            (conversation_id,),
        )
        if row is None:
            return None  # an empty chat is not listed
        return SearchHit(
            conversation_id=conversation_id,
            message_id=int(row["id"]),
            title=row["title"] or DEFAULT_TITLE,
            role=cast(Role, row["role"]),
            snippet=make_snippet(row["content"], terms, prefix, marks),
            rank=0.0,
            created_at=float(row["created_at"]),
        )
