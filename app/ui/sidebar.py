"""The conversation sidebar: every saved conversation grouped by date (Pinned, Today,
Yesterday, Previous 7 days, Previous 30 days, then by month), the current chat
highlighted, full-text search (one row per chat, jumping to the best match), rename (F2 or
the context menu), pin, delete (the Delete key too; the window offers Undo), multi-selection
(Ctrl/Shift) for delete and export, and export/import (:mod:`app.ui.export_import`).

Its parts: the rows, date groups and Qt model in :mod:`app.ui.sidebar_model`, the painting
(headers, pin, accent, snippets) in :mod:`app.ui.sidebar_paint`, the list view in
:mod:`app.ui.sidebar_view`, the background search in :mod:`app.ui.sidebar_search`.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

from PySide6.QtCore import (
    QEvent,
    QItemSelection,
    QItemSelectionModel,
    QModelIndex,
    QObject,
    QPoint,
    Qt,
    QTimer,
    Signal,
    Slot,
)
from PySide6.QtGui import QKeyEvent, QPalette
from PySide6.QtWidgets import QAbstractItemView, QLabel, QLineEdit, QMenu, QVBoxLayout, QWidget

from app.errors import LlamaDeskError
from app.session.library import Library
from app.storage import Database
from app.storage.export import ExportFormat
from app.ui.background import BackgroundJobs
from app.ui.door import settle
from app.ui.export_import import ConversationTransfers, TransferOutcome
from app.ui.sidebar_model import (
    PINNED,
    PREVIOUS_7,
    PREVIOUS_30,
    TODAY,
    UNUSED_TEXT,
    YESTERDAY,
    ConversationListModel,
    CurrentRole,
    IdRole,
    MessageIdRole,
    PinnedRole,
    Row,
    age,
    date_group,
    split_marks,
    with_headers,
)
from app.ui.sidebar_paint import RowDelegate, pin_icon
from app.ui.sidebar_search import SearchBridge, Searcher, SearchResult
from app.ui.sidebar_view import ConversationView
from app.ui.theme import colors

# The Sidebar, and the names the tests have always imported from here.
__all__ = [
    "PINNED",
    "PREVIOUS_7",
    "PREVIOUS_30",
    "TODAY",
    "YESTERDAY",
    "CurrentRole",
    "Sidebar",
    "date_group",
    "split_marks",
]

NOTICE_MS = 10_000  # how long a success notice (export/import) stays
BACKGROUND_REFRESH_MS = 1000  # a change made elsewhere (an API client) is listed within this


class Sidebar(QWidget):
    """See the module docstring. ``now`` is the clock for the date groups (tests fix it)."""

    openRequested = Signal(int)  # conversation id
    # A search result was opened: (conversation id, id of its best matching message),
    # emitted right after openRequested for the same conversation.
    matchOpened = Signal(int, int)
    renameRequested = Signal(int, str)
    pinRequested = Signal(int, bool)
    deleteRequested = Signal(int)  # once per conversation of a multi-selection
    newRequested = Signal()
    searchFinished = Signal()  # search results (or a search error) are shown

    def __init__(
        self,
        db: Database,
        parent: QWidget | None = None,
        *,
        now: Callable[[], float] = time.time,
        door: Library | None = None,
    ) -> None:
        super().__init__(parent)
        self.db = db
        # The window's: the list is read through the session's library (off this thread).
        self._door = door
        self.now = now
        self._current: int | None = None
        self._empty_listed: int | None = None  # an empty chat listed because it is current
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 0, 6)
        self.search = QLineEdit()
        self.search.setObjectName("search")
        self.search.setPlaceholderText("Search conversations (Ctrl+F)")
        self.search.setClearButtonEnabled(True)
        layout.addWidget(self.search)
        self.model = ConversationListModel(self)
        self.model.renamed.connect(self.renameRequested)
        self.view = ConversationView()
        self.view.setObjectName("conversations")
        self.view.setModel(self.model)
        self.view.setItemDelegate(RowDelegate(self.view))
        self.view.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.view.setEditTriggers(QAbstractItemView.EditTrigger.EditKeyPressed)
        self.view.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.view.customContextMenuRequested.connect(self._menu)
        self.view.activated.connect(self._activated)
        self.view.clicked.connect(self._clicked)
        self.view.deletePressed.connect(self.delete_selected)
        layout.addWidget(self.view, 1)
        self.empty = QLabel("No conversations yet.")
        self.empty.setEnabled(False)
        self.empty.setWordWrap(True)
        layout.addWidget(self.empty)
        self.notice = QLabel()
        self.notice.setObjectName("sidebarNotice")
        self.notice.setWordWrap(True)
        self.notice.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.notice.hide()
        layout.addWidget(self.notice)
        self._notice_timer = QTimer(self)
        self._notice_timer.setSingleShot(True)
        self._notice_timer.timeout.connect(self.notice.hide)
        self.transfers = ConversationTransfers(db, self, door)
        # Results of exports and imports under the list; a window that shows them in its
        # own message bar (transfers.finished) turns this off.
        self.transfer_notices = True
        self.transfers.finished.connect(self._on_transfer_finished)
        self._stopped = False
        self._generation = 0
        self._searching_text = ""
        self._jobs = BackgroundJobs("sidebar-search")
        self._bridge = SearchBridge(self)
        self._bridge.found.connect(self._on_found)
        self._searcher = Searcher(db.path, db.read_only, self._bridge)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(150)  # debounce: search when typing pauses
        self._timer.timeout.connect(self.refresh)
        # Changes made elsewhere (an API client's turns) refresh at a slower pace: the
        # list is queried on this thread, ~50 ms for 3,000 chats, so a client sending
        # turns back to back must not make the window redo it several times a second.
        self._later = QTimer(self)
        self._later.setSingleShot(True)
        self._later.setInterval(BACKGROUND_REFRESH_MS)
        self._later.timeout.connect(self.refresh)
        self.search.textChanged.connect(self._timer.start)
        self.search.returnPressed.connect(self.refresh)
        self.search.installEventFilter(self)  # Down goes on to the results

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if (
            watched is self.search
            and event.type() == QEvent.Type.KeyPress
            and isinstance(event, QKeyEvent)
            and event.key() == Qt.Key.Key_Down
        ):
            self.focus_results()
            return True
        return super().eventFilter(watched, event)

    def focus_results(self) -> None:
        """The keyboard goes to the list, on its first chat (headers are not rows one
        can stand on)."""
        model = self.view.model()
        for row in range(model.rowCount()):
            index = model.index(row, 0)
            if index.flags() & Qt.ItemFlag.ItemIsSelectable:
                self.view.setCurrentIndex(index)
                break
        self.view.setFocus(Qt.FocusReason.TabFocusReason)

    # -- the window's API ----------------------------------------------------------------

    def schedule_refresh(self) -> None:
        """Refresh within the debounce interval, however many ask meanwhile (an API
        client's turns in a row: a restart each time would put it off while they last)."""
        if not self._stopped and not self._timer.isActive():
            self._timer.start()

    def schedule_background_refresh(self) -> None:
        """Refresh within :data:`BACKGROUND_REFRESH_MS` for a change the user did not
        make here (a conversation an API client stored), however many come meanwhile."""
        if not self._stopped and not self._later.isActive() and not self._timer.isActive():
            self._later.start()

    def stop_refreshing(self) -> None:
        """The database is about to close: no more queries (the search thread's own
        connection is closed on that thread)."""
        self._stopped = True
        self._timer.stop()
        self._later.stop()
        self._generation += 1
        self._searcher.latest = self._generation
        self._jobs.submit(self._searcher.close)

    def wait_search(self, msecs: int = 5000) -> bool:
        """Block until the search thread is idle (tests, shutdown); True if it is."""
        return self._jobs.wait_idle(msecs / 1000.0)

    def set_current(self, conversation_id: int | None) -> None:
        """The chat of the current tab (None: no tab): highlighted, and listed even while
        it has no messages yet. The window calls this whenever the current tab changes."""
        if conversation_id == self._current:
            return
        self._current = conversation_id
        stale_empty = self._empty_listed is not None and self._empty_listed != conversation_id
        if self.model.searching or (self._current_listed() and not stale_empty):
            self._show_current()
        else:  # an empty chat joins the list, or the one that was current leaves it
            self.refresh()

    def current(self) -> int | None:
        return self._current

    def selected_ids(self) -> list[int]:
        """The selected conversations, in list order."""
        rows = sorted(i.row() for i in self.view.selectionModel().selectedRows())
        return [self.model.rows[r].conversation_id for r in rows if r < len(self.model.rows)]

    def focus_search(self) -> None:
        self.search.setFocus()
        self.search.selectAll()

    @Slot()
    def refresh(self) -> None:
        """The list now (a fast query on this thread); a search is started on the
        search thread and its rows replace the list when they come."""
        self._timer.stop()
        self._later.stop()
        if self._stopped:
            return
        text = self.search.text().strip()
        self._generation += 1
        self._searcher.latest = self._generation
        if text:
            self._searching_text = text
            self._jobs.submit(functools.partial(self._searcher.run, self._generation, text))
            return
        self._searching_text = ""
        try:
            rows = self._list_rows()
            self.empty.setText("" if rows else "No conversations yet.")
        except LlamaDeskError as exc:
            rows = []
            self.empty.setText(str(exc))
        self._show(rows, searching=False)

    # -- building the rows ---------------------------------------------------------------

    def _list_rows(self) -> list[Row]:
        now = self.now()
        rows: list[Row] = []
        groups: list[str] = []
        self._empty_listed = None
        listed = (
            settle(self._door.listing()) if self._door is not None else self.db.list_conversations()
        )
        for c in listed:
            # An unused "New chat" is not worth a row, unless it is the one being written.
            if c.message_count == 0:
                if c.id != self._current:
                    continue
                self._empty_listed = c.id
            count = f"{c.message_count} " + ("message" if c.message_count == 1 else "messages")
            if c.message_count == 0:  # listed while current only: say it goes if unused
                count = UNUSED_TEXT
            rows.append(
                Row(c.id, c.title or "New chat", f"{age(c.updated_at, now)} · {count}", c.pinned)
            )
            groups.append(PINNED if c.pinned else date_group(c.updated_at, now))
        return with_headers(rows, groups)

    def _show(self, rows: list[Row], searching: bool) -> None:
        selected = set(self.selected_ids())
        self.empty.setVisible(bool(self.empty.text()))
        self.model.current_id = self._current
        self.model.set_rows(rows, searching)
        kept = selected & {row.conversation_id for row in rows}
        if len(kept) > 1:
            # Keep a selection the user made (e.g. before exporting it) across refreshes;
            # one selected row is the chat that was current: the selection follows the
            # current one (a new tab, a fork).
            selection = QItemSelection()
            for n, row in enumerate(rows):
                if row.conversation_id in kept:
                    selection.select(self.model.index(n, 0), self.model.index(n, 0))
            self.view.selectionModel().select(
                selection, QItemSelectionModel.SelectionFlag.ClearAndSelect
            )
        else:
            self._show_current()

    def _current_listed(self) -> bool:
        return self.model.row_of(self._current) is not None

    def _show_current(self) -> None:
        """Highlight the current chat; it becomes the selection too, unless the user has
        selected several chats (for an export or delete in progress)."""
        self.model.set_current(self._current)
        row = self.model.row_of(self._current)
        selection = self.view.selectionModel()
        if len(selection.selectedRows()) > 1:
            return
        if row is None:
            selection.clearSelection()
            return
        index = self.model.index(row, 0)
        selection.setCurrentIndex(index, QItemSelectionModel.SelectionFlag.ClearAndSelect)
        self.view.scrollTo(index)

    @Slot(object)
    def _on_found(self, result: object) -> None:
        if not isinstance(result, SearchResult) or result.generation != self._generation:
            return  # an older search, overtaken by typing or by clearing the field
        if result.error is not None:
            self.empty.setText(result.error)
        else:
            self.empty.setText("" if result.rows else "Nothing found.")
        self._show(list(result.rows), searching=True)
        self.searchFinished.emit()

    # -- actions -------------------------------------------------------------------------

    @Slot()
    def delete_selected(self) -> None:
        """Delete the selected chats (the window's delete path, with its Undo)."""
        for cid in self.selected_ids():
            self.deleteRequested.emit(cid)

    @Slot(QModelIndex)
    def _clicked(self, index: QModelIndex) -> None:
        extend = Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier
        if self.view.press_modifiers & extend:
            return  # extending the selection, not opening
        self._activated(index)

    @Slot(QModelIndex)
    def _activated(self, index: QModelIndex) -> None:
        cid = index.data(IdRole)
        if cid is None:
            return
        self.openRequested.emit(int(cid))
        message_id = index.data(MessageIdRole)
        if message_id is not None:
            self.matchOpened.emit(int(cid), int(message_id))

    @Slot(object)
    def _on_transfer_finished(self, outcome: object) -> None:
        if not isinstance(outcome, TransferOutcome):
            return
        if outcome.imported:
            self.refresh()
        if self.transfer_notices:
            self.show_notice(outcome.message, outcome.error)

    def show_notice(self, text: str, error: bool = False) -> None:
        """A line under the list (export/import results); a success fades after a while,
        an error stays until the next notice."""
        self.notice.setText(text)
        self.notice.setStyleSheet(f"color: {colors(self).error};" if error else "")
        self.notice.setVisible(bool(text))
        if error:
            self._notice_timer.stop()
        else:
            self._notice_timer.start(NOTICE_MS)

    @Slot(QPoint)
    def _menu(self, pos: QPoint) -> None:
        self.context_menu(pos).popup(self.view.viewport().mapToGlobal(pos))

    def context_menu(self, pos: QPoint) -> QMenu:
        """The menu for a right click at ``pos`` (view coordinates): for the selection (a
        row clicked outside it becomes the selection), else for the whole list."""
        index = self.view.indexAt(pos)
        menu = QMenu(self)
        menu.setObjectName("sidebarMenu")
        selection = self.view.selectionModel()
        if index.isValid() and not selection.isSelected(index):
            selection.setCurrentIndex(index, QItemSelectionModel.SelectionFlag.ClearAndSelect)
        ids = self.selected_ids() if index.isValid() else []
        if len(ids) == 1:
            cid = ids[0]
            pinned = bool(index.data(PinnedRole))
            menu.addAction("Open", lambda: self._activated(index))
            if not self.model.searching:
                menu.addAction("Rename", lambda: self.view.edit(index))
                color = self.palette().color(QPalette.ColorRole.Text)
                menu.addAction(
                    pin_icon(color),
                    "Unpin" if pinned else "Pin",
                    lambda: self.pinRequested.emit(cid, not pinned),
                )
            menu.addSeparator()
        if ids:
            what = "" if len(ids) == 1 else f" {len(ids)} conversations"
            menu.addAction(
                f"Export{what} as Markdown…",
                lambda: self.transfers.export(ids, ExportFormat.MARKDOWN),
            )
            menu.addAction(
                f"Export{what} as JSON…", lambda: self.transfers.export(ids, ExportFormat.JSON)
            )
            menu.addSeparator()
            menu.addAction(f"Delete{what}", self.delete_selected)
        else:
            menu.addAction("New chat", self.newRequested.emit)
            menu.addSeparator()
            menu.addAction("Import conversations…", self.transfers.import_dialog)
            menu.addAction(
                "Export all as Markdown…",
                lambda: self.transfers.export(None, ExportFormat.MARKDOWN),
            )
            menu.addAction(
                "Export all as JSON…", lambda: self.transfers.export(None, ExportFormat.JSON)
            )
        menu.aboutToHide.connect(menu.deleteLater)
        return menu
