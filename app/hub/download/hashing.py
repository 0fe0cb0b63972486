"""SHA-256 of a file while it is being written, on the hub's hash thread."""

from __future__ import annotations

import hashlib
import logging
import queue
from concurrent.futures import Future
from pathlib import Path

from app.hub.background import HubWorker

log = logging.getLogger(__name__)

_BATCH = 4 << 20  # chunks are handed over in batches of this many bytes


class HashPipe:
    """SHA-256 of a part file computed on ``worker``'s thread while the download thread
    writes it (hashlib releases the GIL, so hashing overlaps the download): first the
    ``start`` bytes already on disk, then every chunk given to :meth:`put`."""

    def __init__(self, path: Path, start: int, worker: HubWorker) -> None:
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=16)
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._path, self._start = path, start
        self._digest: Future[str | None] = worker.submit(self._hash_on_hash_thread)

    def _hash_on_hash_thread(self) -> str | None:
        digest = hashlib.sha256()
        usable = True
        if self._start:
            try:
                with open(self._path, "rb", buffering=0) as fh:
                    left = self._start
                    while left > 0:
                        data = fh.read(min(left, _BATCH))
                        if not data:
                            break
                        digest.update(data)
                        left -= len(data)
            except OSError as exc:
                # The file is read again after the download instead; keep taking the
                # chunks so the download thread never blocks on a full queue.
                log.info("hashing %s while it downloads failed: %s", self._path.name, exc)
                usable = False
        while (chunk := self._queue.get()) is not None:
            if usable:
                digest.update(chunk)
        return digest.hexdigest() if usable else None

    def put(self, chunk: bytes) -> None:
        """Hash ``chunk`` next (called by the thread writing the file)."""
        self._pending.append(chunk)
        self._pending_bytes += len(chunk)
        if self._pending_bytes >= _BATCH:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            self._queue.put(b"".join(self._pending))
            self._pending, self._pending_bytes = [], 0

    def finish(self) -> str | None:
        """The hex digest of everything so far (None: it must be read from the file)."""
        self._flush()
        self._queue.put(None)
        return self._digest.result()
