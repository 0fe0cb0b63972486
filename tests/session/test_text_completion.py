"""Text completion through the session (issue 28, item 6): ``Session.answer(raw=True)``
records the user's text and the continuation as a chat turn does, but the prompt is the
stored thread joined as it stands (no template, no system prompt), and answering the
continuation again with no text goes on from the whole document (real SQLite, a fake
engine that counts the prompt's characters as tokens)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.messages import document
from app.storage import Database
from tests.session.fake_engine import FakeEngine
from tests.session.test_recorder import TIMEOUT, start


@pytest.fixture
def db() -> Iterator[Database]:
    database = Database.open()
    yield database
    database.close()


def test_a_raw_answer_continues_the_document_as_it_stands(db: Database) -> None:
    conv = db.create_conversation()
    session, events = start(FakeEngine(), db)
    try:
        events.follow(conv.id)
        opening = "Once upon a time, in a small village by the sea,"
        first = session.answer(conv.id, None, opening, system="Be brief.", raw=True)
        recorded = first.result(TIMEOUT)
        result = events.finish(conv.id)
        # the fake engine counts a chat prompt's role markers and system prompt too
        assert result.n_prompt == len(opening)
        user, reply = db.get_thread(conv.id)
        assert (user.content, reply.content) == (opening, "Hello there")
        assert reply.parent_id == user.id == recorded.user_message_id
        assert reply.status == "complete"

        # "Continue": no new text, the reply answers the document's last part
        again = session.answer(conv.id, reply.id, raw=True).result(TIMEOUT)
        second = events.finish(conv.id, 2)
        thread = db.get_thread(conv.id, again.reply_message_id)
        assert [m.id for m in thread[:2]] == [user.id, reply.id]
        assert second.n_prompt == len(opening + "Hello there")
        assert document(thread) == opening + "Hello there" + thread[-1].content

        # the user adds text: the prompt is the document with it, nothing in between
        added = session.answer(conv.id, again.reply_message_id, " And then", raw=True)
        added.result(TIMEOUT)
        third = events.finish(conv.id, 3)
        assert third.n_prompt == len(document(thread) + " And then")
    finally:
        session.shutdown()
        assert session.join(TIMEOUT)
