"""A status line's label whose text changes without laying the whole tab out again.

A QLabel's ``setText`` asks its parent's layout to run again, and a layout run inside a
tab page always goes on up (``QLayout::activate`` ends in the page's ``updateGeometry``)
to the QTabWidget, whose answer to a layout request is to repaint the whole tab: the chat,
the composer, every button. The streaming tab's speed and token figures change a few times
a second, so the tab was repainted that often (measured with the window benchmark: every
figure update repainted the 836x645 tab, not the 21 px status row).

:class:`IsolatedLabel` holds the label as a child without a layout, so the label's
requests stop at it; it asks its own layout for a new geometry only when the label's size
hint really changed (a longer text), which figures of the same width do not.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QSize, Qt
from PySide6.QtGui import QPainter, QPaintEvent, QResizeEvent, QShowEvent
from PySide6.QtWidgets import QLabel, QWidget


class ElidedLabel(QLabel):
    """A one-line label that ends its text with "…" where it is cut (``text()`` stays
    whole: the tab's tooltip says all of it). A status squeezed by the buttons beside it
    showed "on loopbac" and "cache restored fro", cut mid-word."""

    def paintEvent(self, event: QPaintEvent) -> None:
        text = self.text()
        rect = self.contentsRect()
        metrics = self.fontMetrics()
        if metrics.horizontalAdvance(text) <= rect.width():
            super().paintEvent(event)
            return
        painter = QPainter(self)
        shown = metrics.elidedText(text, Qt.TextElideMode.ElideRight, rect.width())
        self.style().drawItemText(
            painter,
            rect,
            int(self.alignment()),
            self.palette(),
            self.isEnabled(),
            shown,
            self.foregroundRole(),
        )

    def elided(self) -> bool:
        """Whether the text is cut at the label's width now."""
        return self.fontMetrics().horizontalAdvance(self.text()) > self.contentsRect().width()


class IsolatedLabel(QWidget):
    """``label`` filling this widget; its text changes reach the layout around only when
    its size hint changes (see the module docstring)."""

    def __init__(self, label: QLabel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.label = label
        label.setParent(self)
        self.setSizePolicy(label.sizePolicy())
        self._hint = label.sizeHint()
        self._min_hint = label.minimumSizeHint()
        self.layout_requests = 0  # the requests passed on (the tests count them)

    def sizeHint(self) -> QSize:
        return self.label.sizeHint()

    def minimumSizeHint(self) -> QSize:
        return self.label.minimumSizeHint()

    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.LayoutRequest:
            hint, min_hint = self.label.sizeHint(), self.label.minimumSizeHint()
            if hint != self._hint or min_hint != self._min_hint:
                self._hint, self._min_hint = hint, min_hint
                self.layout_requests += 1
                self.updateGeometry()
            return True
        return super().event(event)

    def resizeEvent(self, event: QResizeEvent) -> None:
        self.label.setGeometry(self.rect())
        super().resizeEvent(event)

    def showEvent(self, event: QShowEvent) -> None:
        # A text set while hidden (a reopened tab's meter) posts no layout request here:
        # its hint is looked at now, or the label stays cut at the old width ("~520 / 4,").
        hint, min_hint = self.label.sizeHint(), self.label.minimumSizeHint()
        if hint != self._hint or min_hint != self._min_hint:
            self._hint, self._min_hint = hint, min_hint
            self.updateGeometry()
        super().showEvent(event)
