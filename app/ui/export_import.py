"""Export and import conversations from the window (the sidebar's, the File menu's and the
tab's menus call :class:`ConversationTransfers`).

What goes where: one conversation -> a save dialog for one file, Markdown or JSON.
Several (or all) -> as JSON one bundle file, which imports again in one go; as Markdown a
folder, one readable file per conversation named after its title (an existing file is
never replaced). Import: one or more JSON files, all or nothing (a malformed file is named
in a sentence and nothing is imported).

The dialogs are opened with ``open()`` and report through signals (a modal ``exec()``
would block the tests and fails inside qasync slots). Reading and writing the files and
the database work of an export or import run as a job of a
:class:`~app.ui.background.BackgroundJobs` (a pool thread), on its own database connection: an export of every conversation can take seconds. The result
comes back as :attr:`ConversationTransfers.finished` on the GUI thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QStandardPaths, Signal, Slot
from PySide6.QtWidgets import QFileDialog, QWidget

from app.errors import LlamaDeskError
from app.session.library import Library
from app.storage import Database
from app.storage.errors import ImportValidationError
from app.storage.export import ExportFormat, file_stem, validate, write_bundle, write_each
from app.ui.background import BackgroundJobs
from app.ui.message_data import IMPORTED_FROM
from app.ui.wording import plural

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TransferOutcome:
    """What an export or import did, as a sentence for the user."""

    message: str
    error: bool = False
    imported: tuple[int, ...] = ()  # new conversation ids
    written: tuple[Path, ...] = ()  # files an export wrote


def _export_job(
    db_path: Path,
    read_only: bool,
    ids: tuple[int, ...],
    fmt: ExportFormat,
    target: Path,
    each: bool,
    title: str | None,
) -> TransferOutcome:
    try:
        db = Database.open(db_path, read_only=read_only)
    except LlamaDeskError as exc:
        return TransferOutcome(f"Nothing was exported: {exc}", True)
    try:
        if each:
            written = write_each(db, ids, fmt, target)
            return TransferOutcome(
                f"Exported {plural(len(written), 'conversation')} as {fmt.label} files "
                f"to {target}.",
                written=tuple(written),
            )
        path = write_bundle(db, ids, fmt, target)
        what = f"“{title}”" if title is not None else plural(len(ids), "conversation")
        return TransferOutcome(f"Exported {what} as {fmt.label} to {path}.", written=(path,))
    except LlamaDeskError as exc:
        return TransferOutcome(str(exc), True)
    finally:
        db.close()


def _import_job(door: Library, files: tuple[Path, ...]) -> TransferOutcome:
    """On a pool thread: the files are read and checked here, written by the library."""
    try:
        data = _marked_data(files)
        ids = door.import_data(data) if data is not None else []
    except LlamaDeskError as exc:
        return TransferOutcome(str(exc), True)
    source = files[0].name if len(files) == 1 else plural(len(files), "file")
    if not ids:
        return TransferOutcome(f"{source} holds no conversations; nothing was imported.")
    return TransferOutcome(
        f"Imported {plural(len(ids), 'conversation')} from {source}.", imported=tuple(ids)
    )


def _marked_data(files: tuple[Path, ...]) -> dict[str, Any] | None:
    """The files as one export to import (all or nothing, as
    :func:`app.storage.export.import_files`) with every message marked with the file it
    came from (:data:`IMPORTED_FROM`): its chat then says it was imported. Errors name the
    file. None: no files."""
    from app.storage.export import read_json_file

    conversations: list[Any] = []
    for path in files:
        data = read_json_file(path)
        try:
            validate(data)  # the file's own problems, named by its file
        except ImportValidationError as exc:
            where = path.name + (f", {exc.where}" if exc.where else "")
            raise ImportValidationError(where, exc.problem) from None
        conversations.extend(_marked(conv, path.name) for conv in data["conversations"])
    return {**data, "conversations": conversations} if files else None


def _marked(conversation: Any, source: str) -> Any:
    """A valid export's conversation with each message's meta naming ``source``."""
    messages = [
        {**m, "meta": {**(m.get("meta") or {}), IMPORTED_FROM: source}}
        for m in conversation.get("messages", [])
    ]
    return {**conversation, "messages": messages}


class _Bridge(QObject):
    finished = Signal(object)  # a TransferOutcome, queued to the GUI thread


def _start_folder() -> Path:
    documents = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.DocumentsLocation)
    folder = Path(documents) if documents else Path.home()
    return folder if folder.is_dir() else Path.home()


class ConversationTransfers(QObject):
    """Export and import with dialogs (:meth:`export`, :meth:`import_dialog`) or straight
    to given paths (:meth:`export_file`, :meth:`export_folder`, :meth:`import_paths`).

    ``native_dialogs = False`` makes the dialogs Qt's own widgets (tests drive them);
    :attr:`dialog` is the dialog open now, if any."""

    finished = Signal(object)  # a TransferOutcome, on the GUI thread

    def __init__(self, db: Database, parent: QWidget, door: Library | None = None) -> None:
        super().__init__(parent)
        self._widget = parent
        self._db = db
        # Imports are written by the session's library (a Library of this database's
        # own when the window gives none: a sidebar shown alone).
        self._door = door if door is not None else Library(db)
        self.native_dialogs = True
        self.dialog: QFileDialog | None = None
        self._folder: Path | None = None  # where the last dialog ended, to start there
        self._jobs = BackgroundJobs("transfers")  # one at a time: two exports never interleave
        self._bridge = _Bridge(self)
        self._bridge.finished.connect(self._on_finished)

    # -- with dialogs --------------------------------------------------------------------

    def export(self, ids: Sequence[int] | None, fmt: ExportFormat) -> None:
        """Ask where, then export ``ids`` (None: every conversation that has messages)."""
        try:
            chosen = self._export_ids(ids)
            title = self._db.get_conversation(chosen[0]).title if len(chosen) == 1 else None
        except LlamaDeskError as exc:
            self._report(TransferOutcome(str(exc), True))
            return
        if not chosen:
            self._report(TransferOutcome("There are no conversations to export."))
            return
        start = self._folder or _start_folder()
        if fmt is ExportFormat.MARKDOWN and len(chosen) > 1:
            dialog = self._new_dialog(
                f"Export {len(chosen)} conversations as Markdown: choose a folder"
            )
            dialog.setFileMode(QFileDialog.FileMode.Directory)
            dialog.setOption(QFileDialog.Option.ShowDirsOnly, True)
            dialog.setDirectory(str(start))
            dialog.fileSelected.connect(
                lambda folder: self.export_folder(chosen, fmt, Path(folder))
            )
        else:
            if title is not None:
                name = file_stem(title)
            else:
                day = time.strftime("%Y-%m-%d")
                name = f"LlamaDesk {len(chosen)} conversations {day}"
            what = f"“{title}”" if title is not None else f"{len(chosen)} conversations"
            dialog = self._new_dialog(f"Export {what} as {fmt.label}")
            dialog.setAcceptMode(QFileDialog.AcceptMode.AcceptSave)
            dialog.setNameFilters([f"{fmt.label} (*{fmt.suffix})", "All files (*)"])
            dialog.setDefaultSuffix(fmt.suffix.lstrip("."))
            dialog.setDirectory(str(start))
            dialog.selectFile(name + fmt.suffix)
            dialog.fileSelected.connect(lambda path: self.export_file(chosen, fmt, Path(path)))
        dialog.open()

    @Slot()
    def import_dialog(self) -> None:
        """Ask for JSON export files, then import them."""
        if self._db.read_only:
            self._report(
                TransferOutcome(
                    "The conversation database is open read-only: nothing can be imported.",
                    True,
                )
            )
            return
        dialog = self._new_dialog("Import conversations (LlamaDesk JSON exports)")
        dialog.setFileMode(QFileDialog.FileMode.ExistingFiles)
        dialog.setNameFilters(["LlamaDesk JSON exports (*.json)", "All files (*)"])
        dialog.setDirectory(str(self._folder or _start_folder()))
        dialog.filesSelected.connect(lambda files: self.import_paths([Path(f) for f in files]))
        dialog.open()

    def _new_dialog(self, title: str) -> QFileDialog:
        if self.dialog is not None:
            self.dialog.reject()
        dialog = QFileDialog(self._widget, title)
        dialog.setObjectName("transferDialog")
        dialog.setOption(QFileDialog.Option.DontUseNativeDialog, not self.native_dialogs)
        dialog.finished.connect(lambda _result: self._dialog_closed(dialog))
        self.dialog = dialog
        return dialog

    def _dialog_closed(self, dialog: QFileDialog) -> None:
        self._folder = Path(dialog.directory().absolutePath())
        if self.dialog is dialog:
            self.dialog = None
        dialog.deleteLater()

    def _export_ids(self, ids: Sequence[int] | None) -> list[int]:
        if ids is not None:
            return list(dict.fromkeys(ids))
        # "All" is every conversation with something in it, oldest first (as the CLI's).
        found = [c for c in self._db.list_conversations(include_archived=True) if c.message_count]
        return [c.id for c in sorted(found, key=lambda c: (c.created_at, c.id))]

    # -- without dialogs -----------------------------------------------------------------

    def export_file(self, ids: Sequence[int], fmt: ExportFormat, path: Path) -> None:
        """Export ``ids`` into one file (in the background; :attr:`finished` follows)."""
        title = None
        if len(ids) == 1:
            try:
                title = self._db.get_conversation(ids[0]).title
            except LlamaDeskError as exc:
                self._report(TransferOutcome(str(exc), True))
                return
        db_path, read_only, chosen = self._db.path, self._db.read_only, tuple(ids)
        self._submit(lambda: _export_job(db_path, read_only, chosen, fmt, path, False, title))

    def export_folder(self, ids: Sequence[int], fmt: ExportFormat, folder: Path) -> None:
        """Export ``ids`` as one file each into ``folder`` (in the background)."""
        db_path, read_only, chosen = self._db.path, self._db.read_only, tuple(ids)
        self._submit(lambda: _export_job(db_path, read_only, chosen, fmt, folder, True, None))

    def import_paths(self, files: Sequence[Path]) -> None:
        """Import JSON export files, all or nothing (in the background)."""
        if files:
            door, chosen = self._door, tuple(Path(f) for f in files)
            self._submit(lambda: _import_job(door, chosen))

    def wait_idle(self, msecs: int = 30_000) -> bool:
        """Block until queued exports and imports are done (shutdown, tests)."""
        return self._jobs.wait_idle(msecs / 1000.0)

    # -- results -------------------------------------------------------------------------

    def _submit(self, work: Callable[[], TransferOutcome]) -> None:
        bridge = self._bridge

        def job() -> None:  # on a pool thread
            try:
                outcome = work()
            except Exception as exc:  # a bug: tell the user instead of staying silent
                log.exception("export/import failed")
                outcome = TransferOutcome(f"The export or import failed unexpectedly: {exc}", True)
            try:
                bridge.finished.emit(outcome)
            except RuntimeError:  # the window is gone
                pass

        self._jobs.submit(job)

    @Slot(object)
    def _on_finished(self, outcome: object) -> None:
        if isinstance(outcome, TransferOutcome):
            self._report(outcome)

    def _report(self, outcome: TransferOutcome) -> None:
        self.finished.emit(outcome)
