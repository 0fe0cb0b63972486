"""Replies saved while they stream, so a crash loses at most the last moments.

Runs on the session thread and writes through the session thread's
:class:`~app.session.recorder.Recorder` (its connection is opened there: SQLite connections
belong to one thread). Each streaming reply is written at most every ``interval_s``: its
answer and, from a reasoning model, its reasoning so far and how long it thought. The
finished reply is committed by the recorder (or by the client that began it); a late
partial write after that changes nothing (storage only updates replies still "partial").
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from app.engine.reasoning import Channel
from app.errors import LlamaDeskError
from app.session.recorder import SessionRecords

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

    def __init__(self, records: SessionRecords, interval_s: float = SAVE_INTERVAL_S) -> None:
        self._records = records
        self.interval_s = interval_s
        self._replies: dict[int, _Reply] = {}  # conversation id -> its streaming reply

    def begin(self, conversation_id: int, message_id: int | None) -> None:
        self._replies.pop(conversation_id, None)
        if message_id is not None and self._records.enabled:
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

    def streamed(self, conversation_id: int) -> tuple[str, str, float | None]:
        """The streaming reply's answer, reasoning and thinking time so far."""
        reply = self._replies.get(conversation_id)
        if reply is None:
            return "", "", None
        return "".join(reply.answer), "".join(reply.reasoning), reply.reasoning_ms

    def close(self) -> None:
        """Write what is left (the session thread ends)."""
        self.tick(time.perf_counter(), force=True)
        self._replies.clear()

    def _write(self, reply: _Reply, now: float) -> None:
        reply.dirty = False
        reply.last_save = now
        recorder = self._records.recorder()
        if recorder is None:
            return
        answer = "".join(reply.answer)
        reasoning: str | None = None
        thinking_ms: float | None = None
        if reply.reasoning:
            reasoning = "".join(reply.reasoning)
            thinking_ms = reply.reasoning_ms
            if thinking_ms is None and reply.started:
                thinking_ms = (now - reply.started) * 1000.0
        try:
            recorder.save_partial(reply.message_id, answer, reasoning, thinking_ms)
        except LlamaDeskError as exc:
            log.warning("could not save reply %d: %s", reply.message_id, exc)
