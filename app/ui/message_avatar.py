"""A message's role avatar, drawn with QPainter."""

from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QPainter, QPainterPath, QPaintEvent
from PySide6.QtWidgets import QWidget

from app.ui.message_data import ROLE_NAMES
from app.ui.theme import chat_colors

AVATAR_SIZE = 28


class Avatar(QWidget):
    """A role's round badge: a person for the user, a spark for the assistant."""

    def __init__(self, role: str, dark: bool, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("avatar")
        self._role = role
        self._dark = dark
        self.setFixedSize(AVATAR_SIZE, AVATAR_SIZE)
        self.setAccessibleName(ROLE_NAMES.get(role, role))

    def set_dark(self, dark: bool) -> None:
        self._dark = dark
        self.update()

    def paintEvent(self, event: QPaintEvent) -> None:
        c = chat_colors(self._dark)
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        p.setPen(Qt.PenStyle.NoPen)
        fill = c.avatar_user if self._role == "user" else c.avatar_assistant
        p.setBrush(QColor(fill))
        p.drawEllipse(QRectF(0, 0, AVATAR_SIZE, AVATAR_SIZE))
        p.setBrush(QColor(c.avatar_fg))
        m = AVATAR_SIZE / 28  # drawn on a 28 px grid
        if self._role == "user":
            p.drawEllipse(QPointF(14 * m, 10.5 * m), 4.2 * m, 4.2 * m)
            body = QPainterPath(QPointF(6.5 * m, 21.5 * m))
            body.cubicTo(
                QPointF(7 * m, 15 * m), QPointF(21 * m, 15 * m), QPointF(21.5 * m, 21.5 * m)
            )
            body.closeSubpath()
            p.drawPath(body)
        else:
            star = QPainterPath(QPointF(14 * m, 6 * m))
            for x, y in ((16 * m, 12 * m), (22 * m, 14 * m), (16 * m, 16 * m)):
                star.lineTo(x, y)
            for x, y in ((14 * m, 22 * m), (12 * m, 16 * m), (6 * m, 14 * m), (12 * m, 12 * m)):
                star.lineTo(x, y)
            star.closeSubpath()
            p.drawPath(star)
        p.end()
