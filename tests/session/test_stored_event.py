"""A conversation another client stores (the API server's store) is told to the session's
subscribers, so a window lists it at once (real SQLite, the store's own thread)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.server.store import ConversationStore
from app.session import ChatMessage
from app.session import events as ev


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
