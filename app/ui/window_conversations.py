"""The main window's conversations: rename, pin, delete with Undo, search results, transfers."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from app.errors import LlamaDeskError
from app.ui.door import library, settle
from app.ui.export_import import TransferOutcome

if TYPE_CHECKING:
    from app.ui.window_protocols import ConversationsWindow

DELETE_BATCH_S = 1.0  # deletes this close together are one Undo
PURGE_AFTER_S = 7 * 86400  # deleted conversations are purged for good after a week


class WindowConversations:
    """What the sidebar asks of ``win`` about its conversations."""

    def __init__(self, win: ConversationsWindow) -> None:
        self.win = win
        self._undo_ids: list[int] = []
        self._last_delete_at = 0.0

    def connect_sidebar(self) -> None:
        win = self.win
        sidebar = win.sidebar
        sidebar.openRequested.connect(win.open_conversation)
        sidebar.renameRequested.connect(self.rename)
        sidebar.pinRequested.connect(self.pin)
        sidebar.deleteRequested.connect(win.delete_conversation)
        sidebar.newRequested.connect(win.new_tab)
        sidebar.matchOpened.connect(self.show_match)
        # export/import results go to the message bar (seen also when the list is hidden)
        sidebar.transfers.finished.connect(self.on_transfer_finished)
        sidebar.transfer_notices = False

    def rename(self, conversation_id: int, title: str) -> None:
        win = self.win
        try:
            settle(library(win.session).rename(conversation_id, title))
        except LlamaDeskError as exc:
            win.show_message(str(exc))
        tab = win.tab_for(conversation_id)
        if tab is not None:
            tab.reload_conversation()
        win.sidebar.schedule_refresh()

    def pin(self, conversation_id: int, pinned: bool) -> None:
        win = self.win
        try:
            settle(library(win.session).set_pinned(conversation_id, pinned))
        except LlamaDeskError as exc:
            win.show_message(str(exc))
        win.sidebar.refresh()

    def delete_conversation(self, conversation_id: int) -> None:
        win = self.win
        try:
            title = settle(library(win.session).conversation(conversation_id)).title or "New chat"
        except LlamaDeskError as exc:
            win.show_message(str(exc))
            return
        tab = win.tab_for(conversation_id)
        if tab is not None:
            # not close_tab: that deletes an empty conversation for good (no Undo)
            win.remove_tab(tab)
            win.update_stack()
            win.schedule_save_tabs()
        try:
            settle(library(win.session).delete(conversation_id))
        except LlamaDeskError as exc:
            win.show_message(str(exc))
            return
        win.sidebar.refresh()
        # Deletes of a multi-selection arrive one by one: one Undo brings them all back.
        now = time.monotonic()
        if now - self._last_delete_at > DELETE_BATCH_S or not win.message_bar.text():
            self._undo_ids = []
        self._last_delete_at = now
        self._undo_ids.append(conversation_id)
        ids = list(self._undo_ids)
        win.message_bar.show_message(
            f"Deleted “{title}”." if len(ids) == 1 else f"Deleted {len(ids)} conversations.",
            error=False,
            action=("Undo", lambda: self.undo_delete(ids)),
            timeout_ms=15000,
        )

    def undo_delete(self, conversation_ids: list[int]) -> None:
        win = self.win
        self._undo_ids = []
        for conversation_id in conversation_ids:
            try:
                settle(library(win.session).restore(conversation_id))
            except LlamaDeskError as exc:
                win.show_message(str(exc))
                return
        win.sidebar.refresh()
        if len(conversation_ids) == 1:  # a selection comes back to the list, not as tabs
            win.open_conversation(conversation_ids[0])

    def show_match(self, conversation_id: int, message_id: int) -> None:
        """A search result was opened: show its message, switching to its branch if needed."""
        win = self.win
        tab = win.tab_for(conversation_id)
        if tab is None:
            return
        if tab.view.widget_for(message_id) is None and not tab.generating:
            try:
                leaf = settle(library(win.session).show_branch(conversation_id, message_id))
            except LlamaDeskError as exc:
                win.show_message(str(exc))
                return
            tab.load_thread(leaf)
        widget = tab.view.widget_for(message_id)
        if widget is not None:
            tab.view.follow = False
            tab.view.ensureWidgetVisible(widget, 0, 40)

    def on_transfer_finished(self, outcome: object) -> None:
        if isinstance(outcome, TransferOutcome):
            self.win.show_message(outcome.message, error=outcome.error)
