"""The message list of one tab: one small widget per message in a scroll area.

Only the message being streamed is re-rendered while text arrives; the view follows the
end unless the user scrolled up. Message actions are emitted as ``action(name, message_id)``
with name in copy, edit, regenerate, fork, prev, next.

The messages stand in a centred reading column (at most :data:`COLUMN_MAX_WIDTH` wide),
each with a role avatar; the user's are tinted bubbles, the assistant's plain cards. The
actions are small icon buttons shown while the pointer is over the message or the keyboard
focus is in it. :meth:`ChatView.set_editing` highlights the message being edited where it
stands; :meth:`ChatView.set_context_start` draws a divider above the first message the
model still sees.

The message widgets and their parts live in their own modules: :mod:`app.ui.message_data`,
:mod:`app.ui.message_widget`, :mod:`app.ui.reasoning_block`, :mod:`app.ui.text_label`,
:mod:`app.ui.stream_chunks`, :mod:`app.ui.message_icons` and :mod:`app.ui.message_avatar`;
their names used by other code are imported from here too.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QPointF, Qt, Signal, Slot
from PySide6.QtGui import QPainter, QPaintEvent, QPalette, QPen, QResizeEvent
from PySide6.QtWidgets import QFrame, QLabel, QScrollArea, QVBoxLayout, QWidget

from app.ui.message_avatar import AVATAR_SIZE
from app.ui.message_data import FINISH_TEXT, ROLE_NAMES, MessageData, figures_text, thought_title
from app.ui.message_icons import action_icon
from app.ui.message_widget import ACTION_SIZE, COPIED_MS, MessageWidget
from app.ui.reasoning_block import ReasoningBlock
from app.ui.stream_chunks import CHUNK_CHARS, SOFT_CUT_MIN
from app.ui.text_label import TextLabel
from app.ui.theme import is_dark, set_muted

__all__ = [
    "ACTION_SIZE",
    "AVATAR_SIZE",
    "CHUNK_CHARS",
    "COLUMN_MARGIN",
    "COLUMN_MAX_WIDTH",
    "CONTEXT_START_TEXT",
    "COPIED_MS",
    "FINISH_TEXT",
    "ROLE_NAMES",
    "SOFT_CUT_MIN",
    "ChatView",
    "MessageData",
    "MessageWidget",
    "ReasoningBlock",
    "TextLabel",
    "action_icon",
    "figures_text",
    "thought_title",
]

COLUMN_MAX_WIDTH = 820  # the reading column (full width when the view is narrower)
COLUMN_MARGIN = 12  # the column's least side margin
CONTEXT_START_TEXT = "Earlier messages are no longer seen by the model"


_SCROLL_BAR_STYLE = """
QScrollBar:vertical { background: transparent; width: 10px; margin: 0px; }
QScrollBar::handle:vertical {
    background: rgba(128, 128, 128, 120); border-radius: 3px; min-height: 28px; margin: 2px;
}
QScrollBar::handle:vertical:hover { background: rgba(128, 128, 128, 190); }
QScrollBar::add-line:vertical, QScrollBar::sub-line:vertical { height: 0px; }
QScrollBar::add-page:vertical, QScrollBar::sub-page:vertical { background: none; }
"""


class _Divider(QLabel):
    """A line across the column with a sentence in its middle."""

    def __init__(self, text: str, parent: QWidget | None = None) -> None:
        super().__init__(text, parent)
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.setEnabled(False)  # the palette's muted text colour
        self.setContentsMargins(0, 8, 0, 8)

    def paintEvent(self, event: QPaintEvent) -> None:
        super().paintEvent(event)
        color = self.palette().color(QPalette.ColorGroup.Disabled, QPalette.ColorRole.WindowText)
        color.setAlpha(140)
        p = QPainter(self)
        p.setPen(QPen(color, 1))
        text = self.fontMetrics().horizontalAdvance(self.text())
        mid, y = self.width() / 2, self.height() / 2
        left, right = mid - text / 2 - 10, mid + text / 2 + 10
        if left > 8:
            p.drawLine(QPointF(8, y), QPointF(left, y))
            p.drawLine(QPointF(right, y), QPointF(self.width() - 8, y))
        p.end()


class _Body(QWidget):
    """The scroll area's widget: its side margins keep the messages in a centred column."""

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("chat-body")
        self.column = QVBoxLayout(self)
        self.column.setContentsMargins(COLUMN_MARGIN, 8, COLUMN_MARGIN, 8)
        self.column.setSpacing(2)

    def side_margin(self, width: int) -> int:
        return max(COLUMN_MARGIN, (width - COLUMN_MAX_WIDTH) // 2)

    def resizeEvent(self, event: QResizeEvent) -> None:
        side = self.side_margin(event.size().width())
        margins = self.column.contentsMargins()
        if margins.left() != side:
            self.column.setContentsMargins(side, margins.top(), side, margins.bottom())
        super().resizeEvent(event)


class ChatView(QScrollArea):
    """The messages of the branch shown; see the module docstring."""

    action = Signal(str, int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self._body = _Body()
        self._layout = self._body.column
        self._layout.addStretch(1)
        self.setWidget(self._body)
        # the page is the base colour around the column too
        self.viewport().setBackgroundRole(QPalette.ColorRole.Base)
        self._widgets: list[MessageWidget] = []
        self._dark = is_dark(self)
        self._base = self.palette().color(QPalette.ColorRole.Base)
        self.follow = True
        self._editing_id: int | None = None
        self._context_start_id: int | None = None
        self._placeholder = QLabel()
        self._placeholder.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self._placeholder.setWordWrap(True)
        set_muted(self._placeholder, self._dark)
        self._layout.insertWidget(0, self._placeholder)
        self._divider = _Divider(CONTEXT_START_TEXT, self._body)
        self._divider.setObjectName("context-start")
        self._divider.setToolTip(
            "The model's context holds the messages below this line (and its reply); the "
            "ones above are kept here and on disk, but the model no longer reads them."
        )
        self._divider.setVisible(False)
        bar = self.verticalScrollBar()
        # A slim flat bar. Also a measured cost: the style's bar is drawn from pixmaps
        # cached by the handle's length, which changes with every streamed line (a cache
        # miss and ~3 ms per paint); the style sheet's rectangles cost almost nothing.
        bar.setStyleSheet(_SCROLL_BAR_STYLE)
        bar.valueChanged.connect(self._on_scrolled)
        bar.rangeChanged.connect(self._on_range)

    # -- content

    def set_placeholder(self, text: str) -> None:
        self._placeholder.setText(text)
        self._placeholder.setVisible(bool(text) and not self._widgets)

    def messages(self) -> list[MessageWidget]:
        return list(self._widgets)

    def clear(self) -> None:
        for w in self._widgets:
            w.setParent(None)
            w.deleteLater()
        self._widgets = []
        self._placeholder.setVisible(bool(self._placeholder.text()))
        self._place_divider()

    def set_messages(self, messages: list[MessageData]) -> None:
        self.setUpdatesEnabled(False)
        try:
            self.clear()
            for data in messages:
                self._add(data)
            self._place_divider()
        finally:
            self.setUpdatesEnabled(True)
        self.follow = True
        self.scroll_to_end()

    def keep_first(self, n: int) -> None:
        """Remove every message widget after the first ``n``."""
        for w in self._widgets[n:]:
            w.setParent(None)
            w.deleteLater()
        del self._widgets[n:]
        self._placeholder.setVisible(bool(self._placeholder.text()) and not self._widgets)
        self._place_divider()

    def append(self, data: MessageData) -> MessageWidget:
        widget = self._add(data)
        if data.id == self._context_start_id:
            self._place_divider()
        self.follow = True
        self.scroll_to_end()
        return widget

    def _add(self, data: MessageData) -> MessageWidget:
        widget = MessageWidget(data, self._dark, self._body)
        widget.action.connect(self.action)
        self._layout.insertWidget(self._layout.count() - 1, widget)
        self._widgets.append(widget)
        self._placeholder.setVisible(False)
        if data.id == self._editing_id:
            widget.set_editing(True)
        return widget

    def last(self) -> MessageWidget | None:
        return self._widgets[-1] if self._widgets else None

    def widget_for(self, message_id: int) -> MessageWidget | None:
        return next((w for w in self._widgets if w.data.id == message_id), None)

    def set_actions_enabled(self, enabled: bool) -> None:
        for w in self._widgets:
            if not w.is_streaming():
                w.set_actions_enabled(enabled)

    # -- editing in place, the context's start

    def set_editing(self, message_id: int | None) -> None:
        """Highlight the message being edited (None: none); kept across a rebuild."""
        self._editing_id = message_id
        for w in self._widgets:
            w.set_editing(w.data.id == message_id)

    def editing_id(self) -> int | None:
        return self._editing_id

    def set_context_start(self, message_id: int | None) -> None:
        """Draw the divider "earlier messages are no longer seen by the model" above this
        message (None, or a message not shown: no divider)."""
        self._context_start_id = message_id
        self._place_divider()

    def context_start_id(self) -> int | None:
        return self._context_start_id

    def divider(self) -> QLabel:
        return self._divider

    def _place_divider(self) -> None:
        widget = self.widget_for(self._context_start_id) if self._context_start_id else None
        index = self._layout.indexOf(widget) if widget is not None else -1
        current = self._layout.indexOf(self._divider)
        if index >= 0 and current == index - 1:
            return  # already there
        if current >= 0:
            self._layout.removeWidget(self._divider)
        if widget is None:
            self._divider.setVisible(False)
            return
        self._layout.insertWidget(self._layout.indexOf(widget), self._divider)
        self._divider.setVisible(True)

    def fit_to_text(self) -> None:
        """Give the column the height its messages need now, at once, after the last
        message's text grew (call it after :meth:`MessageWidget.set_content`).

        Qt lays a grown label's parents out from the inside out, each at its old size
        first: the message's card squeezes its parts into the old height, then gets the
        new one, and so on up to the column, so every label of the reply and the column
        moved twice and was repainted at each streamed line. Resizing the column first
        lays everything out once, from the outside in, at the new height."""
        last = self.last()
        if last is None:
            return
        # the layouts above the card learn of the change only when the card's layout has
        # run: tell them now, so that the column's height for its width is the new one
        last.card.updateGeometry()
        last.updateGeometry()
        body = self._body
        needed = body.heightForWidth(body.width())
        if needed > body.height():
            body.resize(body.width(), needed)
        # outside in: each layout runs once, at its widget's new size (Qt's own requests,
        # still posted, then find nothing to do)
        for widget in (body, last, last.card):
            layout = widget.layout()
            if layout is not None:
                layout.activate()

    # -- following the end

    def scroll_to_end(self) -> None:
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())

    @Slot(int)
    def _on_scrolled(self, value: int) -> None:
        bar = self.verticalScrollBar()
        self.follow = value >= bar.maximum() - 8

    @Slot(int, int)
    def _on_range(self, _low: int, high: int) -> None:
        if self.follow:
            self.verticalScrollBar().setValue(high)

    def changeEvent(self, event: QEvent) -> None:
        if event.type() == QEvent.Type.PaletteChange:
            # The children get the new palette after this event: give them its colours.
            dark = is_dark(self)
            base = self.palette().color(QPalette.ColorRole.Base)
            if dark != self._dark or base != self._base:
                self._dark, self._base = dark, base
                set_muted(self._placeholder, dark)
                for w in self._widgets:
                    w.set_dark(dark, base)
        super().changeEvent(event)
