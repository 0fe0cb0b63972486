"""Issue 28 item 1: a recorded turn's end carries its stored reply (ReplyStored, just
before TurnFinished) with the typed ReplyMeta and its place among its siblings, so a
window shows it without reading it back; the stored meta is read back typed
(StoredFigures), never by its keys (real SQLite, the fake engine)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.session import FinishReason
from app.session import events as ev
from app.session.recorder import StoredFigures
from app.storage import Database
from tests.session.fake_engine import FakeEngine
from tests.session.test_recorder import TIMEOUT, start


@pytest.fixture
def db() -> Iterator[Database]:
    database = Database.open()
    yield database
    database.close()


def test_the_stored_reply_comes_before_the_turns_end(db: Database) -> None:
    conv = db.create_conversation()
    session, events = start(FakeEngine(), db)
    try:
        events.follow(conv.id)
        first = session.answer(conv.id, None, "hello").result(TIMEOUT)
        events.finish(conv.id)
        again = session.answer(conv.id, first.user_message_id).result(TIMEOUT)
        events.finish(conv.id, 2)
        kinds = [type(e) for e in events.of(conv.id, ev.ReplyStored)]
        assert kinds == [ev.ReplyStored, ev.ReplyStored]
        order = [
            type(e).__name__
            for e in events.conversation
            if e.conversation_id == conv.id and isinstance(e, ev.ReplyStored | ev.TurnFinished)
        ]
        assert order == ["ReplyStored", "TurnFinished"] * 2
        stored = events.of(conv.id, ev.ReplyStored)[1]
        assert isinstance(stored, ev.ReplyStored) and stored.message is not None
        assert stored.message.id == again.reply_message_id
        assert stored.message == db.get_message(again.reply_message_id)  # as stored
        assert (stored.sibling_index, stored.sibling_count) == (2, 2)
        assert stored.meta.finish_reason is FinishReason.EOG and stored.meta.engine == "fake"
        assert stored.meta.status == "complete" and stored.meta.n_tokens == 3
        figures = StoredFigures.of(stored.message.meta)
        assert figures.finish_reason is FinishReason.EOG and figures.engine == "fake"
        assert figures.prompt_processed == stored.meta.n_prompt - stored.meta.n_cached
        assert figures.ttft_ms is not None and figures.error is None
    finally:
        session.shutdown()
        assert session.join(TIMEOUT)


def test_a_reply_dropped_empty_is_said_with_no_message(db: Database) -> None:
    conv = db.create_conversation()
    engine = FakeEngine()
    engine.fail_start = "The prompt does not fit."
    session, events = start(engine, db)
    try:
        events.follow(conv.id)
        session.answer(conv.id, None, "hello").result(TIMEOUT)
        events.finish(conv.id)
        (stored,) = events.of(conv.id, ev.ReplyStored)
        assert isinstance(stored, ev.ReplyStored) and stored.message is None
        assert stored.meta.status == "error" and stored.meta.notice == "The prompt does not fit."
    finally:
        session.shutdown()
        assert session.join(TIMEOUT)


def test_stored_figures_read_what_is_there_and_no_more() -> None:
    assert StoredFigures.of(None) == StoredFigures()
    odd = StoredFigures.of({"finish_reason": "weird", "prompt_processed": "3", "ttft_ms": 2})
    assert odd == StoredFigures(finish_reason=FinishReason.ERROR, ttft_ms=2.0)
