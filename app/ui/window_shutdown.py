"""The main window's end: asking before replies being written are stopped, then the close
(tabs and settings saved, the server stopped, the engine freed) and ``shutDown``."""

from __future__ import annotations

import base64
import logging
import time
from typing import TYPE_CHECKING

from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import QMainWindow, QMessageBox

if TYPE_CHECKING:
    from app.ui.window_protocols import ShutdownWindow

log = logging.getLogger(__name__)

SHUTDOWN_TIMEOUT_MS = 1500  # the worker gets this long to save the tabs' states


class WindowShutdown:
    """How ``win`` closes: once, saving everything, even if the engine does not answer
    (``window``: the window as a widget, the parent of the question, what is closed)."""

    def __init__(self, win: ShutdownWindow, window: QMainWindow) -> None:
        self.win = win
        self.window = window
        self.closing = False
        self.shut_down = False
        self._quit_confirmed = False
        self._quit_box: QMessageBox | None = None

    def request_quit(self) -> None:
        """Quit (the menu, Ctrl+Q): asks first while replies are being written."""
        if self.confirm_quit():
            self.window.close()

    def confirm_quit(self) -> bool:
        """True when closing may go on now; else a question is asked (window-modal, the
        event loop keeps running) and a "Quit" answer closes the window."""
        win = self.win
        writing = [t for t in win.tabs() if t.generating]
        if not writing or self._quit_confirmed or self.closing:
            return True
        if self._quit_box is not None:
            self._quit_box.raise_()
            return False
        n = len(writing)
        box = QMessageBox(self.window)
        box.setObjectName("quit-confirm")
        box.setIcon(QMessageBox.Icon.Question)
        box.setWindowTitle("Quit LlamaDesk?")
        box.setText(
            "A reply is still being written." if n == 1 else f"{n} replies are still being written."
        )
        box.setInformativeText(
            "Quitting stops it; what was written so far is kept, marked as stopped."
            if n == 1
            else "Quitting stops them; what was written so far is kept, marked as stopped."
        )
        quit_button = box.addButton("Quit", QMessageBox.ButtonRole.AcceptRole)
        quit_button.setObjectName("quit-anyway")
        keep = box.addButton("Keep writing", QMessageBox.ButtonRole.RejectRole)
        keep.setObjectName("keep-writing")
        box.setDefaultButton(keep)

        def answered(_result: int) -> None:
            self._quit_box = None
            if box.clickedButton() is quit_button:
                self._quit_confirmed = True
                self.window.close()
            box.deleteLater()

        box.finished.connect(answered)
        self._quit_box = box
        box.open()
        return False

    def close_event(self, event: QCloseEvent) -> bool:
        """True when the close started now: the window then calls :meth:`on_shutdown_done`
        when the session has shut down, or after SHUTDOWN_TIMEOUT_MS at the latest."""
        win = self.win
        if self.shut_down:
            event.accept()
            return False
        event.ignore()
        # The window's close button asks while replies are written (as Quit does); a
        # programmatic close (the session ending, tests) does not.
        if event.spontaneous() and not self.confirm_quit():
            return False
        if self.closing:
            return False
        self.closing = True
        win.stop_flushing()
        win.session.cancel_load()  # a model still loading is given up, not waited for
        win.session.stop(None)
        for tab in win.tabs():
            tab.save_settings()  # a stopped reply is recorded by the session's wind-down
        win.save_tabs()
        win.app_settings.window_geometry = base64.b64encode(
            bytes(self.window.saveGeometry().data())
        ).decode()
        win.app_settings.window_state = base64.b64encode(
            bytes(self.window.saveState().data())
        ).decode()
        win.save_app_settings()
        self._shutdown_started = time.monotonic()
        win.server.stop()  # no request reaches a session that is shutting down
        win.worker.shutdown()
        return True

    def on_shutdown_done(self) -> bool:
        """Free what is left and close the window; True the first time (the window then
        says it has shut down)."""
        win = self.win
        if self.shut_down:
            return False
        self.shut_down = True
        win.stop_flushing()
        win.cancel_save_tabs()
        win.sidebar.stop_refreshing()
        win.sidebar.transfers.wait_idle(10_000)  # an export under way is finished
        win.downloads.close(0.5)  # a running download is paused, its partial file kept
        if not win.worker.join(0.5):
            log.warning("the engine thread did not stop in time")
        panel = win.settings_panel()
        if panel is not None:
            panel.close()
        if win.models_dialog is not None:
            win.models_dialog.close()
        self.window.close()
        return True
