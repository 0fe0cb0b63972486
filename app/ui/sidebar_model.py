"""The sidebar's rows: a :class:`Row` per conversation (or search hit), the date groups it
is listed under, the snippet's match marks, and :class:`ConversationListModel`, the Qt
model over them (editing a title renames)."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from PySide6.QtCore import (
    QAbstractListModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    Qt,
    Signal,
)

IdRole = Qt.ItemDataRole.UserRole + 1
PinnedRole = Qt.ItemDataRole.UserRole + 2
MessageIdRole = Qt.ItemDataRole.UserRole + 3
SubtitleRole = Qt.ItemDataRole.UserRole + 4
HeaderRole = Qt.ItemDataRole.UserRole + 5  # the date group this row starts, or None
CurrentRole = Qt.ItemDataRole.UserRole + 6  # the chat of the current tab
DetailRole = Qt.ItemDataRole.UserRole + 7  # right of the title, e.g. "3 matches"

Index = QModelIndex | QPersistentModelIndex

SEARCH_MARKS = ("«", "»")


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
# the current chat before its first message (it is not kept if left unused)
UNUSED_TEXT = "not kept until you write in it"
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

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self.rows)

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
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

    def flags(self, index: Index) -> Qt.ItemFlag:
        base = super().flags(index)
        if index.isValid() and not self.searching:
            base |= Qt.ItemFlag.ItemIsEditable
        return base

    def setData(self, index: Index, value: Any, role: int = Qt.ItemDataRole.EditRole) -> bool:
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
