"""Start the window: ``llamadesk`` (and ``python -m app``) call :func:`run`.

asyncio runs on Qt's event loop through qasync (``qasync.run``: Python 3.11's
``asyncio.run`` has no ``loop_factory``). The window never blocks in an ``asyncSlot``; the
only modal dialogs (database problems) run before the loop starts.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import traceback
from types import TracebackType

from PySide6.QtCore import QObject, QSize, QTimer, Signal
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication, QMessageBox

from app import crash_record, paths
from app.engine import llama_log
from app.errors import LlamaDeskError
from app.storage import AppSettings, Database, DatabaseOpenError, load_settings, move_aside
from app.ui.main_window import MainWindow
from app.ui.theme import apply_theme

log = logging.getLogger(__name__)

_window: MainWindow | None = None

ICON_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)
# LLAMADESK_EXIT_AFTER_SHOW=1 (the packaged-app test): close this long after the window
# was shown and the event loop ran, saving as usual, and exit with code 0.
EXIT_AFTER_SHOW_ENV = "LLAMADESK_EXIT_AFTER_SHOW"
EXIT_AFTER_SHOW_MS = 300


def app_icon() -> QIcon:
    """The window icon, from ``resources/icons/llamadesk-<size>.png`` (each size there)."""
    icon = QIcon()
    folder = paths.resources_dir() / "icons"
    for size in ICON_SIZES:
        path = folder / f"llamadesk-{size}.png"
        if path.is_file():
            icon.addFile(str(path), QSize(size, size))
        else:
            log.warning("icon missing: %s", path)
    return icon


class _LogBridge(QObject):
    """Carries log lines from any thread to the GUI thread (a queued signal)."""

    line = Signal(str)


class WindowLogHandler(logging.Handler):
    """llama.cpp's errors in the window's message bar, where the user sees them.

    Warnings stay in the log (collapsed by :mod:`app.engine.llama_log`; on stderr with
    ``--verbose``): the ones that matter to a user (a full context, a model that failed to
    load) already come as the session's own messages, in the tab or the window."""

    def __init__(self, window: MainWindow) -> None:
        super().__init__(logging.ERROR)
        self.bridge = _LogBridge()
        self.bridge.line.connect(window.show_message)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.bridge.line.emit(f"llama.cpp: {record.getMessage()}")
        except Exception:  # never raise into llama.cpp's log callback
            self.handleError(record)


def install_log_handler(window: MainWindow) -> WindowLogHandler:
    handler = WindowLogHandler(window)
    logging.getLogger("llama.cpp").addHandler(handler)
    return handler


def exit_after_show() -> bool:
    return os.environ.get(EXIT_AFTER_SHOW_ENV, "") == "1"


def install_excepthook() -> None:
    """Unexpected exceptions in slots are shown in the window's message bar, not fatal."""
    previous = sys.excepthook

    def hook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        if issubclass(kind, KeyboardInterrupt):
            previous(kind, exc, tb)
            return
        log.error("unexpected error:\n%s", "".join(traceback.format_exception(kind, exc, tb)))
        window = _window
        text = (
            str(exc)
            if isinstance(exc, LlamaDeskError)
            else f"Something went wrong ({kind.__name__}: {exc}). Your conversations are safe; "
            "the details are in the log."
        )
        if window is not None and not window.is_shut_down():
            window.show_message(text)
        else:
            print(text, file=sys.stderr)

    sys.excepthook = hook


def open_database() -> tuple[Database, bool] | None:
    """Open the database, offering the ways out storage provides; None to quit."""
    try:
        return Database.open(), False
    except DatabaseOpenError as exc:
        box = QMessageBox(QMessageBox.Icon.Warning, "LlamaDesk", str(exc))
        read_only = move = None
        if "read_only" in exc.ways_out:
            read_only = box.addButton("Open read-only", QMessageBox.ButtonRole.AcceptRole)
        if "move_aside" in exc.ways_out:
            move = box.addButton(
                "Move it aside and start fresh", QMessageBox.ButtonRole.DestructiveRole
            )
        box.addButton("Quit", QMessageBox.ButtonRole.RejectRole)
        box.exec()  # before the event loop runs: not inside an asyncSlot
        clicked = box.clickedButton()
        try:
            if clicked is not None and clicked is read_only:
                return Database.open(exc.path, read_only=True), True
            if clicked is not None and clicked is move:
                moved = move_aside(exc.path)
                log.warning("moved the database aside to %s", moved)
                return Database.open(exc.path), False
        except LlamaDeskError as again:
            QMessageBox.critical(None, "LlamaDesk", str(again))
        return None


def start_window(window: MainWindow) -> None:
    """Start the window in this order: the last session's crash is read first (keeping
    this session's record removes it), this session's record is kept before the start
    posts the model's load (a crash while loading is then recorded too), then the start
    says the crash and holds that model back."""
    crash = crash_record.last_window_crash()
    crash_record.watch_window()
    window.start(crash=crash)


def run(argv: list[str] | None = None) -> int:
    """Open the window and run until it is closed; returns the exit code."""
    global _window
    app = QApplication.instance()
    if app is None:
        app = QApplication(argv if argv is not None else sys.argv)
    assert isinstance(app, QApplication)
    app.setApplicationName("LlamaDesk")
    app.setOrganizationName("LlamaDesk")
    app.setDesktopFileName("llamadesk")  # matches the .desktop entry (Wayland, taskbars)
    app.setWindowIcon(app_icon())
    app.setQuitOnLastWindowClosed(False)  # the window closes after saving; we quit then
    install_excepthook()
    settings = load_settings(AppSettings)
    apply_theme(settings.theme, app)
    opened = open_database()
    if opened is None:
        return 1
    db, read_only = opened
    window = MainWindow(db, settings, read_only=read_only)
    _window = window
    log_handler = install_log_handler(window)
    if read_only:
        window.show_message(
            "The conversation database is open read-only: you can read your conversations, "
            "but nothing new is saved."
        )

    async def main() -> int:
        done = asyncio.Event()
        window.shutDown.connect(done.set)
        window.show()
        start_window(window)
        if exit_after_show():
            QTimer.singleShot(EXIT_AFTER_SHOW_MS, window.close)
        await done.wait()
        return 0

    import qasync

    try:
        code = int(qasync.run(main()))
    finally:
        crash_record.end_window_watch()
        _window = None
        logging.getLogger("llama.cpp").removeHandler(log_handler)
        llama_log.flush_repeats()
        db.close()
    return code
