"""Keeping a dialog on screen: at most 90% of the free area, inside it, centred on its
window the first time (a dialog larger than a small screen would hide its buttons)."""

from __future__ import annotations

from PySide6.QtWidgets import QWidget


def fit_to_screen(dialog: QWidget, centre: bool) -> None:
    """Shrink ``dialog`` to 90% of its screen's free area if larger and move it inside that
    area; ``centre``: over its parent window (else where it is)."""
    parent = dialog.parentWidget()
    screen = dialog.screen()
    if parent is not None and parent.screen() is not None:
        screen = parent.screen()
    if screen is None:
        return
    area = screen.availableGeometry()
    width = min(dialog.width(), int(area.width() * 0.9))
    height = min(dialog.height(), int(area.height() * 0.9))
    dialog.resize(max(width, dialog.minimumSizeHint().width()), height)
    frame = dialog.frameGeometry()
    x, y = frame.x(), frame.y()
    if centre:
        middle = parent.frameGeometry().center() if parent is not None else area.center()
        x, y = middle.x() - frame.width() // 2, middle.y() - frame.height() // 2
    x = max(area.left(), min(x, area.right() + 1 - frame.width()))
    y = max(area.top(), min(y, area.bottom() + 1 - frame.height()))
    dialog.move(x, y)
