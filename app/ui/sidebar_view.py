"""The sidebar's list view (:class:`ConversationView`), painted by
:class:`~app.ui.sidebar_paint.RowDelegate`."""

from __future__ import annotations

from PySide6.QtCore import QPoint, Qt, Signal
from PySide6.QtGui import QKeyEvent, QMouseEvent
from PySide6.QtWidgets import QListView, QStyleOptionViewItem, QWidget

from app.ui.sidebar_paint import RowDelegate


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
