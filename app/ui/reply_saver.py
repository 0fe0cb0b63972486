"""Saves streaming replies off the GUI thread.

A reply in progress is written every ~0.4 s (``update_reply``); with several tabs
streaming, those commits (each an fsync) would stall the GUI, so a small thread with its
own :class:`~app.storage.Database` connection does them. Only the latest text of each
reply is written: its answer and, from a reasoning model, its reasoning so far. ``finish_reply`` stays on the GUI thread: a late ``update_reply`` after
it changes nothing (storage only updates replies still "partial").
"""

from __future__ import annotations

import logging
import threading

from app.errors import LlamaDeskError
from app.storage import Database

log = logging.getLogger(__name__)


class ReplySaver:
    def __init__(self, db: Database) -> None:
        self._source = db
        # message id -> (answer, reasoning or None, reasoning_ms or None)
        self._pending: dict[int, tuple[str, str | None, float | None]] = {}
        self._cond = threading.Condition()
        self._closed = False
        self._busy = False
        self._thread = threading.Thread(target=self._run, name="reply-saver", daemon=True)
        self._thread.start()

    def update(
        self,
        message_id: int,
        text: str,
        reasoning: str | None = None,
        reasoning_ms: float | None = None,
    ) -> None:
        """Queue the reply's answer ``text`` and its ``reasoning`` so far (None: unchanged)."""
        with self._cond:
            self._pending[message_id] = (text, reasoning, reasoning_ms)
            self._cond.notify()

    def flush(self, timeout: float = 2.0) -> bool:
        """Wait until everything queued is written; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending and not self._busy, timeout)

    def close(self, timeout: float = 2.0) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout)

    def _run(self) -> None:
        try:
            db = self._source.clone()
        except LlamaDeskError as exc:
            log.warning("cannot save replies while they stream: %s", exc)
            return
        try:
            while True:
                with self._cond:
                    self._cond.wait_for(lambda: self._pending or self._closed)
                    if not self._pending and self._closed:
                        return
                    batch, self._pending = self._pending, {}
                    self._busy = True
                try:
                    for message_id, (text, reasoning, reasoning_ms) in batch.items():
                        try:
                            db.update_reply(
                                message_id, text, reasoning=reasoning, reasoning_ms=reasoning_ms
                            )
                        except LlamaDeskError as exc:
                            log.warning("could not save reply %d: %s", message_id, exc)
                finally:
                    with self._cond:
                        self._busy = False
                        self._cond.notify_all()
        finally:
            db.close()
