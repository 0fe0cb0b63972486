"""A dismissible bar for errors, notices and Undo (the window's, below the chats, and
each tab's own)."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt, QTimer, Slot
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QToolButton, QWidget


class MessageBar(QFrame):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("message-bar")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(10, 4, 4, 4)
        self.label = QLabel()
        self.label.setObjectName("message-text")
        self.label.setWordWrap(True)
        self.label.setTextFormat(Qt.TextFormat.PlainText)
        layout.addWidget(self.label, 1)
        self.action_button = QPushButton()
        self.action_button.setObjectName("message-action")
        self.action_button.clicked.connect(self._run_action)
        layout.addWidget(self.action_button)
        close = QToolButton()
        close.setText("✕")
        close.setAutoRaise(True)
        close.setToolTip("Dismiss")
        close.clicked.connect(self.dismiss)
        layout.addWidget(close)
        self._action: Callable[[], None] | None = None
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self.dismiss)
        self.error = False
        self.setVisible(False)

    def show_message(
        self,
        text: str,
        error: bool = True,
        action: tuple[str, Callable[[], None]] | None = None,
        timeout_ms: int = 0,
    ) -> None:
        self.error = error
        self.label.setText(text)
        self.setStyleSheet(
            "#message-bar { background: palette(base); border-left: 4px solid %s; }"
            % ("#d33" if error else "#2a7")
        )
        if action is not None:
            self.action_button.setText(action[0])
            self._action = action[1]
            self.action_button.setVisible(True)
        else:
            self._action = None
            self.action_button.setVisible(False)
        self.setVisible(True)
        if timeout_ms:
            self._timer.start(timeout_ms)
        else:
            self._timer.stop()

    def text(self) -> str:
        return self.label.text() if self.isVisible() else ""

    @Slot()
    def _run_action(self) -> None:
        action, self._action = self._action, None
        self.dismiss()
        if action is not None:
            action()

    @Slot()
    def dismiss(self) -> None:
        self._timer.stop()
        self._action = None
        self.setVisible(False)
