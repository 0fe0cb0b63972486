"""The saved tab bar: which conversations are open, on which branch, and which is active."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from app.storage._core import DatabaseCore
from app.storage.models import Tab

log = logging.getLogger(__name__)


class TabsMixin(DatabaseCore):
    """``save_tabs`` / ``load_tabs``."""

    def save_tabs(self, tabs: Iterable[Tab], active_conversation_id: int | None) -> None:
        """Replace the saved tab bar (called when it changes and at exit). Tabs whose
        conversation or leaf no longer exists are dropped / reset with a logged warning."""
        with self.transaction() as conn:
            conn.execute("DELETE FROM tabs")
            for position, tab in enumerate(sorted(tabs, key=lambda t: t.position)):
                row = conn.execute(
                    "SELECT deleted_at FROM conversations WHERE id = ?", (tab.conversation_id,)
                ).fetchone()
                if row is None:
                    log.warning("Not saving a tab of missing conversation %d", tab.conversation_id)
                    continue
                leaf = tab.leaf_id
                if leaf is not None:
                    owner = conn.execute(
                        "SELECT conversation_id FROM messages WHERE id = ?", (leaf,)
                    ).fetchone()
                    if owner is None or owner[0] != tab.conversation_id:
                        log.warning(
                            "Tab of conversation %d: unknown leaf %d", tab.conversation_id, leaf
                        )
                        leaf = None
                conn.execute(
                    "INSERT INTO tabs (position, conversation_id, leaf_id, active) VALUES (?, ?, ?, ?)",
                    (
                        position,
                        tab.conversation_id,
                        leaf,
                        int(tab.conversation_id == active_conversation_id),
                    ),
                )

    def load_tabs(self) -> tuple[list[Tab], int | None]:
        """(tabs in order with positions 0..n-1, active conversation id or None); tabs of
        soft-deleted conversations are left out."""
        rows = self._all(
            "SELECT t.conversation_id, t.leaf_id, t.active FROM tabs t"
            " JOIN conversations c ON c.id = t.conversation_id"
            " WHERE c.deleted_at IS NULL ORDER BY t.position"
        )
        tabs = [Tab(row[0], position, row[1]) for position, row in enumerate(rows)]
        active = next((int(row[0]) for row in rows if row[2]), None)
        return tabs, active
