"""What the model manager shows: :class:`ModelLibraryView`, the widgets (toolbar, the
table of models or a page on getting one, load buttons and progress, the folder list) and
the listing from the database, with the load state the buttons follow.

:class:`~app.ui.model_manager.ModelManager` builds on it with what the user does there
(scan, add, remove, load).
"""

from __future__ import annotations

import html
import os
import time
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QEvent, Qt, Slot
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app.engine import ContextSettings
from app.storage import Database, ModelEntry, StorageError
from app.ui.devices_plan import PlanLabel
from app.ui.model_table import (
    PATH_ROLE,
    fill_row,
    new_model_table,
    recolor_broken_rows,
    same_file_key,
    show_status,
    shown_names,
)
from app.ui.theme import colors

__all__ = ["ModelLibraryView"]

_EMPTY_TITLE = "<h3>No models yet</h3>"
_EMPTY_TEXT = """
<h3>No models yet</h3>
<p>LlamaDesk chats with language models stored as <b>GGUF</b> files: one file per model,
usually named like <code>Llama-3.2-3B-Instruct-Q4_K_M.gguf</code>.</p>
<p><b>Where to get one:</b> Hugging Face hosts thousands. Search for a model name followed
by “GGUF” (for example on
<a href="https://huggingface.co/models?library=gguf">huggingface.co/models?library=gguf</a>)
and download one <code>.gguf</code> file. A model of 1 to 4 billion parameters in
<code>Q4_K_M</code> runs well on most computers; it needs about as much free memory as the
file's size, plus some for the conversation.</p>
<p>Then click <b>Add file…</b> to add a downloaded file, or <b>Add folder…</b> to have
LlamaDesk list every GGUF file in a folder (and find new ones there later).</p>
"""

_NO_FILES_TEXT = """
<h3>No GGUF files found</h3>
<p>None of your model folders contains a <code>.gguf</code> file yet. Download a GGUF
model (for example from
<a href="https://huggingface.co/models?library=gguf">huggingface.co/models?library=gguf</a>)
into one of the folders below and click <b>Rescan</b>, or click <b>Add file…</b>.</p>
"""


class ModelLibraryView(QWidget):
    """The model manager's widgets and listing; see the module docstring."""

    def __init__(self, db: Database, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._db = db
        self._free_cache, self._free_at = 0, -1e9
        self._entries: list[ModelEntry] = []
        self._loaded_path: str | None = None
        self._loading_path: str | None = None
        self._load_errors: dict[str, str] = {}  # same-file key -> message
        self._scanning = False
        self._build()

    # -- construction --------------------------------------------------------------------

    def _build(self) -> None:
        outer = QVBoxLayout(self)

        toolbar = QHBoxLayout()
        self._add_file_button = QPushButton("Add file…")
        self._add_file_button.setObjectName("addFileButton")
        self._add_file_button.setToolTip("Add one or more .gguf files to the library.")
        self._add_folder_button = QPushButton("Add folder…")
        self._add_folder_button.setObjectName("addFolderButton")
        self._add_folder_button.setToolTip(
            "Add a folder: every .gguf file in it (and its subfolders) is listed."
        )
        self._rescan_button = QPushButton("Rescan")
        self._rescan_button.setObjectName("rescanButton")
        self._rescan_button.setToolTip("Look for new, changed and removed files.")
        self._scan_label = QLabel()
        self._scan_label.setObjectName("scanLabel")
        # a long file name is cut, never widens the dialog (it must work at 640 px)
        self._scan_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self._scan_label.hide()
        for button in (self._add_file_button, self._add_folder_button, self._rescan_button):
            toolbar.addWidget(button)
        toolbar.addSpacing(12)
        toolbar.addWidget(self._scan_label, 1)
        toolbar.addStretch()  # the buttons keep their size while the label is hidden
        outer.addLayout(toolbar)

        self._loaded_label = QLabel()
        self._loaded_label.setObjectName("loadedLabel")
        self._loaded_label.setWordWrap(True)
        outer.addWidget(self._loaded_label)

        self._message_label = QLabel()
        self._message_label.setObjectName("messageLabel")
        self._message_label.setWordWrap(True)
        self._message_label.setStyleSheet(f"color: {colors(self).error};")
        self._message_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self._message_label.hide()
        outer.addWidget(self._message_label)

        self._stack = QStackedWidget()
        self._empty_label = QLabel()
        self._empty_label.setObjectName("emptyLabel")
        self._empty_label.setWordWrap(True)
        self._empty_label.setTextFormat(Qt.TextFormat.RichText)
        self._empty_label.setOpenExternalLinks(True)
        self._empty_label.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self._empty_label.setMargin(12)
        self._stack.addWidget(self._empty_label)

        self._table = new_model_table()
        self._table.itemSelectionChanged.connect(self._update_buttons)
        self._table.itemSelectionChanged.connect(self._show_plan)
        self._stack.addWidget(self._table)
        outer.addWidget(self._stack, 1)
        # Where the selected model's layers would go (issue 22), worked out off the GUI thread.
        self.plan_label = PlanLabel()
        self.plan_label.hide()
        outer.addWidget(self.plan_label)

        load_row = QHBoxLayout()
        self._load_button = QPushButton("Load")
        self._load_button.setObjectName("loadButton")
        self._load_button.setToolTip("Load the selected model (or double-click it).")
        self._unload_button = QPushButton("Unload")
        self._unload_button.setObjectName("unloadButton")
        self._unload_button.setToolTip("Free the loaded model's memory; tabs stay open.")
        self._remove_file_button = QPushButton("Remove from list")
        self._remove_file_button.setObjectName("removeFileButton")
        self._remove_file_button.setToolTip(
            "Forget a file you added one by one (the file itself is not deleted)."
        )
        load_row.addWidget(self._load_button)
        load_row.addWidget(self._unload_button)
        load_row.addStretch(1)
        load_row.addWidget(self._remove_file_button)
        outer.addLayout(load_row)

        progress_row = QHBoxLayout()
        self._progress_label = QLabel()
        self._progress_label.setObjectName("loadingLabel")
        self._progress_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self._progress = QProgressBar()
        self._progress.setObjectName("loadingBar")
        self._progress.setRange(0, 1000)
        self._progress.setFormat("%p%")
        self._cancel_button = QPushButton("Cancel")
        self._cancel_button.setObjectName("cancelLoadButton")
        self._cancel_button.setToolTip("Stop loading this model.")
        progress_row.addWidget(self._progress_label, 1)
        progress_row.addWidget(self._progress, 1)
        progress_row.addWidget(self._cancel_button)
        self._progress_widgets: tuple[QWidget, ...] = (
            self._progress_label,
            self._progress,
            self._cancel_button,
        )
        for widget in self._progress_widgets:
            widget.hide()
        outer.addLayout(progress_row)

        folders_row = QHBoxLayout()
        folders_col = QVBoxLayout()
        folders_col.addWidget(QLabel("Model folders:"))
        self._folder_list = QListWidget()
        self._folder_list.setObjectName("folderList")
        self._folder_list.setMaximumHeight(72)
        self._folder_list.itemSelectionChanged.connect(self._update_buttons)
        folders_col.addWidget(self._folder_list)
        folders_row.addLayout(folders_col, 1)
        self._remove_folder_button = QPushButton("Remove folder")
        self._remove_folder_button.setObjectName("removeFolderButton")
        self._remove_folder_button.setToolTip(
            "Stop listing the selected folder's models (no file is deleted)."
        )
        folders_row.addWidget(self._remove_folder_button, 0, Qt.AlignmentFlag.AlignBottom)
        outer.addLayout(folders_row)

        if self._db.read_only:
            for button in (
                self._add_file_button,
                self._add_folder_button,
                self._rescan_button,
                self._remove_folder_button,
                self._remove_file_button,
            ):
                button.setEnabled(False)
                button.setToolTip("The library is open read-only; it cannot be changed.")

    # -- listing -------------------------------------------------------------------------

    def _reload(self) -> None:
        """Fill the table and folder list from the database (the GUI thread's connection)."""
        selected = self._selected_path()
        try:
            self._entries = self._db.list_models()
            folders = self._db.list_folders()
        except StorageError as exc:
            self._show_message(f"The model library could not be read: {exc}")
            return
        self._fill_folders(folders)
        self._fill_table(selected)
        self._update_loaded_label()
        self._update_empty_text()
        self._stack.setCurrentWidget(self._table if self._entries else self._empty_label)
        self._update_buttons()

    def _fill_folders(self, folders: list[str]) -> None:
        current = self._folder_list.currentItem()
        keep = current.data(PATH_ROLE) if current is not None else None
        self._folder_list.clear()
        for folder in folders:
            item = QListWidgetItem(folder if os.path.isdir(folder) else f"{folder}  (missing)")
            item.setData(PATH_ROLE, folder)
            self._folder_list.addItem(item)
            if folder == keep:
                self._folder_list.setCurrentItem(item)

    def _fill_table(self, selected: str | None) -> None:
        table = self._table
        error = QColor(colors(self).error)
        table.setUpdatesEnabled(False)
        try:
            table.clearSpans()
            table.setRowCount(len(self._entries))
            names = shown_names(self._entries)  # two models of one name: their files too
            for row, entry in enumerate(self._entries):
                fill_row(table, row, entry, lambda: self._free_memory, error, names[entry.path])
                if selected is not None and entry.path == selected:
                    table.selectRow(row)
        finally:
            table.setUpdatesEnabled(True)
        self._refresh_status_column()

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange and hasattr(self, "_table"):
            error = colors(self).error
            self._message_label.setStyleSheet(f"color: {error};")
            recolor_broken_rows(self._table, QColor(error))

    @property
    def _free_memory(self) -> int:
        """Free memory, read once a listing (a model fits or not against the same figure)."""
        from app.hub.fit import available_memory

        now = time.monotonic()
        if now - self._free_at > 5.0:
            self._free_cache, self._free_at = available_memory(), now
        return self._free_cache

    def _refresh_status_column(self) -> None:
        show_status(
            self._table, self._entries, self._loaded_path, self._loading_path, self._load_errors
        )
        self._update_loaded_label()
        self._update_empty_text()
        self._update_buttons()

    def _update_loaded_label(self) -> None:
        if self._loaded_path is None:
            self._loaded_label.setText("No model loaded.")
            return
        key = same_file_key(self._loaded_path)
        name = Path(self._loaded_path).name
        for entry in self._entries:
            if same_file_key(entry.path) == key and entry.metadata:
                name = str(entry.metadata.get("name") or "") or name
                break
        self._loaded_label.setText(f"Loaded: <b>{html.escape(name)}</b>")
        self._loaded_label.setToolTip(self._loaded_path)

    def _update_empty_text(self) -> None:
        if self._folder_list.count() and self._scanning:
            text = "<h3>Scanning…</h3><p>Looking for GGUF files in your model folders.</p>"
        elif self._folder_list.count():
            text = _NO_FILES_TEXT
        elif self._scanning:
            text = "<p><i>Scanning…</i></p>" + _EMPTY_TEXT
        else:
            text = _EMPTY_TEXT
        if self._loaded_path is not None:
            # a model is loaded (the bundled demo, a file opened directly): the library
            # is what is empty, not the app
            name = html.escape(Path(self._loaded_path).name)
            loaded = f"<h3>The library has no models yet</h3><p>Loaded now: {name}.</p>"
            text = text.replace(_EMPTY_TITLE, loaded)
        self._empty_label.setText(text)

    def _show_message(self, text: str) -> None:
        self._message_label.setText(text)
        self._message_label.setVisible(bool(text))

    # -- selection and buttons -----------------------------------------------------------

    def _selected_row(self) -> int | None:
        rows = self._table.selectionModel().selectedRows()
        if not rows:
            return None
        row = rows[0].row()
        return row if 0 <= row < len(self._entries) else None

    def _selected_path(self) -> str | None:
        row = self._selected_row()
        return self._entries[row].path if row is not None else None

    def _loadable(self, row: int) -> bool:
        entry = self._entries[row]
        return entry.error is None and entry.metadata is not None

    def set_plan_context(self, context: Callable[[], ContextSettings]) -> None:
        """The context the plan counts the tabs of (the window's; default: the defaults)."""
        self.plan_label.set_context(context)
        self._show_plan()

    @Slot()
    def _show_plan(self) -> None:
        row = self._selected_row()
        self.plan_label.show_plan(
            self._entries[row].path if row is not None and self._loadable(row) else None
        )

    @Slot()
    def _update_buttons(self) -> None:
        row = self._selected_row()
        loaded = same_file_key(self._loaded_path) if self._loaded_path else None
        can_load = (
            row is not None
            and self._loadable(row)
            and self._loading_path is None
            and same_file_key(self._entries[row].path) != loaded
        )
        self._load_button.setEnabled(can_load)
        if row is not None and not self._loadable(row):
            self._load_button.setToolTip(
                "This file cannot be used: " + (self._entries[row].error or "")
            )
        else:
            self._load_button.setToolTip("Load the selected model (or double-click it).")
        self._unload_button.setEnabled(self._loaded_path is not None and self._loading_path is None)
        writable = not self._db.read_only
        self._remove_file_button.setEnabled(
            writable and row is not None and self._entries[row].folder is None
        )
        self._remove_folder_button.setEnabled(
            writable and self._folder_list.currentItem() is not None
        )
