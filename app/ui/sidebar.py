"""The conversation sidebar: every saved conversation grouped by date (Pinned, Today,
Yesterday, Previous 7 days, Previous 30 days, then by month), the current chat
highlighted, full-text search (one row per chat, jumping to the best match), rename (F2 or
the context menu), pin, delete (the Delete key too; the window offers Undo), multi-selection
(Ctrl/Shift) for delete and export, and export/import (:mod:`app.ui.export_import`).

Search runs on a background thread: on a 10,000-message database a common word takes
~18 ms (benchmarks/bench_search.py, "sidebar_search"), more than a frame. Typing is
debounced, and the result of a search that is no longer the latest is dropped.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from PySide6.QtCore import (
    QAbstractListModel,
    QItemSelection,
    QItemSelectionModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QPoint,
    QPointF,
    QRect,
    QSize,
    Qt,
    QTimer,
    Signal,
    Slot,
)
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontMetrics,
    QIcon,
    QKeyEvent,
    QMouseEvent,
    QPainter,
    QPainterPath,
    QPalette,
    QPen,
    QPixmap,
)
from PySide6.QtWidgets import (
    QAbstractItemView,
    QApplication,
    QLabel,
    QLineEdit,
    QListView,
    QMenu,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QVBoxLayout,
    QWidget,
)

from app.errors import LlamaDeskError
from app.session.jobs import JobThread
from app.storage import Database
from app.storage.export import ExportFormat
from app.ui.export_import import ConversationTransfers, TransferOutcome
from app.ui.theme import colors

log = logging.getLogger(__name__)

IdRole = Qt.ItemDataRole.UserRole + 1
PinnedRole = Qt.ItemDataRole.UserRole + 2
MessageIdRole = Qt.ItemDataRole.UserRole + 3
SubtitleRole = Qt.ItemDataRole.UserRole + 4
HeaderRole = Qt.ItemDataRole.UserRole + 5  # the date group this row starts, or None
CurrentRole = Qt.ItemDataRole.UserRole + 6  # the chat of the current tab
DetailRole = Qt.ItemDataRole.UserRole + 7  # right of the title, e.g. "3 matches"

_Index = QModelIndex | QPersistentModelIndex

SEARCH_LIMIT = 50  # conversations listed for a search
SEARCH_MARKS = ("«", "»")
NOTICE_MS = 10_000  # how long a success notice (export/import) stays


@dataclass(frozen=True)
class Row:
    """One conversation in the list (or one conversation found by a search)."""

    conversation_id: int
    title: str
    subtitle: str
    pinned: bool = False
    message_id: int | None = None  # search: the best matching message
    header: str | None = None  # the date group this row is the first of
    detail: str = ""


# -- date groups -------------------------------------------------------------------------

PINNED = "Pinned"
TODAY = "Today"
YESTERDAY = "Yesterday"
PREVIOUS_7 = "Previous 7 days"
PREVIOUS_30 = "Previous 30 days"


def date_group(ts: float, now: float) -> str:
    """The group of a conversation last active at ``ts`` (local calendar days): Today,
    Yesterday, Previous 7 days, Previous 30 days, else its month ("March 2026")."""
    today = dt.date.fromtimestamp(now)
    day = dt.date.fromtimestamp(ts)
    days = (today - day).days
    if days <= 0:  # a clock set back shows it as today rather than nowhere
        return TODAY
    if days == 1:
        return YESTERDAY
    if days < 7:
        return PREVIOUS_7
    if days < 30:
        return PREVIOUS_30
    return day.strftime("%B %Y")


def age(ts: float, now: float) -> str:
    delta = max(0.0, now - ts)
    if delta < 60:
        return "just now"
    if delta < 3600:
        return f"{int(delta // 60)} min ago"
    if delta < 86400:
        return f"{int(delta // 3600)} h ago"
    return time.strftime("%Y-%m-%d", time.localtime(ts))


def with_headers(rows: Sequence[Row], groups: Sequence[str]) -> list[Row]:
    """The rows with ``header`` set on the first of each run of equal groups."""
    out: list[Row] = []
    previous: str | None = None
    for row, group in zip(rows, groups, strict=True):
        out.append(replace(row, header=group if group != previous else None))
        previous = group
    return out


def split_marks(text: str) -> list[str]:
    """``text`` split at SEARCH_MARKS: plain, match, plain, match... (no marks: [text])."""
    start, end = SEARCH_MARKS
    parts: list[str] = []
    rest = text
    while True:
        i = rest.find(start)
        j = rest.find(end, i + len(start)) if i >= 0 else -1
        if i < 0 or j < 0:
            parts.append(rest)
            return parts
        parts += [rest[:i], rest[i + len(start) : j]]
        rest = rest[j + len(end) :]


# -- the pin icon ------------------------------------------------------------------------


def paint_pin(painter: QPainter, rect: QRect, color: QColor) -> None:
    """A push pin (head, body, needle) leaning right, in ``color``: drawn, because the 📌
    emoji is an empty box where the system has no colour emoji font."""
    side = min(rect.width(), rect.height())
    if side <= 0:
        return
    painter.save()
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.translate(rect.center().x() + 0.5, rect.center().y() + 0.5)
    painter.rotate(40)
    s = side / 16.0
    painter.setPen(Qt.PenStyle.NoPen)
    painter.setBrush(color)
    body = QPainterPath()
    body.addRoundedRect(-3.0 * s, -7.0 * s, 6.0 * s, 2.2 * s, 0.8 * s, 0.8 * s)  # head
    body.addRect(-1.6 * s, -5.0 * s, 3.2 * s, 4.2 * s)  # body
    body.addRoundedRect(-4.4 * s, -1.2 * s, 8.8 * s, 2.0 * s, 0.8 * s, 0.8 * s)  # collar
    painter.drawPath(body.simplified())
    pen = QPen(color, max(1.0, 1.3 * s))
    pen.setCapStyle(Qt.PenCapStyle.RoundCap)
    painter.setPen(pen)
    painter.drawLine(QPointF(0, 0.8 * s), QPointF(0, 7.0 * s))  # needle
    painter.restore()


def pin_icon(color: QColor, size: int = 16) -> QIcon:
    pixmap = QPixmap(size, size)
    pixmap.fill(Qt.GlobalColor.transparent)
    painter = QPainter(pixmap)
    paint_pin(painter, QRect(0, 0, size, size), color)
    painter.end()
    return QIcon(pixmap)


# -- the model ---------------------------------------------------------------------------


class ConversationListModel(QAbstractListModel):
    """Conversations (or search hits); editing the display role renames."""

    renamed = Signal(int, str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.rows: list[Row] = []
        self.searching = False
        self.current_id: int | None = None

    def set_rows(self, rows: list[Row], searching: bool) -> None:
        self.beginResetModel()
        self.rows = rows
        self.searching = searching
        self.endResetModel()

    def set_current(self, conversation_id: int | None) -> None:
        old, self.current_id = self.current_id, conversation_id
        for cid in {old, conversation_id} - {None}:
            row = self.row_of(cid)
            if row is not None:
                index = self.index(row, 0)
                self.dataChanged.emit(index, index, [CurrentRole])

    def row_of(self, conversation_id: int | None) -> int | None:
        return next(
            (n for n, r in enumerate(self.rows) if r.conversation_id == conversation_id), None
        )

    def rowCount(self, parent: _Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self.rows)

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not 0 <= index.row() < len(self.rows):
            return None
        row = self.rows[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            return f"{row.title}\n{row.subtitle}"
        if role in (Qt.ItemDataRole.EditRole, Qt.ItemDataRole.ToolTipRole):
            return row.title
        if role == Qt.ItemDataRole.AccessibleTextRole:
            return ("Pinned: " if row.pinned else "") + f"{row.title}, {row.subtitle}"
        if role == IdRole:
            return row.conversation_id
        if role == PinnedRole:
            return row.pinned
        if role == MessageIdRole:
            return row.message_id
        if role == SubtitleRole:
            return row.subtitle
        if role == HeaderRole:
            return row.header
        if role == CurrentRole:
            return row.conversation_id == self.current_id
        if role == DetailRole:
            return row.detail
        return None

    def flags(self, index: _Index) -> Qt.ItemFlag:
        base = super().flags(index)
        if index.isValid() and not self.searching:
            base |= Qt.ItemFlag.ItemIsEditable
        return base

    def setData(self, index: _Index, value: Any, role: int = Qt.ItemDataRole.EditRole) -> bool:
        if role != Qt.ItemDataRole.EditRole or not index.isValid():
            return False
        title = str(value).strip()
        row = self.rows[index.row()]
        if not title or title == row.title:
            return False
        self.rows[index.row()] = replace(row, title=title)
        self.dataChanged.emit(index, index, [Qt.ItemDataRole.DisplayRole])
        self.renamed.emit(row.conversation_id, title)
        return True


# -- painting ----------------------------------------------------------------------------


class RowDelegate(QStyledItemDelegate):
    """A row: the title (bold for the current chat, a pin icon when pinned, a detail such
    as "3 matches" at the right), then the age and size or the search snippet, smaller
    and muted. The first row of a date group carries the group's header above it."""

    PAD_X, PAD_Y, GAP, HEADER_GAP, ACCENT = 8, 6, 2, 6, 3

    def _fonts(self, option: QStyleOptionViewItem) -> tuple[QFont, QFont, QFont]:
        title = QFont(option.font)
        sub = QFont(title)
        if sub.pointSizeF() > 0:
            sub.setPointSizeF(sub.pointSizeF() * 0.88)
        header = QFont(sub)
        header.setBold(True)
        return title, sub, header

    def header_height(self, option: QStyleOptionViewItem, index: _Index) -> int:
        """Pixels at the top of the row taken by its group header (0 when none)."""
        if not index.data(HeaderRole):
            return 0
        _, _, header = self._fonts(option)
        return QFontMetrics(header).height() + 2 * self.HEADER_GAP

    def sizeHint(self, option: QStyleOptionViewItem, index: _Index) -> QSize:
        title, sub, _ = self._fonts(option)
        height = QFontMetrics(title).height() + QFontMetrics(sub).height()
        return QSize(100, height + 2 * self.PAD_Y + self.GAP + self.header_height(option, index))

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: _Index) -> None:
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        opt.text = ""
        palette: QPalette = opt.palette
        title_font, sub_font, header_font = self._fonts(opt)
        muted_color = palette.color(QPalette.ColorRole.PlaceholderText)
        top = self.header_height(opt, index)
        painter.save()
        if top:
            painter.setFont(header_font)
            painter.setPen(muted_color)
            metrics = QFontMetrics(header_font)
            painter.drawText(
                opt.rect.x() + self.PAD_X,
                opt.rect.y() + self.HEADER_GAP + metrics.ascent(),
                str(index.data(HeaderRole)),
            )
        painter.restore()
        # The item (selection, hover) is only the part below the header.
        opt.rect = opt.rect.adjusted(0, top, 0, 0)
        current = bool(index.data(CurrentRole))
        widget = opt.widget
        style = widget.style() if widget is not None else QApplication.style()
        style.drawControl(QStyle.ControlElement.CE_ItemViewItem, opt, painter, widget)
        selected = bool(opt.state & QStyle.StateFlag.State_Selected)
        painter.save()
        if current:
            accent = palette.color(QPalette.ColorRole.Highlight)
            if not selected:
                tint = QColor(accent)
                tint.setAlpha(40)
                painter.fillRect(opt.rect, tint)
            painter.fillRect(
                QRect(opt.rect.x(), opt.rect.y(), self.ACCENT, opt.rect.height()), accent
            )
            title_font.setBold(True)
        rect = opt.rect.adjusted(self.PAD_X, self.PAD_Y, -self.PAD_X, -self.PAD_Y)
        text_color = palette.color(
            QPalette.ColorRole.HighlightedText if selected else QPalette.ColorRole.Text
        )
        muted = text_color if selected else muted_color
        title_metrics = QFontMetrics(title_font)
        sub_metrics = QFontMetrics(sub_font)
        right = rect.right()
        if index.data(PinnedRole):
            side = title_metrics.height()
            paint_pin(painter, QRect(right - side + 1, rect.y(), side, side), muted)
            right -= side + 4
        detail = str(index.data(DetailRole) or "")
        if detail:
            painter.setFont(sub_font)
            painter.setPen(muted)
            width = sub_metrics.horizontalAdvance(detail)
            painter.drawText(right - width, rect.y() + title_metrics.ascent(), detail)
            right -= width + 6
        painter.setFont(title_font)
        painter.setPen(text_color)
        title = str(index.data(Qt.ItemDataRole.EditRole) or "")
        painter.drawText(
            rect.x(),
            rect.y() + title_metrics.ascent(),
            title_metrics.elidedText(title, Qt.TextElideMode.ElideRight, right - rect.x()),
        )
        painter.setPen(muted)
        baseline = rect.y() + title_metrics.height() + self.GAP + sub_metrics.ascent()
        self._paint_snippet(painter, str(index.data(SubtitleRole) or ""), sub_font, rect, baseline)
        painter.restore()

    @staticmethod
    def _paint_snippet(
        painter: QPainter, text: str, font: QFont, rect: QRect, baseline: int
    ) -> None:
        """The subtitle; in a search snippet the matches (between SEARCH_MARKS) are bold
        and the marks themselves are not shown."""
        bold = QFont(font)
        bold.setBold(True)
        x, right = rect.x(), rect.right()
        for n, part in enumerate(split_marks(text)):
            if not part:
                continue
            current = bold if n % 2 else font
            metrics = QFontMetrics(current)
            painter.setFont(current)
            width = metrics.horizontalAdvance(part)
            if x + width > right:  # the last part that fits, cut with an ellipsis
                painter.drawText(
                    x, baseline, metrics.elidedText(part, Qt.TextElideMode.ElideRight, right - x)
                )
                return
            painter.drawText(x, baseline, part)
            x += width

    def updateEditorGeometry(
        self, editor: QWidget, option: QStyleOptionViewItem, index: _Index
    ) -> None:
        # The rename editor covers the title line, not the group header above it.
        top = self.header_height(option, index)
        title, _, _ = self._fonts(option)
        rect = option.rect.adjusted(0, top, 0, 0)
        height = QFontMetrics(title).height() + 2 * self.PAD_Y
        editor.setGeometry(QRect(rect.x(), rect.y(), rect.width(), height))


class ConversationView(QListView):
    """The list: clicks on a group header select nothing; Delete asks to delete the
    selection; it remembers the modifiers of the last press (a Ctrl/Shift click extends
    the selection instead of opening)."""

    deletePressed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.press_modifiers = Qt.KeyboardModifier.NoModifier

    def _on_header(self, pos: QPoint) -> bool:
        index = self.indexAt(pos)
        delegate = self.itemDelegate()
        if not index.isValid() or not isinstance(delegate, RowDelegate):
            return False
        option = QStyleOptionViewItem()
        self.initViewItemOption(option)
        header = delegate.header_height(option, index)
        return pos.y() < self.visualRect(index).y() + header

    def mousePressEvent(self, event: QMouseEvent) -> None:
        self.press_modifiers = event.modifiers()
        if self._on_header(event.position().toPoint()):
            event.accept()
            return
        super().mousePressEvent(event)

    def mouseDoubleClickEvent(self, event: QMouseEvent) -> None:
        if self._on_header(event.position().toPoint()):
            event.accept()
            return
        super().mouseDoubleClickEvent(event)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() == Qt.Key.Key_Delete and self.state() != self.State.EditingState:
            self.deletePressed.emit()
            event.accept()
            return
        self.press_modifiers = Qt.KeyboardModifier.NoModifier
        super().keyPressEvent(event)


# -- search off the GUI thread -----------------------------------------------------------


@dataclass(frozen=True)
class SearchResult:
    generation: int
    rows: tuple[Row, ...]
    error: str | None = None


class _SearchBridge(QObject):
    found = Signal(object)  # a SearchResult, queued to the GUI thread


class _Searcher:
    """Runs searches on the job thread, on its own connection (opened on first use, closed
    by :meth:`close`, both on that thread: SQLite connections stay in their thread)."""

    def __init__(self, path: Path, read_only: bool, bridge: _SearchBridge) -> None:
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


# -- the sidebar -------------------------------------------------------------------------


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
    ) -> None:
        super().__init__(parent)
        self.db = db
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
        self.transfers = ConversationTransfers(db, self)
        # Results of exports and imports under the list; a window that shows them in its
        # own message bar (transfers.finished) turns this off.
        self.transfer_notices = True
        self.transfers.finished.connect(self._on_transfer_finished)
        self._stopped = False
        self._generation = 0
        self._searching_text = ""
        self._jobs = JobThread("sidebar-search")
        self._bridge = _SearchBridge(self)
        self._bridge.found.connect(self._on_found)
        self._searcher = _Searcher(db.path, db.read_only, self._bridge)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(150)  # debounce: search when typing pauses
        self._timer.timeout.connect(self.refresh)
        self.search.textChanged.connect(self._timer.start)
        self.search.returnPressed.connect(self.refresh)

    # -- the window's API ----------------------------------------------------------------

    def schedule_refresh(self) -> None:
        if not self._stopped:
            self._timer.start()

    def stop_refreshing(self) -> None:
        """The database is about to close: no more queries (the search thread's own
        connection is closed on that thread)."""
        self._stopped = True
        self._timer.stop()
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
        for c in self.db.list_conversations():
            # An unused "New chat" is not worth a row, unless it is the one being written.
            if c.message_count == 0:
                if c.id != self._current:
                    continue
                self._empty_listed = c.id
            count = f"{c.message_count} " + ("message" if c.message_count == 1 else "messages")
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
        if kept - {self._current}:
            # Keep a selection the user made (e.g. before exporting it) across refreshes.
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
