"""The model library: GGUF files from the user's folders and added files, with metadata.

Listing is instant (from the database's cache); scanning folders and reading GGUF headers
runs in the background (:mod:`app.ui.model_scan`). Storage caches each file's metadata by
size and mtime, so a rescan of an unchanged library reads no headers.

The manager never loads a model: it emits :attr:`ModelManager.loadRequested` with the
path, and the main window reports back with :meth:`ModelManager.set_loading`,
:meth:`ModelManager.set_loaded` and :meth:`ModelManager.show_error`.

The window shows it in a :class:`ModelManagerDialog`: a window of its own beside the chat
(not modal), instead of a dock that took most of the chat's height.

The manager is in rooms: its widgets and listing in :mod:`app.ui.model_library_view`, the
table in :mod:`app.ui.model_table`, the scan in :mod:`app.ui.model_scan`, the dialogs'
start folder in :mod:`app.ui.model_folders`, its window in
:mod:`app.ui.model_manager_dialog`; this module is what the user does with it, and the
names other code imports.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from PySide6.QtCore import QModelIndex, Signal, Slot
from PySide6.QtWidgets import QFileDialog, QWidget
from PySide6.QtWidgets import QListWidget as QListWidget  # tests find the folder list by it

from app.engine.metadata import read_model_info
from app.storage import Database, StorageError
from app.ui.background import BackgroundJobs
from app.ui.model_folders import remember_folder, start_folder
from app.ui.model_library_view import ModelLibraryView
from app.ui.model_manager_dialog import ModelManagerDialog
from app.ui.model_scan import ScanBridge, ScanJob, ScanOutcome
from app.ui.model_table import COLUMNS, PATH_ROLE, same_file_key

__all__ = [
    "COLUMNS",
    "ModelManager",
    "ModelManagerDialog",
    "read_metadata",
    "remember_folder",
    "start_folder",
]


def read_metadata(path: Path) -> Mapping[str, Any]:
    """The library's metadata reader: a GGUF header as a dict (raises ModelLoadError)."""
    return read_model_info(path).to_dict()


def _call_reader(path: Path) -> Mapping[str, Any]:
    # Looked up at call time so tests can replace ``read_metadata``.
    return read_metadata(path)


class ModelManager(ModelLibraryView):
    """The model library panel; see the module docstring.

    Constructing it lists the cached library and starts a background rescan.
    """

    loadRequested = Signal(str)  # path of a readable GGUF file
    unloadRequested = Signal()
    cancelLoadRequested = Signal()
    scanFinished = Signal()  # a background scan (and any queued rescan) has ended

    def __init__(self, db: Database, parent: QWidget | None = None) -> None:
        super().__init__(db, parent)
        self._scan_pending = False
        self._pending_files: list[str] = []
        self._file_dialog: QFileDialog | None = None
        self._folder_dialog: QFileDialog | None = None
        self._jobs = BackgroundJobs("model-scan")  # scans run one after another
        self._bridge = ScanBridge(self)
        self._bridge.progress.connect(self._on_scan_progress)
        self._bridge.finished.connect(self._on_scan_finished)
        self._add_file_button.clicked.connect(self._on_add_file)
        self._add_folder_button.clicked.connect(self._on_add_folder)
        self._rescan_button.clicked.connect(self.refresh)
        self._table.doubleClicked.connect(self._on_double_clicked)
        self._load_button.clicked.connect(self._on_load_clicked)
        self._unload_button.clicked.connect(self._on_unload_clicked)
        self._remove_file_button.clicked.connect(self._on_remove_file)
        self._cancel_button.clicked.connect(self._on_cancel_clicked)
        self._remove_folder_button.clicked.connect(self._on_remove_folder)
        self.refresh()

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
            self._load_errors.pop(same_file_key(path), None)
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
            self._load_errors.pop(same_file_key(path), None)
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
        self._load_errors[same_file_key(path)] = message
        if self._loading_path is not None and same_file_key(self._loading_path) == same_file_key(
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
        self._jobs.submit(ScanJob(self._db.path, files, self._bridge, _call_reader))

    @Slot(str)
    def _on_scan_progress(self, path: str) -> None:
        if self._scanning:
            self._scan_label.setText(f"Scanning… {Path(path).name}")

    @Slot(object)
    def _on_scan_finished(self, outcome: object) -> None:
        messages: list[str] = []
        if isinstance(outcome, ScanOutcome):
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
        if self._loaded_path is not None and same_file_key(entry.path) == same_file_key(
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
        folder = item.data(PATH_ROLE) or item.text()
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
