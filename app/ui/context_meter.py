"""The chat's context meter: what the conversation holds, and the room kept for the reply.

One bar in two parts, so both truths show: the held tokens (solid, they grow while a reply
streams) and the reply's reserve after them (lighter: the model cannot use that room for
history). A plain progress bar could show only their sum, which stands still while a reply
is written into its own reserve.
"""

from __future__ import annotations

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPaintEvent, QPalette
from PySide6.QtWidgets import QSizePolicy, QWidget


class ContextMeter(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._held = 0
        self._reserved = 0
        self._total = 0
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setMaximumWidth(180)
        self.setFixedHeight(12)

    def sizeHint(self) -> QSize:
        return QSize(180, 12)

    def set_figures(self, held: int, reserved: int, total: int) -> None:
        """``held`` tokens and ``reserved`` for the reply, out of ``total`` (0: no model)."""
        total = max(0, total)
        held = min(max(0, held), total)
        reserved = min(max(0, reserved), total - held)
        if (held, reserved, total) != (self._held, self._reserved, self._total):
            self._held, self._reserved, self._total = held, reserved, total
            self.update()

    def held(self) -> int:
        return self._held

    def reserved(self) -> int:
        return self._reserved

    def value(self) -> int:
        """What the model's context is taken by: held plus the reply's reserve."""
        return self._held + self._reserved

    def maximum(self) -> int:
        return self._total

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        palette = self.palette()
        rect = QRectF(self.rect()).adjusted(0.5, 0.5, -0.5, -0.5)
        painter.setPen(palette.color(QPalette.ColorRole.Mid))
        painter.setBrush(palette.color(QPalette.ColorRole.Base))
        painter.drawRoundedRect(rect, 3, 3)
        if self._total <= 0:
            return
        inner = rect.adjusted(1.5, 1.5, -1.5, -1.5)
        held_w = inner.width() * self._held / self._total
        reserve_w = inner.width() * self._reserved / self._total
        accent = palette.color(QPalette.ColorRole.Highlight)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(accent)
        painter.drawRect(QRectF(inner.left(), inner.top(), held_w, inner.height()))
        light = QColor(accent)
        light.setAlphaF(0.35)
        painter.setBrush(light)
        painter.drawRect(QRectF(inner.left() + held_w, inner.top(), reserve_w, inner.height()))
