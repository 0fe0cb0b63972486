"""Models -> Downloads…: the window's download queue on its own, outside Discover.

The same :class:`~app.ui.downloads_panel.Downloads` queue Discover uses (one per window),
so a download started in Discover, on the welcome page or left unfinished by an earlier
run is listed, paused, resumed and cancelled here as well.
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from app.ui.downloads_panel import Downloads, DownloadsPanel

__all__ = ["DownloadsDialog"]


class DownloadsDialog(QDialog):
    """The queue with a way to find more models; ``discoverRequested`` asks the window to
    show Discover. Not modal: downloads go on while the user chats."""

    discoverRequested = Signal()

    def __init__(self, downloads: Downloads, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("downloads-dialog")
        self.setWindowTitle("Downloads")
        self.resize(760, 360)
        self.downloads = downloads
        layout = QVBoxLayout(self)
        self.panel = DownloadsPanel(
            downloads,
            empty_text="Nothing is downloading. Models -> Discover… finds models to download.",
        )
        scroll = QScrollArea()
        scroll.setObjectName("downloads-scroll")
        scroll.setWidgetResizable(True)
        scroll.setWidget(self.panel)
        layout.addWidget(scroll, 1)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.discover_button = QPushButton("Discover models…")
        self.discover_button.setObjectName("downloads-discover")
        buttons.addButton(self.discover_button, QDialogButtonBox.ButtonRole.ActionRole)
        self.discover_button.clicked.connect(self.discoverRequested)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
