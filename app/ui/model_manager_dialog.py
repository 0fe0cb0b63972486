"""The model manager's window: :class:`ModelManagerDialog` shows a
:class:`~app.ui.model_manager.ModelManager` beside the chat (not modal), instead of a dock
that took most of the chat's height."""

from __future__ import annotations

from typing import ClassVar

from PySide6.QtCore import QByteArray, QSize
from PySide6.QtGui import QHideEvent, QShowEvent
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QVBoxLayout, QWidget

from app.ui.dialog_geometry import fit_to_screen

__all__ = ["ModelManagerDialog"]


class ModelManagerDialog(QDialog):
    """The model manager in a window of its own: not modal (chats go on beside it),
    resizable, at most 90% of the screen, and where the user last left it (in-process:
    the geometry is kept for as long as the app runs, also across instances).

    Closing only hides it; the window keeps the instance and shows it again.
    """

    DEFAULT_SIZE = QSize(960, 560)
    _last_geometry: ClassVar[QByteArray | None] = None

    def __init__(self, manager: QWidget, parent: QWidget | None = None) -> None:
        """``manager``: the model manager widget (typed as a widget: the manager module
        imports this one, never the other way)."""
        super().__init__(parent)
        self.setObjectName("model-manager-dialog")
        self.setWindowTitle("Model manager")
        self.setModal(False)
        self.setSizeGripEnabled(True)
        self._manager = manager
        layout = QVBoxLayout(self)
        layout.addWidget(manager, 1)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.setObjectName("closeButtons")
        buttons.rejected.connect(self.reject)
        close = buttons.button(QDialogButtonBox.StandardButton.Close)
        close.setAutoDefault(False)  # Enter in the table loads a model, never closes
        layout.addWidget(buttons)
        self.resize(self.DEFAULT_SIZE)
        self._placed = False

    def manager(self) -> QWidget:
        return self._manager

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        if not self._placed:
            self._place()

    def hideEvent(self, event: QHideEvent) -> None:
        ModelManagerDialog._last_geometry = self.saveGeometry()
        super().hideEvent(event)

    def _place(self) -> None:
        """First show: where it was last (this run), else centred on the window; always
        inside the screen's free area."""
        self._placed = True
        if ModelManagerDialog._last_geometry is not None and self.restoreGeometry(
            ModelManagerDialog._last_geometry
        ):
            return
        fit_to_screen(self, centre=True)
