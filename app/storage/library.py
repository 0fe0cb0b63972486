"""The model library: folders to scan, GGUF files with cached metadata, presets."""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from app.storage._core import DatabaseCore
from app.storage.errors import NotFoundError, StorageError
from app.storage.models import ModelEntry, Preset, ScanResult

log = logging.getLogger(__name__)

MetadataReader = Callable[[Path], Mapping[str, Any]]
"""Reads a GGUF file's metadata; may raise anything for a broken file."""

# "model-00002-of-00003.gguf": only the first part of a split model is loadable.
_LATER_SPLIT_PART = re.compile(r"-(?!0*1-)\d{5}-of-\d{5}\.gguf$", re.IGNORECASE)


# Bump when app.engine.metadata reads or checks files differently: entries cached by an
# older reader are read again on the next scan (2: the header reader that refuses files
# llama.cpp cannot load).
METADATA_READER_VERSION = 2


def _norm(path: Path | str) -> str:
    return str(Path(path).expanduser().absolute())


def _is_model_file(name: str) -> bool:
    return name.lower().endswith(".gguf") and not _LATER_SPLIT_PART.search(name)


def _error_text(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text if len(text) <= 500 else text[:499] + "…"


def _entry(row: Any) -> ModelEntry:
    metadata: dict[str, Any] | None = None
    if row["metadata"] is not None:
        try:
            loaded = json.loads(row["metadata"])
            metadata = loaded if isinstance(loaded, dict) else {}
        except ValueError:
            metadata = {}
    return ModelEntry(
        path=row["path"],
        size=row["size"],
        mtime_ns=row["mtime_ns"],
        metadata=metadata,
        error=row["error"],
        last_used=row["last_used"],
        folder=row["folder"],
        scanned_at=row["scanned_at"],
    )


class LibraryMixin(DatabaseCore):
    """Model folders, scanning with a metadata cache, last use and load presets."""

    def add_folder(self, path: Path | str) -> str:
        """Remember a folder to scan (idempotent); returns its absolute path. Call
        :meth:`scan` afterwards."""
        folder = _norm(path)
        with self.transaction() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO model_folders (path, added_at) VALUES (?, ?)",
                (folder, self._now()),
            )
        return folder

    def remove_folder(self, path: Path | str) -> None:
        """Forget a folder and the files found in it (presets are kept)."""
        folder = _norm(path)
        with self.transaction() as conn:
            conn.execute("DELETE FROM model_folders WHERE path = ?", (folder,))
            conn.execute("DELETE FROM model_files WHERE folder = ?", (folder,))

    def list_folders(self) -> list[str]:
        return [
            str(row[0])
            for row in self._all("SELECT path FROM model_folders ORDER BY added_at, path")
        ]

    def scan(
        self,
        read_metadata: MetadataReader,
        *,
        progress: Callable[[str], None] | None = None,
    ) -> ScanResult:
        """Look for ``*.gguf`` files in every folder (recursively) and in files added one
        by one. Only new or changed files (by size and mtime_ns) are passed to
        ``read_metadata``; its exception for one file is recorded as that file's error.
        Files that disappeared are dropped, unless their whole folder is missing (an
        unplugged drive). ``progress`` gets each path before it is read."""
        result = ScanResult()
        cached = {
            str(row["path"]): row
            for row in self._all("SELECT path, folder, size, mtime_ns, reader FROM model_files")
        }
        seen: set[str] = set()
        missing_folders: set[str] = set()
        for folder in self.list_folders():
            if not os.path.isdir(folder):
                missing_folders.add(folder)
                result.missing_folders.append(folder)
                continue
            for root, dirs, files in os.walk(folder, onerror=lambda e: log.warning("%s", e)):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for name in sorted(files):
                    if _is_model_file(name):
                        path = os.path.join(root, name)
                        if path not in seen:
                            seen.add(path)
                            self._scan_file(
                                path, folder, cached.get(path), read_metadata, result, progress
                            )
        for path, row in cached.items():
            if path in seen:
                continue
            if row["folder"] is None and os.path.isfile(path):
                seen.add(path)
                self._scan_file(path, None, row, read_metadata, result, progress)
            elif row["folder"] in missing_folders:
                continue
            else:
                result.removed.append(path)
        if result.removed:
            with self.transaction() as conn:
                conn.executemany(
                    "DELETE FROM model_files WHERE path = ?", [(p,) for p in result.removed]
                )
        return result

    def _scan_file(
        self,
        path: str,
        folder: str | None,
        cached: Any,
        read_metadata: MetadataReader,
        result: ScanResult,
        progress: Callable[[str], None] | None,
    ) -> None:
        try:
            stat = os.stat(path)
        except OSError as exc:
            result.errors[path] = _error_text(exc)
            return
        if (
            cached is not None
            and cached["size"] == stat.st_size
            and cached["mtime_ns"] == stat.st_mtime_ns
            and cached["reader"] == METADATA_READER_VERSION
        ):
            result.unchanged += 1
            if folder is not None and cached["folder"] is None:
                with self.transaction() as conn:
                    conn.execute("UPDATE model_files SET folder = ? WHERE path = ?", (folder, path))
            return
        if progress is not None:
            progress(path)
        metadata_json: str | None = None
        error: str | None = None
        try:
            metadata = read_metadata(Path(path))
            metadata_json = json.dumps(dict(metadata), ensure_ascii=False, default=str)
        except Exception as exc:  # the reader's failure is data about this file
            error = _error_text(exc)
            result.errors[path] = error
            log.info("Could not read model metadata of %s: %s", path, error)
        (result.added if cached is None else result.updated).append(path)
        with self.transaction() as conn:
            conn.execute(
                """INSERT INTO model_files
                       (path, folder, size, mtime_ns, metadata, error, scanned_at, reader)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                   ON CONFLICT (path) DO UPDATE SET
                       folder = coalesce(excluded.folder, model_files.folder),
                       size = excluded.size, mtime_ns = excluded.mtime_ns,
                       metadata = excluded.metadata, error = excluded.error,
                       scanned_at = excluded.scanned_at, reader = excluded.reader""",
                (
                    path,
                    folder,
                    stat.st_size,
                    stat.st_mtime_ns,
                    metadata_json,
                    error,
                    self._now(),
                    METADATA_READER_VERSION,
                ),
            )

    def add_model_file(self, path: Path | str, read_metadata: MetadataReader) -> ModelEntry:
        """Add one file (e.g. opened with a file dialog); reads its metadata unless cached."""
        file_path = _norm(path)
        if not os.path.isfile(file_path):
            raise StorageError(f"The model file {file_path} does not exist; choose another file.")
        row = self._maybe_one(
            "SELECT path, folder, size, mtime_ns, reader FROM model_files WHERE path = ?",
            (file_path,),
        )
        self._scan_file(file_path, None, row, read_metadata, ScanResult(), None)
        return self.get_model(file_path)

    def get_model(self, path: Path | str) -> ModelEntry:
        row = self._maybe_one("SELECT * FROM model_files WHERE path = ?", (_norm(path),))
        if row is None:
            raise NotFoundError(
                f"The model {_norm(path)} is not in the library; scan its folder or add it."
            )
        return _entry(row)

    def list_models(self) -> list[ModelEntry]:
        """All known model files, most recently used first, then by path."""
        rows = self._all(
            "SELECT * FROM model_files ORDER BY last_used IS NULL, last_used DESC, path"
        )
        return [_entry(row) for row in rows]

    def remove_model(self, path: Path | str) -> None:
        """Forget one file (it comes back at the next scan if it is in a folder)."""
        with self.transaction() as conn:
            conn.execute("DELETE FROM model_files WHERE path = ?", (_norm(path),))

    def mark_used(self, path: Path | str) -> None:
        """Record that the model was just loaded (for "recently used" ordering)."""
        with self.transaction() as conn:
            conn.execute(
                "UPDATE model_files SET last_used = ? WHERE path = ?", (self._now(), _norm(path))
            )

    # -- presets -------------------------------------------------------------------------

    def save_preset(self, model_path: Path | str, name: str, settings: Mapping[str, Any]) -> Preset:
        """Create or replace a named preset of load settings for the model."""
        name = name.strip()
        if not name:
            raise StorageError("A preset needs a name; type one and save again.")
        key = _norm(model_path)
        with self.transaction() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO model_presets (model_path, name, settings, updated_at)"
                " VALUES (?, ?, ?, ?)",
                (
                    key,
                    name,
                    json.dumps(dict(settings), ensure_ascii=False, sort_keys=True),
                    self._now(),
                ),
            )
        return next(p for p in self.get_presets(key) if p.name == name)

    def get_presets(self, model_path: Path | str) -> list[Preset]:
        rows = self._all(
            "SELECT * FROM model_presets WHERE model_path = ? ORDER BY name", (_norm(model_path),)
        )
        presets = []
        for row in rows:
            try:
                settings = json.loads(row["settings"])
            except ValueError:
                settings = {}
            presets.append(
                Preset(
                    row["model_path"],
                    row["name"],
                    settings if isinstance(settings, dict) else {},
                    row["updated_at"],
                )
            )
        return presets

    def delete_preset(self, model_path: Path | str, name: str) -> None:
        with self.transaction() as conn:
            conn.execute(
                "DELETE FROM model_presets WHERE model_path = ? AND name = ?",
                (_norm(model_path), name),
            )
