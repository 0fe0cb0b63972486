"""The message actions' drawn icons (theme coloured; no files to find in a bundle)."""

from __future__ import annotations

import math

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QIcon, QPainter, QPainterPath, QPen, QPixmap, QPolygonF

_icons: dict[tuple[str, str], QIcon] = {}


def blank_icon() -> QIcon:
    """A transparent icon: a hidden action draws nothing (a null icon shows its text)."""
    icon = _icons.get(("blank", ""))
    if icon is None:
        pixmap = QPixmap(32, 32)
        pixmap.setDevicePixelRatio(2.0)
        pixmap.fill(Qt.GlobalColor.transparent)
        icon = _icons[("blank", "")] = QIcon(pixmap)
    return icon


def action_icon(name: str, color: QColor) -> QIcon:
    """A 16 px line icon: copy, edit, regenerate, fork, delete or copied (a check mark)."""
    key = (name, color.name())
    icon = _icons.get(key)
    if icon is not None:
        return icon
    pixmap = QPixmap(32, 32)
    pixmap.setDevicePixelRatio(2.0)
    pixmap.fill(Qt.GlobalColor.transparent)
    p = QPainter(pixmap)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    pen = QPen(color, 1.5)
    pen.setCapStyle(Qt.PenCapStyle.RoundCap)
    pen.setJoinStyle(Qt.PenJoinStyle.RoundJoin)
    p.setPen(pen)
    p.setBrush(Qt.BrushStyle.NoBrush)
    if name == "copy":
        p.drawRoundedRect(QRectF(5.5, 2.5, 8, 9), 1.5, 1.5)
        p.setCompositionMode(QPainter.CompositionMode.CompositionMode_Clear)
        p.fillRect(QRectF(1.5, 4.5, 10, 11), Qt.GlobalColor.transparent)
        p.setCompositionMode(QPainter.CompositionMode.CompositionMode_SourceOver)
        p.drawRoundedRect(QRectF(2.5, 5.5, 8, 9), 1.5, 1.5)
    elif name == "edit":
        pencil = [(11, 2.5), (13.5, 5), (5.5, 13), (2.5, 13.5), (3, 10.5)]
        p.drawPolygon(QPolygonF([QPointF(x, y) for x, y in pencil]))
        p.drawLine(QPointF(9.5, 4), QPointF(12, 6.5))
    elif name == "regenerate":
        p.drawArc(QRectF(3, 3, 10, 10), 100 * 16, 290 * 16)
        a = math.radians(30)  # the arc's end, where the arrow points on
        end = QPointF(8 + 5 * math.cos(a), 8 - 5 * math.sin(a))
        p.drawLine(end, end + QPointF(-3.2, -0.6))
        p.drawLine(end, end + QPointF(0.6, -3.2))
    elif name == "fork":
        for x, y in ((4.5, 3.5), (4.5, 12.5), (11.5, 5.5)):
            p.drawEllipse(QPointF(x, y), 1.6, 1.6)
        p.drawLine(QPointF(4.5, 5.1), QPointF(4.5, 10.9))
        path = QPainterPath(QPointF(11.5, 7.1))
        path.cubicTo(QPointF(11.5, 10), QPointF(5, 8.5), QPointF(4.6, 10.9))
        p.drawPath(path)
    elif name == "delete":  # a bin: lid, handle, body with two lines
        p.drawLine(QPointF(2.5, 4.5), QPointF(13.5, 4.5))
        p.drawPolyline(
            QPolygonF([QPointF(6, 4.5), QPointF(6.5, 2.5), QPointF(9.5, 2.5), QPointF(10, 4.5)])
        )
        body = [(4, 4.5), (4.8, 13.5), (11.2, 13.5), (12, 4.5)]
        p.drawPolyline(QPolygonF([QPointF(x, y) for x, y in body]))
        p.drawLine(QPointF(6.8, 6.8), QPointF(7, 11.3))
        p.drawLine(QPointF(9.2, 6.8), QPointF(9, 11.3))
    elif name == "copied":
        p.drawPolyline(QPolygonF([QPointF(3, 8.5), QPointF(6.5, 12), QPointF(13, 4.5)]))
    p.end()
    icon = QIcon(pixmap)
    _icons[key] = icon
    return icon
