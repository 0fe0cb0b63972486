"""The conversation sidebar: every saved conversation (pinned, then newest), full-text
search, rename (F2 or the context menu), pin, delete (the window offers Undo)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import (
    QAbstractListModel,
    QModelIndex,
    QPersistentModelIndex,
    QPoint,
    QSize,
    Qt,
    QTimer,
    Signal,
    Slot,
)
from PySide6.QtGui import QFont, QFontMetrics, QPainter, QPalette
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
from app.storage import Database

IdRole = Qt.ItemDataRole.UserRole + 1
PinnedRole = Qt.ItemDataRole.UserRole + 2
MessageIdRole = Qt.ItemDataRole.UserRole + 3
SubtitleRole = Qt.ItemDataRole.UserRole + 4

_Index = QModelIndex | QPersistentModelIndex


@dataclass
class Row:
    conversation_id: int
    title: str
    subtitle: str
    pinned: bool = False
    message_id: int | None = None


def _age(ts: float) -> str:
    delta = max(0.0, time.time() - ts)
    if delta < 60:
        return "just now"
    if delta < 3600:
        return f"{int(delta // 60)} min ago"
    if delta < 86400:
        return f"{int(delta // 3600)} h ago"
    return time.strftime("%Y-%m-%d", time.localtime(ts))


class ConversationListModel(QAbstractListModel):
    """Conversations (or search hits); editing the display role renames."""

    renamed = Signal(int, str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.rows: list[Row] = []
        self.searching = False

    def set_rows(self, rows: list[Row], searching: bool) -> None:
        self.beginResetModel()
        self.rows = rows
        self.searching = searching
        self.endResetModel()

    def rowCount(self, parent: _Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self.rows)

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not 0 <= index.row() < len(self.rows):
            return None
        row = self.rows[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            pin = "📌 " if row.pinned else ""
            return f"{pin}{row.title}\n{row.subtitle}"
        if role == Qt.ItemDataRole.EditRole:
            return row.title
        if role == Qt.ItemDataRole.ToolTipRole:
            return row.title
        if role == IdRole:
            return row.conversation_id
        if role == PinnedRole:
            return row.pinned
        if role == MessageIdRole:
            return row.message_id
        if role == SubtitleRole:
            return row.subtitle
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
        row.title = title
        self.dataChanged.emit(index, index, [Qt.ItemDataRole.DisplayRole])
        self.renamed.emit(row.conversation_id, title)
        return True


class RowDelegate(QStyledItemDelegate):
    """A row: the title, then the age and size (or the search snippet) smaller and muted."""

    PAD_X, PAD_Y, GAP = 8, 6, 2

    def _fonts(self, option: QStyleOptionViewItem) -> tuple[QFont, QFont]:
        title = QFont(option.font)
        sub = QFont(title)
        if sub.pointSizeF() > 0:
            sub.setPointSizeF(sub.pointSizeF() * 0.88)
        return title, sub

    def sizeHint(self, option: QStyleOptionViewItem, index: _Index) -> QSize:
        title, sub = self._fonts(option)
        height = QFontMetrics(title).height() + QFontMetrics(sub).height()
        return QSize(100, height + 2 * self.PAD_Y + self.GAP)

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: _Index) -> None:
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        opt.text = ""
        widget = opt.widget
        style = widget.style() if widget is not None else QApplication.style()
        style.drawControl(QStyle.ControlElement.CE_ItemViewItem, opt, painter, widget)
        rect = opt.rect.adjusted(self.PAD_X, self.PAD_Y, -self.PAD_X, -self.PAD_Y)
        selected = bool(opt.state & QStyle.StateFlag.State_Selected)
        palette: QPalette = opt.palette
        text_color = palette.color(
            QPalette.ColorRole.HighlightedText if selected else QPalette.ColorRole.Text
        )
        muted = text_color if selected else palette.color(QPalette.ColorRole.PlaceholderText)
        title_font, sub_font = self._fonts(opt)
        pinned = bool(index.data(PinnedRole))
        title = ("📌 " if pinned else "") + str(index.data(Qt.ItemDataRole.EditRole) or "")
        subtitle = str(index.data(SubtitleRole) or "")
        painter.save()
        title_metrics = QFontMetrics(title_font)
        painter.setFont(title_font)
        painter.setPen(text_color)
        painter.drawText(
            rect.x(),
            rect.y() + title_metrics.ascent(),
            title_metrics.elidedText(title, Qt.TextElideMode.ElideRight, rect.width()),
        )
        sub_metrics = QFontMetrics(sub_font)
        painter.setFont(sub_font)
        painter.setPen(muted)
        painter.drawText(
            rect.x(),
            rect.y() + title_metrics.height() + self.GAP + sub_metrics.ascent(),
            sub_metrics.elidedText(subtitle, Qt.TextElideMode.ElideRight, rect.width()),
        )
        painter.restore()


class Sidebar(QWidget):
    """See the module docstring."""

    openRequested = Signal(int)  # conversation id
    renameRequested = Signal(int, str)
    pinRequested = Signal(int, bool)
    deleteRequested = Signal(int)
    newRequested = Signal()

    def __init__(self, db: Database, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.db = db
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 0, 6)
        self.search = QLineEdit()
        self.search.setObjectName("search")
        self.search.setPlaceholderText("Search conversations (Ctrl+F)")
        self.search.setClearButtonEnabled(True)
        layout.addWidget(self.search)
        self.model = ConversationListModel(self)
        self.model.renamed.connect(self.renameRequested)
        self.view = QListView()
        self.view.setObjectName("conversations")
        self.view.setModel(self.model)
        self.view.setUniformItemSizes(True)
        self.view.setItemDelegate(RowDelegate(self.view))
        self.view.setEditTriggers(QAbstractItemView.EditTrigger.EditKeyPressed)
        self.view.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.view.customContextMenuRequested.connect(self._menu)
        self.view.activated.connect(self._activated)
        self.view.clicked.connect(self._activated)
        layout.addWidget(self.view, 1)
        self.empty = QLabel("No conversations yet.")
        self.empty.setEnabled(False)
        self.empty.setWordWrap(True)
        layout.addWidget(self.empty)
        self._stopped = False
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(150)
        self._timer.timeout.connect(self.refresh)
        self.search.textChanged.connect(self._timer.start)
        self.search.returnPressed.connect(self.refresh)

    def schedule_refresh(self) -> None:
        if not self._stopped:
            self._timer.start()

    def stop_refreshing(self) -> None:
        """The database is about to close: no more queries."""
        self._stopped = True
        self._timer.stop()

    @Slot()
    def refresh(self) -> None:
        self._timer.stop()
        if self._stopped:
            return
        text = self.search.text().strip()
        try:
            if text:
                hits = self.db.search(text, 100, marks=("«", "»"))
                rows = [
                    Row(
                        h.conversation_id,
                        h.title,
                        h.snippet.replace("\n", " "),
                        False,
                        h.message_id,
                    )
                    for h in hits
                ]
                self.empty.setText("Nothing found." if not rows else "")
            else:
                rows = [
                    Row(
                        c.id,
                        c.title or "New chat",
                        f"{_age(c.updated_at)} · {c.message_count} "
                        + ("message" if c.message_count == 1 else "messages"),
                        c.pinned,
                    )
                    for c in self.db.list_conversations()
                ]
                self.empty.setText("" if rows else "No conversations yet.")
        except LlamaDeskError as exc:
            rows = []
            self.empty.setText(str(exc))
        self.empty.setVisible(bool(self.empty.text()))
        self.model.set_rows(rows, bool(text))

    def focus_search(self) -> None:
        self.search.setFocus()
        self.search.selectAll()

    @Slot(QModelIndex)
    def _activated(self, index: QModelIndex) -> None:
        cid = index.data(IdRole)
        if cid is not None:
            self.openRequested.emit(int(cid))

    @Slot(QPoint)
    def _menu(self, pos: QPoint) -> None:
        index = self.view.indexAt(pos)
        menu = QMenu(self)
        if index.isValid():
            cid = int(index.data(IdRole))
            pinned = bool(index.data(PinnedRole))
            menu.addAction("Open", lambda: self.openRequested.emit(cid))
            if not self.model.searching:
                menu.addAction("Rename", lambda: self.view.edit(index))
                menu.addAction(
                    "Unpin" if pinned else "Pin", lambda: self.pinRequested.emit(cid, not pinned)
                )
            menu.addAction("Delete", lambda: self.deleteRequested.emit(cid))
        else:
            menu.addAction("New chat", self.newRequested.emit)
        menu.popup(self.view.viewport().mapToGlobal(pos))
