"""The API's conversations are written by the session's recorder: a stored API reply has
the metadata a window's reply gets (real SQLite, on the store's own thread)."""

from __future__ import annotations

from pathlib import Path

from app.server.store import ConversationStore
from app.session import ChatMessage, FinishReason, TurnResult
from app.storage import Database


def test_an_api_reply_is_stored_with_its_reply_meta(tmp_path: Path) -> None:
    path = tmp_path / "api.sqlite3"
    store = ConversationStore(path)
    try:
        cid = store.create("agent")
        assert store.names() == {"agent": cid}
        result = TurnResult(
            text="Hi!",
            finish_reason=FinishReason.EOG,
            n_tokens=2,
            n_prompt=20,
            n_prompt_processed=8,
            prompt_ms=5.0,
            gen_ms=6.0,
            reasoning="hm",
            reasoning_ms=3.0,
        )
        store.record(
            cid,
            "sys",
            (ChatMessage("user", "hello"),),
            ChatMessage("assistant", "Hi!", "hm"),
            "/models/m.gguf",
            result.n_tokens,
            result.tokens_per_second,
            result=result,
        ).result(10)
    finally:
        store.close()
    db = Database.open(path)
    try:
        user, reply = db.get_thread(cid)
        assert (user.role, user.content, reply.content, reply.parent_id) == (
            "user",
            "hello",
            "Hi!",
            user.id,
        )
        assert reply.status == "complete" and reply.model_path == "/models/m.gguf"
        assert (reply.token_count, reply.prompt_tokens) == (2, 20)
        assert (reply.reasoning, reply.reasoning_ms) == ("hm", 3.0)
        assert reply.meta["finish_reason"] == "eog" and reply.meta["prompt_processed"] == 8
        assert reply.meta["engine"] == "llama.cpp"
    finally:
        db.close()


def test_without_the_turn_result_the_counts_it_was_given_are_stored(tmp_path: Path) -> None:
    path = tmp_path / "api.sqlite3"
    store = ConversationStore(path)
    try:
        cid = store.create("old-caller")
        store.record(
            cid, "", (ChatMessage("user", "a"),), ChatMessage("assistant", "b"), "/m", 7, 12.5
        ).result(10)
    finally:
        store.close()
    db = Database.open(path)
    try:
        reply = db.get_thread(cid)[-1]
        assert (reply.token_count, reply.tokens_per_second, reply.model_path) == (7, 12.5, "/m")
    finally:
        db.close()
