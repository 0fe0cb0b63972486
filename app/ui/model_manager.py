"""The model library: GGUF files from the user's folders and added files, with metadata.

Listing is instant (from the database's cache); scanning folders and reading GGUF headers
runs on a background :class:`~app.session.jobs.JobThread` (the UI's one style of
background work, as the session's engine thread: a Python thread whose callbacks emit
signals queued to the GUI) with its own :class:`~app.storage.Database` connection (SQLite
connections belong to one thread). Storage caches each file's metadata by size and mtime, so a rescan of an
unchanged library reads no headers.

The manager never loads a model: it emits :attr:`ModelManager.loadRequested` with the
path, and the main window reports back with :meth:`ModelManager.set_loading`,
:meth:`ModelManager.set_loaded` and :meth:`ModelManager.show_error`.

The window shows it in a :class:`ModelManagerDialog`: a window of its own beside the chat
(not modal), instead of a dock that took most of the chat's height.
"""

from __future__ import annotations

import html
import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from PySide6.QtCore import (
    QByteArray,
    QEvent,
    QModelIndex,
    QObject,
    QSize,
    Qt,
    Signal,
    Slot,
)
from PySide6.QtGui import QColor, QFont, QHideEvent, QShowEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QStackedWidget,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app import paths
from app.engine.metadata import ModelInfo, read_model_info
from app.session.jobs import JobThread
from app.storage import Database, ModelEntry, ScanResult, StorageError
from app.ui.settings_panel import format_bytes
from app.ui.theme import colors

__all__ = [
    "COLUMNS",
    "ModelManager",
    "ModelManagerDialog",
    "read_metadata",
    "remember_folder",
    "start_folder",
]

log = logging.getLogger(__name__)

COLUMNS = (
    "Name",
    "Architecture",
    "Parameters",
    "Quantization",
    "Size",
    "Trained context",
    "Chat template",
    "Last used",
    "Fit",
    "File",
    "Status",
)
_COL_NAME, _COL_FIT, _COL_FILE, _COL_STATUS = (
    0,
    len(COLUMNS) - 3,
    len(COLUMNS) - 2,
    len(COLUMNS) - 1,
)
_PATH_ROLE = Qt.ItemDataRole.UserRole
_BROKEN_ROLE = Qt.ItemDataRole.UserRole + 1

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


def read_metadata(path: Path) -> Mapping[str, Any]:
    """The library's metadata reader: a GGUF header as a dict (raises ModelLoadError)."""
    return read_model_info(path).to_dict()


def _ui_state_file() -> Path:
    return paths.data_dir() / "ui-state.json"


def start_folder() -> Path:
    """Where a "choose a GGUF file" dialog starts: the last folder used, else the folder
    downloads land in (the library folder) when it holds models, else ~/Downloads, else ~."""
    try:
        data = json.loads(_ui_state_file().read_text(encoding="utf-8"))
        last = data.get("last_model_folder") if isinstance(data, dict) else None
    except (OSError, ValueError):
        last = None
    if isinstance(last, str) and os.path.isdir(last):
        return Path(last)
    library = paths.data_dir() / "models"
    if library.is_dir() and any(library.glob("*.gguf")):
        return library
    downloads = Path.home() / "Downloads"
    return downloads if downloads.is_dir() else Path.home()


def remember_folder(folder: str | Path) -> None:
    """Remember the folder a model file was chosen from (for the next dialog)."""
    target = _ui_state_file()
    try:
        data = json.loads(target.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            data = {}
    except (OSError, ValueError):
        data = {}
    data["last_model_folder"] = str(folder)
    try:
        tmp = target.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data), encoding="utf-8")
        os.replace(tmp, target)
    except OSError as exc:
        log.info("the last folder is not remembered: %s", exc)


def _call_reader(path: Path) -> Mapping[str, Any]:
    # Looked up at call time so tests can replace ``read_metadata``.
    return read_metadata(path)


def _same_file_key(path: str) -> str:
    try:
        return os.path.normcase(os.path.realpath(os.path.expanduser(path)))
    except (OSError, ValueError):
        return os.path.normcase(os.path.abspath(path))


# -- background scanning ---------------------------------------------------------------


@dataclass
class _Outcome:
    result: ScanResult | None = None
    add_errors: dict[str, str] = field(default_factory=dict)
    failure: str | None = None


class _ScanBridge(QObject):
    """Lives on the GUI thread; the job thread emits through it (queued to the GUI)."""

    progress = Signal(str)
    finished = Signal(object)  # _Outcome


class _ScanJob:
    """Adds chosen files, then scans every folder, on its own database connection."""

    def __init__(self, db_path: Path, files: Sequence[str], bridge: _ScanBridge) -> None:
        self._db_path = db_path
        self._files = list(files)
        self._bridge = bridge

    def __call__(self) -> None:
        outcome = _Outcome()
        try:
            db = Database.open(self._db_path)
        except Exception as exc:  # DatabaseOpenError and friends: shown, not raised
            outcome.failure = f"The model library could not be opened for scanning: {exc}"
        else:
            try:
                for path in self._files:
                    try:
                        db.add_model_file(path, _call_reader)
                    except StorageError as exc:
                        outcome.add_errors[path] = str(exc)
                outcome.result = db.scan(_call_reader, progress=self._report)
            except StorageError as exc:
                outcome.failure = f"Scanning the model folders failed: {exc}"
            except Exception as exc:  # a bug; keep the GUI alive and say so
                log.exception("Model scan failed")
                outcome.failure = f"Scanning the model folders failed unexpectedly: {exc}"
            finally:
                db.close()
        try:
            self._bridge.finished.emit(outcome)
        except RuntimeError:  # the manager (and its bridge) were destroyed meanwhile
            pass

    def _report(self, path: str) -> None:
        try:
            self._bridge.progress.emit(path)
        except RuntimeError:
            pass


# -- the widget --------------------------------------------------------------------------


class ModelManager(QWidget):
    """The model library panel; see the module docstring.

    Constructing it lists the cached library and starts a background rescan.
    """

    loadRequested = Signal(str)  # path of a readable GGUF file
    unloadRequested = Signal()
    cancelLoadRequested = Signal()
    scanFinished = Signal()  # a background scan (and any queued rescan) has ended

    def __init__(self, db: Database, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._db = db
        self._free_cache, self._free_at = 0, -1e9
        self._entries: list[ModelEntry] = []
        self._loaded_path: str | None = None
        self._loading_path: str | None = None
        self._load_errors: dict[str, str] = {}  # same-file key -> message
        self._scanning = False
        self._scan_pending = False
        self._pending_files: list[str] = []
        self._file_dialog: QFileDialog | None = None
        self._folder_dialog: QFileDialog | None = None
        self._jobs = JobThread("model-scan")  # scans run one after another
        self._bridge = _ScanBridge(self)
        self._bridge.progress.connect(self._on_scan_progress)
        self._bridge.finished.connect(self._on_scan_finished)
        self._build()
        self.refresh()

    # -- construction --------------------------------------------------------------------

    def _build(self) -> None:
        outer = QVBoxLayout(self)

        toolbar = QHBoxLayout()
        self._add_file_button = QPushButton("Add file…")
        self._add_file_button.setObjectName("addFileButton")
        self._add_file_button.setToolTip("Add one or more .gguf files to the library.")
        self._add_file_button.clicked.connect(self._on_add_file)
        self._add_folder_button = QPushButton("Add folder…")
        self._add_folder_button.setObjectName("addFolderButton")
        self._add_folder_button.setToolTip(
            "Add a folder: every .gguf file in it (and its subfolders) is listed."
        )
        self._add_folder_button.clicked.connect(self._on_add_folder)
        self._rescan_button = QPushButton("Rescan")
        self._rescan_button.setObjectName("rescanButton")
        self._rescan_button.setToolTip("Look for new, changed and removed files.")
        self._rescan_button.clicked.connect(self.refresh)
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

        self._table = QTableWidget(0, len(COLUMNS))
        self._table.setObjectName("modelTable")
        self._table.setHorizontalHeaderLabels(list(COLUMNS))
        self._table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self._table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self._table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self._table.setAlternatingRowColors(True)
        self._table.setWordWrap(False)
        self._table.verticalHeader().hide()
        header = self._table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(_COL_NAME, QHeaderView.ResizeMode.Interactive)
        header.setStretchLastSection(True)
        header.resizeSection(_COL_NAME, 210)  # room for a model's name
        self._table.doubleClicked.connect(self._on_double_clicked)
        self._table.itemSelectionChanged.connect(self._update_buttons)
        self._stack.addWidget(self._table)
        outer.addWidget(self._stack, 1)

        load_row = QHBoxLayout()
        self._load_button = QPushButton("Load")
        self._load_button.setObjectName("loadButton")
        self._load_button.setToolTip("Load the selected model (or double-click it).")
        self._load_button.clicked.connect(self._on_load_clicked)
        self._unload_button = QPushButton("Unload")
        self._unload_button.setObjectName("unloadButton")
        self._unload_button.setToolTip("Free the loaded model's memory; tabs stay open.")
        self._unload_button.clicked.connect(self._on_unload_clicked)
        self._remove_file_button = QPushButton("Remove from list")
        self._remove_file_button.setObjectName("removeFileButton")
        self._remove_file_button.setToolTip(
            "Forget a file you added one by one (the file itself is not deleted)."
        )
        self._remove_file_button.clicked.connect(self._on_remove_file)
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
        self._cancel_button.clicked.connect(self._on_cancel_clicked)
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
        self._remove_folder_button.clicked.connect(self._on_remove_folder)
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

    # -- public interface ----------------------------------------------------------------

    @Slot()
    def refresh(self) -> None:
        """Re-list from the database now, and rescan the folders in the background."""
        self._reload()
        if not self._db.read_only:
            self._start_job([])

    def set_loaded(self, path: str | None) -> None:
        """Mark ``path`` as the loaded model (None: nothing loaded) and re-list the library
        (the caller records the use with ``db.mark_used``; "Last used" then shows it)."""
        self._loaded_path = path
        if path is not None:
            self._load_errors.pop(_same_file_key(path), None)
        self._reload()

    def set_loading(self, path: str | None, fraction: float) -> None:
        """Show loading progress (0..1) with a Cancel button; ``None`` hides it."""
        if path is None:
            changed = self._loading_path is not None
            self._loading_path = None
            for widget in self._progress_widgets:
                widget.hide()
            if changed:
                self._refresh_status_column()
            self._update_buttons()
            return
        fraction = min(1.0, max(0.0, float(fraction)))
        if path != self._loading_path:
            self._loading_path = path
            self._load_errors.pop(_same_file_key(path), None)
            self._progress_label.setText(f"Loading {Path(path).name}…")
            self._progress_label.setToolTip(path)
            self._cancel_button.setEnabled(True)
            self._cancel_button.setText("Cancel")
            self._refresh_status_column()
            self._update_buttons()
        self._progress.setValue(round(fraction * 1000))
        for widget in self._progress_widgets:
            widget.show()

    def show_error(self, path: str, message: str) -> None:
        """Show why ``path`` could not be loaded (a sentence); the file stays loadable."""
        self._load_errors[_same_file_key(path)] = message
        if self._loading_path is not None and _same_file_key(self._loading_path) == _same_file_key(
            path
        ):
            self.set_loading(None, 0.0)
        self._show_message(f"Could not load {Path(path).name}: {message}")
        self._refresh_status_column()

    def add_files(self, files: Sequence[str]) -> None:
        """Add GGUF files (dropped on the window, downloaded); headers are read in the
        background and the table shows them when done."""
        self._on_files_chosen([str(f) for f in files])

    def listed_paths(self) -> list[str]:
        """The files the table lists, in order."""
        return [entry.path for entry in self._entries]

    def is_scanning(self) -> bool:
        """Whether a background scan is running or queued."""
        return self._scanning

    def wait_for_scan(self, msecs: int = 10_000) -> bool:
        """Block until the background scan thread is idle (for shutdown); True if it is."""
        return self._jobs.wait_idle(msecs / 1000.0)

    # -- background jobs -----------------------------------------------------------------

    def _start_job(self, files: Sequence[str]) -> None:
        self._pending_files.extend(files)
        self._scan_pending = True
        if not self._scanning:
            self._launch_job()

    def _launch_job(self) -> None:
        files, self._pending_files = self._pending_files, []
        self._scan_pending = False
        self._scanning = True
        self._scan_label.setText("Scanning…")
        self._scan_label.show()
        self._update_empty_text()
        self._jobs.submit(_ScanJob(self._db.path, files, self._bridge))

    @Slot(str)
    def _on_scan_progress(self, path: str) -> None:
        if self._scanning:
            self._scan_label.setText(f"Scanning… {Path(path).name}")

    @Slot(object)
    def _on_scan_finished(self, outcome: object) -> None:
        messages: list[str] = []
        if isinstance(outcome, _Outcome):
            if outcome.failure:
                messages.append(outcome.failure)
            messages.extend(outcome.add_errors.values())
            if outcome.result is not None:
                for folder in outcome.result.missing_folders:
                    messages.append(
                        f"The folder {folder} is missing (an unplugged drive?); its models stay "
                        "listed until it is back or you remove the folder."
                    )
        self._reload()
        if self._scan_pending:
            if messages:
                self._show_message(" ".join(messages))
            self._launch_job()
            return
        self._scanning = False
        self._scan_label.hide()
        self._update_empty_text()
        if messages:
            self._show_message(" ".join(messages))
        self.scanFinished.emit()

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
        keep = current.data(_PATH_ROLE) if current is not None else None
        self._folder_list.clear()
        for folder in folders:
            item = QListWidgetItem(folder if os.path.isdir(folder) else f"{folder}  (missing)")
            item.setData(_PATH_ROLE, folder)
            self._folder_list.addItem(item)
            if folder == keep:
                self._folder_list.setCurrentItem(item)

    def _fill_table(self, selected: str | None) -> None:
        table = self._table
        table.setUpdatesEnabled(False)
        try:
            table.clearSpans()
            table.setRowCount(len(self._entries))
            for row, entry in enumerate(self._entries):
                self._fill_row(row, entry)
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
            for row in range(self._table.rowCount()):
                item = self._table.item(row, 1)
                if item is not None and item.data(_BROKEN_ROLE):
                    item.setForeground(QColor(error))

    @property
    def _free_memory(self) -> int:
        """Free memory, read once a listing (a model fits or not against the same figure)."""
        from app.hub.fit import available_memory

        now = time.monotonic()
        if now - self._free_at > 5.0:
            self._free_cache, self._free_at = available_memory(), now
        return self._free_cache

    def _fill_row(self, row: int, entry: ModelEntry) -> None:
        meta = entry.metadata if entry.error is None and entry.metadata is not None else None
        name_item = QTableWidgetItem()
        name_item.setData(_PATH_ROLE, entry.path)
        tip = entry.path
        if meta is None:
            name_item.setText(entry.name)
            error = entry.error or "This file's details could not be read."
            tip += f"\n\n{error}"
            cells = [name_item, QTableWidgetItem(f"Cannot be used: {error}")]
            cells[1].setToolTip(error)
            cells[1].setForeground(QColor(colors(self).error))
            cells[1].setData(_BROKEN_ROLE, True)
            for col, item in enumerate(cells):
                self._table.setItem(row, col, item)
            for col in range(2, _COL_FILE):
                self._table.setItem(row, col, QTableWidgetItem())
            self._table.setSpan(row, 1, 1, _COL_FILE - 1)
            fit = None
        else:
            display = str(meta.get("name") or "") or Path(entry.path).stem
            name_item.setText(display)
            tip += f"\nFile: {entry.name}"
            values = [
                name_item,
                QTableWidgetItem(str(meta.get("architecture") or "?")),
                QTableWidgetItem(_params_label(meta)),
                QTableWidgetItem(str(meta.get("file_type") or "unknown")),
                QTableWidgetItem(format_bytes(entry.size)),
                QTableWidgetItem(_ctx_label(meta)),
                QTableWidgetItem("Yes" if meta.get("chat_template") else "No"),
                QTableWidgetItem(_when(entry.last_used)),
            ]
            if not meta.get("chat_template"):
                values[6].setToolTip(
                    "No chat template in the file: LlamaDesk falls back to a generic format."
                )
            for col, item in enumerate(values):
                self._table.setItem(row, col, item)
            fit = _fit_item(entry.size, meta, self._free_memory, QColor(colors(self).error))
        if fit is not None:
            self._table.setItem(row, _COL_FIT, fit)
        name_item.setToolTip(tip)
        file_item = QTableWidgetItem(entry.name)  # two quantizations of one model differ here
        file_item.setToolTip(entry.path)
        self._table.setItem(row, _COL_FILE, file_item)
        self._table.setItem(row, _COL_STATUS, QTableWidgetItem())

    def _refresh_status_column(self) -> None:
        loaded = _same_file_key(self._loaded_path) if self._loaded_path else None
        loading = _same_file_key(self._loading_path) if self._loading_path else None
        for row, entry in enumerate(self._entries):
            key = _same_file_key(entry.path)
            item = self._table.item(row, _COL_STATUS)
            if item is None:
                continue
            font = QFont(self._table.font())
            if entry.error is not None or entry.metadata is None:
                text, tip = "Broken", entry.error or ""
            elif key == loading:
                text, tip = "Loading…", ""
            elif key == loaded:
                text, tip = "● Loaded", "This model is loaded."
                font.setBold(True)
            elif key in self._load_errors:
                text = "Failed to load"
                tip = self._load_errors[key]
            else:
                text, tip = "", ""
            item.setText(text)
            item.setToolTip(tip)
            for col in range(len(COLUMNS)):
                cell = self._table.item(row, col)
                if cell is not None:
                    cell.setFont(font)
        self._update_loaded_label()
        self._update_buttons()

    def _update_loaded_label(self) -> None:
        if self._loaded_path is None:
            self._loaded_label.setText("No model loaded.")
            return
        key = _same_file_key(self._loaded_path)
        name = Path(self._loaded_path).name
        for entry in self._entries:
            if _same_file_key(entry.path) == key and entry.metadata:
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

    @Slot()
    def _update_buttons(self) -> None:
        row = self._selected_row()
        loaded = _same_file_key(self._loaded_path) if self._loaded_path else None
        can_load = (
            row is not None
            and self._loadable(row)
            and self._loading_path is None
            and _same_file_key(self._entries[row].path) != loaded
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

    def _request_load(self, row: int) -> None:
        entry = self._entries[row]
        if not self._loadable(row):
            self._show_message(
                f"{entry.name} cannot be loaded: {entry.error or 'its details could not be read.'}"
            )
            return
        if self._loading_path is not None:
            self._show_message("A model is loading; wait for it or cancel it first.")
            return
        if self._loaded_path is not None and _same_file_key(entry.path) == _same_file_key(
            self._loaded_path
        ):
            return
        self._show_message("")
        self.loadRequested.emit(entry.path)

    @Slot(QModelIndex)
    def _on_double_clicked(self, index: QModelIndex) -> None:
        if index.isValid() and 0 <= index.row() < len(self._entries):
            self._request_load(index.row())

    @Slot()
    def _on_load_clicked(self) -> None:
        row = self._selected_row()
        if row is not None:
            self._request_load(row)

    @Slot()
    def _on_unload_clicked(self) -> None:
        if self._loaded_path is not None:
            self.unloadRequested.emit()

    @Slot()
    def _on_cancel_clicked(self) -> None:
        self._cancel_button.setEnabled(False)
        self._cancel_button.setText("Cancelling…")
        self.cancelLoadRequested.emit()

    # -- adding and removing -------------------------------------------------------------

    @Slot()
    def _on_add_file(self) -> None:
        if self._file_dialog is None:
            dialog = QFileDialog(self, "Add GGUF model files")
            dialog.setObjectName("addFileDialog")
            dialog.setFileMode(QFileDialog.FileMode.ExistingFiles)
            dialog.setNameFilters(["GGUF models (*.gguf)", "All files (*)"])
            dialog.filesSelected.connect(self._on_files_chosen_in_dialog)
            self._file_dialog = dialog
        self._file_dialog.setDirectory(str(start_folder()))
        self._file_dialog.open()

    @Slot(list)
    def _on_files_chosen_in_dialog(self, paths: list[str]) -> None:
        if paths:
            remember_folder(Path(paths[0]).parent)
        self._on_files_chosen(paths)

    @Slot()
    def _on_add_folder(self) -> None:
        if self._folder_dialog is None:
            dialog = QFileDialog(self, "Add a folder of GGUF models")
            dialog.setObjectName("addFolderDialog")
            dialog.setFileMode(QFileDialog.FileMode.Directory)
            dialog.setOption(QFileDialog.Option.ShowDirsOnly, True)
            dialog.fileSelected.connect(self._on_folder_chosen)
            self._folder_dialog = dialog
        self._folder_dialog.open()

    @Slot(list)
    def _on_files_chosen(self, paths: list[str]) -> None:
        """Add files (what the file dialog returns); their headers are read in the background."""
        files = [str(p) for p in paths if p]
        if files and not self._db.read_only:
            self._show_message("")
            self._start_job(files)

    @Slot(str)
    def _on_folder_chosen(self, folder: str) -> None:
        if not folder or self._db.read_only:
            return
        if not os.path.isdir(folder):
            self._show_message(f"{folder} is not a folder; choose a folder that holds .gguf files.")
            return
        try:
            self._db.add_folder(folder)
        except StorageError as exc:
            self._show_message(f"The folder could not be added: {exc}")
            return
        self._show_message("")
        self._reload()
        self._start_job([])

    @Slot()
    def _on_remove_folder(self) -> None:
        item = self._folder_list.currentItem()
        if item is None:
            return
        folder = item.data(_PATH_ROLE) or item.text()
        try:
            self._db.remove_folder(str(folder))
        except StorageError as exc:
            self._show_message(f"The folder could not be removed: {exc}")
            return
        self._reload()

    @Slot()
    def _on_remove_file(self) -> None:
        row = self._selected_row()
        if row is None or self._entries[row].folder is not None:
            return
        try:
            self._db.remove_model(self._entries[row].path)
        except StorageError as exc:
            self._show_message(f"The file could not be removed from the list: {exc}")
            return
        self._reload()


# -- formatting ------------------------------------------------------------------------


class ModelManagerDialog(QDialog):
    """The model manager in a window of its own: not modal (chats go on beside it),
    resizable, at most 90% of the screen, and where the user last left it (in-process:
    the geometry is kept for as long as the app runs, also across instances).

    Closing only hides it; the window keeps the instance and shows it again.
    """

    DEFAULT_SIZE = QSize(960, 560)
    _last_geometry: ClassVar[QByteArray | None] = None

    def __init__(self, manager: ModelManager, parent: QWidget | None = None) -> None:
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

    def manager(self) -> ModelManager:
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
        parent = self.parentWidget()
        screen = parent.screen() if parent is not None else self.screen()
        if screen is None:
            return
        area = screen.availableGeometry()
        width = min(self.width(), int(area.width() * 0.9))
        height = min(self.height(), int(area.height() * 0.9))
        self.resize(max(width, self.minimumSizeHint().width()), height)
        frame = self.frameGeometry()
        center = parent.frameGeometry().center() if parent is not None else area.center()
        x = max(area.left(), min(center.x() - frame.width() // 2, area.right() + 1 - frame.width()))
        y = max(
            area.top(), min(center.y() - frame.height() // 2, area.bottom() + 1 - frame.height())
        )
        self.move(x, y)


def _params_label(meta: Mapping[str, Any]) -> str:
    try:
        return ModelInfo.from_dict(dict(meta)).params_label
    except TypeError:  # metadata cached by another version: fall back to the raw count
        n = meta.get("n_params")
        return f"{n:,}" if isinstance(n, int) else "?"


def _ctx_label(meta: Mapping[str, Any]) -> str:
    n = meta.get("n_ctx_train")
    return f"{n:,}" if isinstance(n, int) and n > 0 else "?"


def _when(timestamp: float | None) -> str:
    if timestamp is None:
        return "Never"
    now = time.time()
    if now - timestamp < 60:
        return "Just now"
    local = time.localtime(timestamp)
    if time.strftime("%Y-%m-%d", local) == time.strftime("%Y-%m-%d", time.localtime(now)):
        return time.strftime("Today %H:%M", local)
    return time.strftime("%Y-%m-%d %H:%M", local)


def _fit_item(size: int, meta: Mapping[str, Any], free: int, error: QColor) -> QTableWidgetItem:
    """The fit verdict before loading: weights + what the engine would allocate for the
    default context (by architecture family) + a compute buffer, against free memory."""
    from app.hub.fit import estimate

    try:
        fit = estimate(size, ModelInfo.from_dict(dict(meta)), available=free)
    except (TypeError, ValueError, KeyError):  # metadata cached by another version
        fit = estimate(size, None, available=free)
    item = QTableWidgetItem(
        {"fits": "Fits", "tight": "Tight", "will not fit": "Will not fit"}[fit.verdict]
    )
    item.setToolTip(fit.sentence)
    if fit.verdict == "will not fit":
        item.setForeground(error)
    return item
