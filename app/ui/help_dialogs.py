"""Help ▸ Keyboard shortcuts and Help ▸ About.

The shortcuts list is read from the window's own actions (their text and shortcut), so it
cannot drift from what the keys really do; the composer's keys, which are not actions, are
listed beside them.
"""

from __future__ import annotations

import html
import platform
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import metadata

from PySide6 import __version__ as pyside_version
from PySide6.QtCore import Qt, qVersion
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app import __version__, paths


@dataclass(frozen=True)
class Shortcut:
    keys: str
    what: str


def composer_shortcuts(enter_sends: bool = True) -> tuple[Shortcut, ...]:
    """The message box's keys (handled by the composer, not window actions)."""
    send, newline = ("Enter", "Shift+Enter") if enter_sends else ("Ctrl+Enter", "Enter")
    return (
        Shortcut(send, "Send the message"),
        Shortcut(newline, "New line in the message"),
        Shortcut("Esc", "Stop the reply, or cancel an edit"),
    )


def action_shortcuts(actions: Iterable[QAction]) -> list[Shortcut]:
    """Every action with a shortcut: its keys as this platform writes them, its text."""
    out: list[Shortcut] = []
    for action in actions:
        keys = action.shortcut()
        if keys.isEmpty():
            continue
        text = action.text().replace("&", "").rstrip("…").strip()
        out.append(Shortcut(keys.toString(QKeySequence.SequenceFormat.NativeText), text))
    return out


class ShortcutsDialog(QDialog):
    def __init__(self, shortcuts: list[Shortcut], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("shortcuts-dialog")
        self.setWindowTitle("Keyboard shortcuts")
        layout = QVBoxLayout(self)
        self.table = QTableWidget(len(shortcuts), 2, self)
        self.table.setObjectName("shortcuts-table")
        self.table.setHorizontalHeaderLabels(["Keys", "Does"])
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.setSelectionMode(QTableWidget.SelectionMode.NoSelection)
        for row, shortcut in enumerate(shortcuts):
            self.table.setItem(row, 0, QTableWidgetItem(shortcut.keys))
            self.table.setItem(row, 1, QTableWidgetItem(shortcut.what))
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        layout.addWidget(self.table)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        self.resize(460, 420)

    def rows(self) -> list[tuple[str, str]]:
        def text(row: int, column: int) -> str:
            item = self.table.item(row, column)
            return item.text() if item is not None else ""

        return [(text(r, 0), text(r, 1)) for r in range(self.table.rowCount())]


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def about_html() -> str:
    rows = [
        ("LlamaDesk", __version__),
        ("llama-cpp-python (llama.cpp)", _version("llama_cpp_python")),
        ("Qt / PySide6", f"{qVersion()} / {pyside_version}"),
        ("Python", platform.python_version()),
        ("Data folder", str(paths.data_dir())),
    ]
    table = "".join(
        f"<tr><td><b>{html.escape(k)}</b>&nbsp;&nbsp;</td><td>{html.escape(v)}</td></tr>"
        for k, v in rows
    )
    return (
        "<p>Chat with language models on this computer, from GGUF files. "
        "Your conversations stay on this computer.</p>"
        f"<table>{table}</table>"
    )


class AboutDialog(QDialog):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("about-dialog")
        self.setWindowTitle("About LlamaDesk")
        layout = QVBoxLayout(self)
        title = QLabel(f"<h2>LlamaDesk {html.escape(__version__)}</h2>")
        layout.addWidget(title)
        self.text = QLabel(about_html())
        self.text.setObjectName("about-text")
        self.text.setWordWrap(True)
        self.text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.text)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
