"""The word-wrapped label that holds a message's text, with cheap size hints."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QSize
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QLabel, QSizePolicy, QWidget


class TextLabel(QLabel):
    """A word-wrapped rich-text label whose height is its ``heightForWidth``, remembered.

    Qt's layouts ask a label's ``heightForWidth`` several times per layout pass and a
    QLabel lays its whole text out again each time; with the cache, a long conversation
    costs nothing while only the last label changes. QLabel's own size hints lay the text
    out three more times (at its preferred, at zero and at unbounded width) on every
    change; in a layout with height-for-width they only give the minimum, so cheap hints
    stand in for them (measured: half the cost of a streamed update)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._hfw: dict[int, int] = {}
        self._pinned: QSizePolicy | None = None  # the policy before pin_height (None: not)
        self.text_layouts = 0  # heights Qt laid the text out for (cache misses; tests count)

    def pin_height(self, width: int) -> None:
        """Fix the height to the text's height at ``width`` (then at each new width): for a
        label whose text no longer changes while the label after it streams.

        A label with a height for its width is asked for it by every layout pass of its
        column (a Python call each, several per pass), and a layout that runs before its
        parent has grown squeezes it, then gives its height back: every label of the reply
        moved twice and was repainted at each streamed line. A fixed height is neither
        asked nor squeezed."""
        if self._pinned is None:
            self._pinned = self.sizePolicy()
            policy = QSizePolicy(self._pinned.horizontalPolicy(), QSizePolicy.Policy.Fixed)
            policy.setHeightForWidth(False)
            self.setSizePolicy(policy)
        self.setFixedHeight(self.heightForWidth(width))

    def unpin_height(self) -> None:
        """Back to a height for the width (the text may change again)."""
        if self._pinned is not None:
            policy, self._pinned = self._pinned, None
            self.setMinimumHeight(0)
            self.setMaximumHeight(16777215)  # QWIDGETSIZE_MAX
            self.setSizePolicy(policy)

    def pinned(self) -> bool:
        return self._pinned is not None

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        if self._pinned is not None and event.size().width() != event.oldSize().width():
            height = self.heightForWidth(event.size().width())
            if height != self.height():
                self.setFixedHeight(height)  # its text at the new width

    def setText(self, text: str) -> None:
        self._hfw.clear()
        super().setText(text)
        if self._pinned is not None:
            self.setFixedHeight(self.heightForWidth(self.width()))

    def heightForWidth(self, width: int) -> int:
        height = self._hfw.get(width)
        if height is None:
            if len(self._hfw) > 8:
                self._hfw.clear()
            height = self._estimate(width)
            if height is None:
                self.text_layouts += 1
                height = super().heightForWidth(width)
            self._hfw[width] = height
        return height

    def _estimate(self, width: int) -> int | None:
        """The height at a width far below the label's own, from the height at its own.

        Qt's layouts also ask for the height at the column's minimum width (a pass for
        the minimum size, which a chat at its real width never takes): laying the text
        out there cost as much as the real layout, at every streamed update. The text's
        area scaled to that width, plus a line, bounds it from above; at the width the
        label gets, the height is always laid out."""
        own = self.width()
        if not self.isVisible() or own < 200 or width <= 0 or width * 2 > own:
            return None
        at_own = self.heightForWidth(own)
        line = self.fontMetrics().height()
        lines = -(-at_own * own // (width * line)) + 1  # ceil, then one more
        return lines * line

    def sizeHint(self) -> QSize:
        line = self.fontMetrics().height()
        return QSize(line * 20, line) if self.text() else QSize(0, 0)

    def minimumSizeHint(self) -> QSize:
        return QSize(0, self.fontMetrics().height() if self.text() else 0)

    def changeEvent(self, event: QEvent) -> None:
        if event.type() in (QEvent.Type.FontChange, QEvent.Type.StyleChange):
            self._hfw.clear()
            if self._pinned is not None:
                self.setFixedHeight(self.heightForWidth(self.width()))
        super().changeEvent(event)
