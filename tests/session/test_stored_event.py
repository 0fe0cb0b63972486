"""A conversation another client stores (the API server's store) is told to the session's
subscribers, so a window lists it at once; a message is removed by the session's recorder,
only from its own conversation (real SQLite)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from app.server.store import ConversationStore
from app.session import ChatMessage
from app.session import events as ev
from app.storage import Database


@pytest.fixture
def db() -> Iterator[Database]:
    database = Database.open()
    yield database
    database.close()


def test_a_stored_api_conversation_is_a_session_event(
    tmp_path: Path, make_session: Callable[..., Any]
) -> None:
    session, recorder = make_session()
    store = ConversationStore(tmp_path / "api.sqlite3", session.tell_stored)
    try:
        cid = store.create("agent")
        recorder.wait(lambda: bool(recorder.session_of(ev.ConversationStored)))
        assert recorder.session_of(ev.ConversationStored) == [ev.ConversationStored(cid, True)]
        store.record(
            cid, "", (ChatMessage("user", "hi"),), ChatMessage("assistant", "yes"), "", 1, 0.0
        ).result(10)
        recorder.wait(lambda: len(recorder.session_of(ev.ConversationStored)) == 2)
        assert recorder.session_of(ev.ConversationStored)[1] == ev.ConversationStored(cid, False)
    finally:
        store.close()


def test_a_message_is_removed_by_the_session_and_only_its_own(
    make_session: Callable[..., Any], db: Database
) -> None:
    session, _ = make_session(database=db)
    conv = db.create_conversation()
    other = db.create_conversation()
    first = db.add_message(conv.id, "user", "first")
    reply = db.add_message(conv.id, "assistant", "reply", parent_id=first.id)
    stranger = db.add_message(other.id, "user", "not yours")
    refused = session.remove_message(conv.id, stranger.id)
    assert "not part of conversation" in str(refused.exception(10))
    assert db.get_message(stranger.id).content == "not yours"
    assert session.remove_message(conv.id, first.id).result(10) is None
    assert [m.id for m in db.get_thread(conv.id)] == [reply.id]
