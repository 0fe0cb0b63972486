"""KV state files of tabs: one file per (conversation, model fingerprint), LRU quota.

Losing a state file only costs a re-prefill, so reading never raises: a missing or
unreadable file is ``None`` with a logged warning. The bytes are the engine's own format
(header, checksum); this module only stores them, atomically.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import threading
import time
from pathlib import Path

from app import paths
from app.fsutil import atomic_write_bytes, make_private_dir

log = logging.getLogger(__name__)

SUFFIX = ".kvstate"
TEMP_PREFIX = ".tmp-"
DEFAULT_QUOTA_BYTES = 4 * 1024**3
_SAFE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_STALE_TEMP_S = 3600.0


def _fingerprint_part(fingerprint: str) -> str:
    if _SAFE.match(fingerprint) and not fingerprint.startswith("."):
        return fingerprint
    return hashlib.sha256(fingerprint.encode("utf-8", "surrogatepass")).hexdigest()[:32]


class StateStore:
    """State files in ``directory`` (default ``paths.state_dir()``), at most
    ``quota_bytes`` in total (the least recently used files are evicted; the file just
    written never). Thread-safe; usable from any thread."""

    def __init__(
        self, directory: Path | None = None, quota_bytes: int = DEFAULT_QUOTA_BYTES
    ) -> None:
        self.directory = Path(directory) if directory is not None else paths.state_dir()
        make_private_dir(self.directory, tighten=True)
        self.quota_bytes = int(quota_bytes)
        self._lock = threading.Lock()
        self._remove_stale_temp_files()

    def path_for(self, conversation_id: int, fingerprint: str) -> Path:
        """Where the state of this conversation under this model fingerprint lives."""
        return self.directory / f"{int(conversation_id)}-{_fingerprint_part(fingerprint)}{SUFFIX}"

    def put(self, conversation_id: int, fingerprint: str, data: bytes) -> Path | None:
        """Store ``data`` atomically (temp file, fsync, rename, fsync folder), then evict
        the least recently used other files beyond the quota. Returns the path, or None
        with a logged warning if it could not be written (e.g. disk full): never raises
        for I/O problems, since the only cost is a later re-prefill."""
        path = self.path_for(conversation_id, fingerprint)
        with self._lock:
            try:
                atomic_write_bytes(path, bytes(data), temp_prefix=TEMP_PREFIX)
            except OSError as exc:
                log.warning("Could not save the KV state %s: %s", path.name, exc)
                return None
            self._evict(keep=path)
        return path

    def get(self, conversation_id: int, fingerprint: str) -> bytes | None:
        """The stored bytes (and marks them recently used), or None with a logged warning
        when missing or unreadable."""
        path = self.path_for(conversation_id, fingerprint)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            log.info("No saved KV state for conversation %s (%s)", conversation_id, path.name)
            return None
        except OSError as exc:
            log.warning("Could not read the KV state %s: %s", path.name, exc)
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # mtime is the LRU clock (atime is often not updated)
        return data

    def discard(self, conversation_id: int, fingerprint: str) -> None:
        """Remove one state file (e.g. the engine refused it); never raises."""
        with contextlib.suppress(OSError):
            self.path_for(conversation_id, fingerprint).unlink()

    def delete(self, conversation_id: int) -> int:
        """Remove every state file of the conversation; returns how many. Never raises."""
        removed = 0
        for path in self.directory.glob(f"{int(conversation_id)}-*{SUFFIX}"):
            try:
                path.unlink()
                removed += 1
            except OSError as exc:
                log.warning("Could not delete the KV state %s: %s", path.name, exc)
        return removed

    def total_bytes(self) -> int:
        return sum(size for _, size, _ in self._files())

    def _files(self) -> list[tuple[Path, int, int]]:
        files = []
        for path in self.directory.glob(f"*{SUFFIX}"):
            try:
                stat = path.stat()
            except OSError:
                continue
            files.append((path, stat.st_size, stat.st_mtime_ns))
        return files

    def _evict(self, keep: Path) -> None:
        files = self._files()
        total = sum(size for _, size, _ in files)
        for path, size, _ in sorted(files, key=lambda item: item[2]):
            if total <= self.quota_bytes:
                break
            if path == keep:
                continue
            try:
                path.unlink()
                total -= size
                log.info("Evicted the KV state %s (quota %d bytes)", path.name, self.quota_bytes)
            except OSError as exc:
                log.warning("Could not evict the KV state %s: %s", path.name, exc)

    def _remove_stale_temp_files(self) -> None:
        cutoff = time.time() - _STALE_TEMP_S
        for path in self.directory.glob(f"{TEMP_PREFIX}*"):
            with contextlib.suppress(OSError):
                if path.stat().st_mtime < cutoff:
                    path.unlink()
