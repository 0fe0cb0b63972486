"""Replies saved while they stream, so a crash loses at most the last moments.

Runs on the session thread with its own database connection (opened there: SQLite
connections belong to one thread). Each streaming reply is written (``update_reply``) at
most every ``interval_s``: its answer and, from a reasoning model, its reasoning so far and
how long it thought. The client commits the finished reply (``finish_reply``); a late
partial write after that changes nothing (storage only updates replies still "partial").
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from app.engine.reasoning import Channel
from app.errors import LlamaDeskError
from app.storage import Database

log = logging.getLogger(__name__)

SAVE_INTERVAL_S = 0.4


@dataclass
class _Reply:
    message_id: int
    answer: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    started: float = 0.0  # perf_counter of the first streamed piece
    reasoning_ms: float | None = None  # set when the answer starts after reasoning
    dirty: bool = False
    last_save: float = 0.0


class PartialReplies:
    """See the module docstring. Not thread-safe: the session thread only."""

    def __init__(self, database: Database | None, interval_s: float = SAVE_INTERVAL_S) -> None:
        self._source = database
        self._db: Database | None = None
        self._failed = False
        self.interval_s = interval_s
        self._replies: dict[int, _Reply] = {}  # conversation id -> its streaming reply

    def begin(self, conversation_id: int, message_id: int | None) -> None:
        self._replies.pop(conversation_id, None)
        if message_id is not None and self._source is not None:
            self._replies[conversation_id] = _Reply(message_id, last_save=time.perf_counter())

    def add(self, conversation_id: int, text: str, channel: Channel, now: float) -> None:
        reply = self._replies.get(conversation_id)
        if reply is None:
            return
        if not reply.started:
            reply.started = now
        if channel is Channel.REASONING:
            reply.reasoning.append(text)
        else:
            if reply.reasoning and reply.reasoning_ms is None:
                reply.reasoning_ms = (now - reply.started) * 1000.0
            reply.answer.append(text)
        reply.dirty = True

    def end(self, conversation_id: int) -> None:
        """The turn finished: the client commits the whole reply."""
        self._replies.pop(conversation_id, None)

    def tick(self, now: float, force: bool = False) -> None:
        """Write the replies whose last save is older than the interval (all: ``force``)."""
        for reply in self._replies.values():
            if reply.dirty and (force or now - reply.last_save >= self.interval_s):
                self._write(reply, now)

    def close(self) -> None:
        self.tick(time.perf_counter(), force=True)
        self._replies.clear()
        if self._db is not None:
            self._db.close()
            self._db = None

    def _connection(self) -> Database | None:
        if self._db is None and self._source is not None and not self._failed:
            try:
                self._db = self._source.clone()
            except LlamaDeskError as exc:
                self._failed = True
                log.warning("cannot save replies while they stream: %s", exc)
        return self._db

    def _write(self, reply: _Reply, now: float) -> None:
        reply.dirty = False
        reply.last_save = now
        db = self._connection()
        if db is None:
            return
        answer = "".join(reply.answer)
        try:
            if reply.reasoning:
                thinking_ms = reply.reasoning_ms
                if thinking_ms is None and reply.started:
                    thinking_ms = (now - reply.started) * 1000.0
                db.update_reply(
                    reply.message_id,
                    answer,
                    reasoning="".join(reply.reasoning),
                    reasoning_ms=thinking_ms,
                )
            else:
                db.update_reply(reply.message_id, answer)
        except LlamaDeskError as exc:
            log.warning("could not save reply %d: %s", reply.message_id, exc)
