"""The header button of a collapsible block (a reasoning model's thinking, a tool call):
flat, checkable (checked: expanded), with a right arrow that turns down when open."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QToolButton, QWidget


def disclosure_toggle(parent: QWidget, object_name: str, tip: str) -> QToolButton:
    button = QToolButton(parent)
    button.setObjectName(object_name)
    button.setCheckable(True)
    button.setAutoRaise(True)
    button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
    button.setArrowType(Qt.ArrowType.RightArrow)
    button.setToolTip(tip)
    return button


def show_expanded(button: QToolButton, expanded: bool) -> None:
    button.setArrowType(Qt.ArrowType.DownArrow if expanded else Qt.ArrowType.RightArrow)
