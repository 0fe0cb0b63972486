"""API conversations in the app's database, on one worker thread (a connection per thread).

A client's conversation name maps to a storage conversation that carries the name in its
settings (``sampling["api_conversation"]``), so the mapping survives restarts and the
conversation can be opened in the window like any other.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

from app.session import ChatMessage, FinishReason, Recorder, ReplyMeta, TurnResult
from app.storage import Database

log = logging.getLogger(__name__)

NAME_KEY = "api_conversation"
T = TypeVar("T")


class ConversationStore:
    """Storage calls on a private thread (``Database`` is one connection per thread)."""

    def __init__(
        self, path: Path | None, stored: Callable[[int, bool], None] | None = None
    ) -> None:
        """``stored(conversation_id, created)``: told after a conversation's row is made
        or a turn is stored (a window's session passes it on to its conversation list)."""
        self._path = path
        self._stored = stored
        self._db: Database | None = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="api-storage")

    def _run(self, fn: Callable[[Database], T]) -> Future[T]:
        def work() -> T:
            if self._db is None:
                self._db = Database.open(self._path)
            return fn(self._db)

        return self._pool.submit(work)

    def names(self) -> dict[str, int]:
        """Every stored API conversation: name -> storage id."""

        def work(db: Database) -> dict[str, int]:
            out: dict[str, int] = {}
            for conv in db.list_conversations(include_archived=True):
                name = conv.sampling.get(NAME_KEY)
                if isinstance(name, str):
                    out.setdefault(name, conv.id)
            return out

        return self._run(work).result()

    def create(self, name: str) -> int:
        def work(db: Database) -> int:
            conv = db.create_conversation(f"API: {name}", sampling={NAME_KEY: name})
            if self._stored is not None:
                self._stored(conv.id, True)
            return conv.id

        return self._run(work).result()

    def exists(self, conversation_id: int) -> bool:
        def work(db: Database) -> bool:
            try:
                db.get_conversation(conversation_id)
            except Exception:
                return False
            return True

        return self._run(work).result()

    def record(
        self,
        conversation_id: int,
        system: str,
        messages: tuple[ChatMessage, ...],
        reply: ChatMessage,
        model_path: str,
        tokens: int,
        tokens_per_second: float,
        *,
        result: TurnResult | None = None,
        engine: str = "llama.cpp",
    ) -> Future[None]:
        """Store the turn through the session's :class:`~app.session.Recorder` (in the
        background): the messages the stored thread lacks (a branch where they differ),
        then the reply with the same :class:`~app.session.ReplyMeta` a window's reply
        gets, from the turn's ``result``. Without one, only ``tokens`` and
        ``tokens_per_second`` are known (a stored reply is one that finished)."""
        if result is None:
            result = TurnResult(text=reply.content, finish_reason=FinishReason.EOG, n_tokens=tokens)
        meta = ReplyMeta.of(result, model_path, engine, reasoning=reply.reasoning_content)
        if result.n_sampled == 0 and tokens_per_second:
            meta = replace(meta, tokens_per_second=tokens_per_second)

        def work(db: Database) -> None:
            Recorder(db).record_exchange(conversation_id, system, messages, reply.content, meta)
            if self._stored is not None:
                self._stored(conversation_id, False)

        future = self._run(work)
        future.add_done_callback(_log_failure)
        return future

    def close(self) -> None:
        def work(db: Database) -> None:
            db.close()

        if self._db is not None:
            self._run(work).result()
        self._pool.shutdown(wait=True)


def _log_failure(future: Future[None]) -> None:
    exc = future.exception()
    if exc is not None:
        log.warning("an API conversation could not be stored: %s", exc)
