"""The model library's background scan: :class:`ScanJob` adds chosen files, then scans
every folder, as a job of a :class:`~app.ui.background.BackgroundJobs` (the UI's one kind
of background work: Qt's thread pool, the jobs emitting signals queued to the GUI) with
its own :class:`~app.storage.Database` connection (SQLite connections
belong to one thread); it reports through a :class:`ScanBridge` with a
:class:`ScanOutcome`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from app.storage import Database, MetadataReader, ScanResult, StorageError

__all__ = ["ScanBridge", "ScanJob", "ScanOutcome"]

log = logging.getLogger(__name__)


@dataclass
class ScanOutcome:
    result: ScanResult | None = None
    add_errors: dict[str, str] = field(default_factory=dict)
    failure: str | None = None


class ScanBridge(QObject):
    """Lives on the GUI thread; the job's pool thread emits through it (queued to the GUI)."""

    progress = Signal(str)
    finished = Signal(object)  # ScanOutcome


class ScanJob:
    """Adds chosen files, then scans every folder, on its own database connection."""

    def __init__(
        self, db_path: Path, files: Sequence[str], bridge: ScanBridge, reader: MetadataReader
    ) -> None:
        self._db_path = db_path
        self._files = list(files)
        self._bridge = bridge
        self._reader = reader

    def __call__(self) -> None:
        outcome = ScanOutcome()
        try:
            db = Database.open(self._db_path)
        except Exception as exc:  # DatabaseOpenError and friends: shown, not raised
            outcome.failure = f"The model library could not be opened for scanning: {exc}"
        else:
            try:
                for path in self._files:
                    try:
                        db.add_model_file(path, self._reader)
                    except StorageError as exc:
                        outcome.add_errors[path] = str(exc)
                outcome.result = db.scan(self._reader, progress=self._report)
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
