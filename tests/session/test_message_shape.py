"""One shape per message (issue 19 item 2): a stored message becomes one frozen
:class:`app.messages.ChatMessage`, the same class the session, the API and the engine
port take, and a dict only for the template."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import app.session as session
from app.messages import ChatMessage, history
from app.session.recorder import history as recorder_history
from app.storage import Database


def test_one_class_from_storage_to_the_template(tmp_path: Path) -> None:
    db = Database.open(tmp_path / "chats.db")
    try:
        conv = db.create_conversation("shapes")
        user = db.add_message(conv.id, "user", "Which camelid is smallest?")
        thought = db.add_message(
            conv.id, "assistant", "The vicuña.", user.id, reasoning="Llamas are big."
        )
        failed = db.begin_reply(conv.id, thought.id)  # an empty failed reply
        db.finish_reply(failed.id, "", "error")
        thread = db.get_thread(conv.id, failed.id)
    finally:
        db.close()
    assert session.ChatMessage is ChatMessage  # the session's name is the same class
    assert recorder_history is history
    turn = history(thread)
    assert turn == (
        ChatMessage("user", "Which camelid is smallest?"),
        ChatMessage("assistant", "The vicuña.", "Llamas are big."),
    )
    assert thread[1].chat() == turn[1]  # the stored row's own conversion is the same
    with pytest.raises(dataclasses.FrozenInstanceError):
        turn[0].content = "changed"  # type: ignore[misc]
    # a dict at the template only: reasoning goes as reasoning_content when there is some
    assert [m.to_engine() for m in turn] == [
        {"role": "user", "content": "Which camelid is smallest?"},
        {"role": "assistant", "content": "The vicuña.", "reasoning_content": "Llamas are big."},
    ]


def test_a_users_reasoning_is_not_sent() -> None:
    class Row:
        role = "user"
        content = "hi"
        reasoning = "stray"

    assert history([Row()]) == (ChatMessage("user", "hi"),)
