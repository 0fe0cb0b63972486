"""The main window's Hub side: the Discover dialog and the downloads queue's window and
notices (one queue, ``win.downloads``, shown in both)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtWidgets import QMainWindow

if TYPE_CHECKING:
    from app.hub.catalog import CatalogModel
    from app.ui.discover import DiscoverDialog
    from app.ui.downloads_dialog import DownloadsDialog
    from app.ui.window_protocols import HubWindow


class WindowHub:
    """Discover and the downloads of ``win`` (each dialog made on first use, a child of
    ``window``)."""

    def __init__(self, win: HubWindow, window: QMainWindow) -> None:
        self.win = win
        self.window = window
        self._discover: DiscoverDialog | None = None
        self._downloads_dialog: DownloadsDialog | None = None

    def discover(self) -> DiscoverDialog:
        if self._discover is None:
            from app.ui.discover import DiscoverDialog

            win = self.win
            self._discover = DiscoverDialog(
                win.downloads, self.window, win.current_context_settings
            )
        return self._discover

    def show_discover(self) -> None:
        dialog = self.discover()
        dialog.show()
        dialog.raise_()
        dialog.activateWindow()

    def download_catalog(self, model: CatalogModel) -> None:
        """A curated model's Download button: looked up on the Hub, then queued."""
        dialog = self.discover()
        dialog.download_catalog(model)
        self.show_discover()

    def downloads_dialog(self) -> DownloadsDialog:
        """The downloads queue in a window of its own (the same queue Discover shows)."""
        if self._downloads_dialog is None:
            from app.ui.downloads_dialog import DownloadsDialog

            self._downloads_dialog = DownloadsDialog(self.win.downloads, self.window)
            self._downloads_dialog.discoverRequested.connect(self.win.show_discover)
        return self._downloads_dialog

    def show_downloads(self) -> None:
        dialog = self.downloads_dialog()
        dialog.show()
        dialog.raise_()
        dialog.activateWindow()

    def on_downloads_restored(self, count: int) -> None:
        if count:
            self.win.message_bar.show_message(
                f"{count} download{'s' if count > 1 else ''} left unfinished: "
                "Resume continues where it stopped.",
                error=False,
                action=("Show downloads", self.win.show_downloads),
                timeout_ms=15000,
            )

    def on_download_finished(self, path: str) -> None:
        win = self.win
        win.add_model_files([path])
        win.message_bar.show_message(
            f"Downloaded {Path(path).name}; it is in the model library.",
            error=False,
            action=("Load it", lambda: win.load_model(path)),
            timeout_ms=15000,
        )
