"""The one writer of messages: the session's recorded turns and the API's exchanges get the
same shape and the same :class:`~app.session.ReplyMeta` (real SQLite, a fake engine)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.engine import ContextSettings
from app.errors import LlamaDeskError
from app.session import ChatMessage, FinishReason, Recorder, ReplyMeta, Session, TurnResult
from app.session import events as ev
from app.storage import Database
from tests.session.fake_engine import FakeEngine, FakeLoader
from tests.session.test_session import Recorder as Events

TIMEOUT = 10.0


@pytest.fixture
def db() -> Iterator[Database]:
    database = Database.open()
    yield database
    database.close()


def start(engine: FakeEngine, database: Database | None) -> tuple[Session, Events]:
    session = Session(None, database, loader=FakeLoader(engine), stream_interval_s=0.0)
    events = Events(session)
    session.load_model("/models/fake.gguf", ContextSettings())
    events.wait(lambda: bool(events.session_of(ev.ModelLoaded)))
    return session, events


def test_answer_records_the_user_message_then_the_reply_with_its_meta(db: Database) -> None:
    conv = db.create_conversation()
    session, events = start(FakeEngine(), db)
    try:
        events.follow(conv.id)
        recorded = session.answer(conv.id, None, "hello", system="Be brief.").result(TIMEOUT)
        result = events.finish(conv.id)
        user, reply = db.get_thread(conv.id)
        assert recorded.user_message_id == user.id and recorded.reply_message_id == reply.id
        assert (user.role, user.content) == ("user", "hello")
        assert (reply.role, reply.content, reply.status) == ("assistant", "Hello there", "complete")
        assert reply.parent_id == user.id and reply.model_path == "/models/fake.gguf"
        assert reply.token_count == 3 and reply.prompt_tokens == result.n_prompt
        assert reply.meta["finish_reason"] == "eog" and reply.meta["engine"] == "fake"
        assert reply.meta["prompt_processed"] == result.n_prompt_processed
        assert reply.meta["ttft_ms"] >= 0.0
        # a regenerate: another reply to the same user message, from the stored thread
        again = session.answer(conv.id, user.id, system="Be brief.").result(TIMEOUT)
        second = events.finish(conv.id, 2)
        assert again.user_message_id is None
        assert second.n_prompt_processed == 0  # the same prompt: all of it from the cache
        assert db.sibling_position(again.reply_message_id) == (2, 2)
    finally:
        session.shutdown()
        assert session.join(TIMEOUT)


def test_a_reply_that_failed_empty_is_dropped_and_the_user_message_stays(db: Database) -> None:
    conv = db.create_conversation()
    engine = FakeEngine()
    engine.fail_start = "The prompt does not fit."
    session, events = start(engine, db)
    try:
        events.follow(conv.id)
        recorded = session.answer(conv.id, None, "hello").result(TIMEOUT)
        assert events.finish(conv.id).finish_reason is FinishReason.ERROR
        thread = db.get_thread(conv.id)
        assert [m.id for m in thread] == [recorded.user_message_id]
    finally:
        session.shutdown()
        assert session.join(TIMEOUT)


def test_a_stopped_reply_is_kept_as_stopped(db: Database) -> None:
    conv = db.create_conversation()
    session, events = start(FakeEngine(endless=True), db)
    try:
        events.follow(conv.id)
        recorded = session.answer(conv.id, None, "go on").result(TIMEOUT)
        events.wait(lambda: bool(events.of(conv.id, ev.TextStreamed)))
        session.stop(conv.id)
        result = events.finish(conv.id)
        reply = db.get_message(recorded.reply_message_id)
        assert reply.status == "stopped" and reply.meta["finish_reason"] == "aborted"
        assert reply.content == result.text and reply.content.startswith("x")
    finally:
        session.shutdown()
        assert session.join(TIMEOUT)


def test_answer_without_a_database_or_a_model_says_why() -> None:
    session = Session(None, None, loader=FakeLoader(FakeEngine()))
    events = Events(session)
    try:
        events.follow(1)
        with pytest.raises(LlamaDeskError, match="No model is loaded"):
            session.answer(1, None, "hello").result(TIMEOUT)
        session.load_model("/models/fake.gguf", ContextSettings())
        events.wait(lambda: bool(events.session_of(ev.ModelLoaded)))
        with pytest.raises(LlamaDeskError, match="no database"):
            session.answer(1, None, "hello").result(TIMEOUT)
        assert [r.finish_reason for r in events.results(1)] == [FinishReason.ERROR] * 2
    finally:
        session.shutdown()
        assert session.join(TIMEOUT)


def test_an_exchange_is_stored_in_the_shape_a_recorded_turn_gets(db: Database) -> None:
    conv = db.create_conversation()
    result = TurnResult(
        text="Hi!",
        finish_reason=FinishReason.EOG,
        n_tokens=2,
        n_prompt=12,
        n_prompt_processed=5,
        prompt_ms=3.0,
        gen_ms=4.0,
        reasoning="think",
        reasoning_ms=7.0,
    )
    meta = ReplyMeta.of(result, "/m.gguf", "llama.cpp")
    recorder = Recorder(db)
    messages = (ChatMessage("user", "a"), ChatMessage("assistant", "b"), ChatMessage("user", "c"))
    first = recorder.record_exchange(conv.id, "sys", messages[:1], "b", meta)
    reply = recorder.record_exchange(conv.id, "sys", messages, "Hi!", meta)
    thread = db.get_thread(conv.id)
    assert [m.content for m in thread] == ["a", "b", "c", "Hi!"]
    assert thread[1].id == first.id  # the stored messages were found, not written again
    assert db.get_conversation(conv.id).system_prompt == "sys"
    assert reply.meta == {
        "finish_reason": "eog",
        "prompt_processed": 5,
        "prompt_ms": 3.0,
        "gen_ms": 4.0,
        "engine": "llama.cpp",
    }
    assert (reply.prompt_tokens, reply.token_count, reply.model_path) == (12, 2, "/m.gguf")
    assert (reply.reasoning, reply.reasoning_ms) == ("think", 7.0)


def test_reply_meta_status_and_notice() -> None:
    def meta(reason: FinishReason, error: str | None = None) -> ReplyMeta:
        return ReplyMeta.of(TurnResult(finish_reason=reason, error=error), "", "x")

    assert meta(FinishReason.ABORTED).status == "stopped"
    assert meta(FinishReason.ERROR, "boom").status == "error"
    assert meta(FinishReason.EOG).status == "complete" and meta(FinishReason.EOG).notice is None
    full = meta(FinishReason.CONTEXT_FULL)
    assert (
        full.status == "complete" and full.notice is not None and "context is full" in full.notice
    )
    assert full.storage_meta()["error"] == full.notice
