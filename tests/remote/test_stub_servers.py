"""The remote engine against stub servers: plain OpenAI SSE, Ollama's and vLLM's ways."""

from __future__ import annotations

import queue
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from app.engine import ContextSettings, SamplingParams
from app.remote import ServerKind
from app.session import ChatMessage, FinishReason, Session
from app.session import events as ev
from tests.remote.conftest import RemoteChat
from tests.remote.stub_server import REPLY, StubServer

pytestmark = pytest.mark.timeout(60)

MakeStub = Callable[..., StubServer]
MakeChat = Callable[..., RemoteChat]


def test_plain_openai_server_answers_and_is_recorded(stub: MakeStub, remote_chat: MakeChat) -> None:
    server = stub("openai")
    chat = remote_chat(server.url)
    assert chat.loaded is not None, chat.load_error
    assert chat.loaded.model.engine.startswith("OpenAI-compatible on 127.0.0.1:")
    # what the server does not give is said when it loads
    assert chat.loaded.warning is not None
    assert "context size" in chat.loaded.warning and "prompt progress" in chat.loaded.warning
    cid, events = chat.new_conversation()
    turn = chat.turn(cid, events, "Hi there")
    assert turn.failed is None
    assert turn.result.finish_reason is FinishReason.EOG
    assert turn.result.text == "".join(REPLY) == turn.text
    assert turn.result.n_prompt > 0
    assert turn.result.n_prompt_processed == turn.result.n_prompt  # no cached tokens said
    assert chat.loader.engine is not None and chat.loader.engine.reports_cached is False
    stored = chat.db.get_thread(cid)
    assert [(m.role, m.content, m.status) for m in stored] == [
        ("user", "Hi there", "complete"),
        ("assistant", "".join(REPLY), "complete"),
    ]
    assert stored[-1].meta["engine"] == chat.loaded.model.engine
    body = server.chat_bodies()[0]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    # llama-server's own fields are not sent to a server that did not say it has them
    assert not {"cache_prompt", "id_slot", "return_progress", "keep_alive"} & set(body)
    for seen in server.requests:
        assert "x-conversation-id" not in {k.lower() for k in seen.headers}


def test_second_turn_resends_the_first_as_a_prefix(stub: MakeStub, remote_chat: MakeChat) -> None:
    server = stub("openai")
    chat = remote_chat(server.url)
    cid, events = chat.new_conversation()
    chat.turn(cid, events, "One")
    chat.turn(cid, events, "Two")
    first, second = server.chat_bodies()
    assert second["messages"][: len(first["messages"])] == first["messages"]
    assert second["messages"][len(first["messages"])] == {
        "role": "assistant",
        "content": "".join(REPLY),
    }


def test_ollama_keep_alive_and_cached_tokens(stub: MakeStub, remote_chat: MakeChat) -> None:
    server = stub("ollama")
    chat = remote_chat(server.url)
    assert chat.loader.engine is not None
    assert chat.loader.engine.traits.kind is ServerKind.OLLAMA
    cid, events = chat.new_conversation()
    chat.turn(cid, events, "One")
    turn = chat.turn(cid, events, "Two")
    assert all(body["keep_alive"] for body in server.chat_bodies())
    cached = turn.result.n_prompt - turn.result.n_prompt_processed
    assert cached > 0
    assert chat.loader.engine.reports_cached is True


@pytest.mark.parametrize("details", [False, True])
def test_vllm_cached_tokens_only_with_prompt_details(
    stub: MakeStub, remote_chat: MakeChat, details: bool
) -> None:
    server = stub("vllm", vllm_prompt_details=details)
    chat = remote_chat(server.url)
    engine = chat.loader.engine
    assert engine is not None and engine.traits.kind is ServerKind.VLLM
    assert engine.traits.n_ctx == 4096  # max_model_len
    assert chat.loaded is not None and "enable-prompt-tokens-details" in (chat.loaded.warning or "")
    cid, events = chat.new_conversation()
    chat.turn(cid, events, "One")
    turn = chat.turn(cid, events, "Two")
    cached = turn.result.n_prompt - turn.result.n_prompt_processed
    assert (cached > 0) is details
    assert engine.reports_cached is details


@pytest.mark.parametrize("how", ["[think]", "[reasoning]"])
def test_reasoning_is_split_from_the_answer(
    stub: MakeStub, remote_chat: MakeChat, how: str
) -> None:
    """``reasoning_content`` goes to the reasoning; tags in the text go through the app's
    splitter (the server did not parse them)."""
    chat = remote_chat(stub("openai").url)
    cid, events = chat.new_conversation()
    turn = chat.turn(cid, events, f"think first {how}")
    assert turn.result.reasoning == "let me see"
    assert turn.result.text == "".join(REPLY)
    assert turn.result.reasoning_ms is not None
    reply = chat.db.get_thread(cid)[-1]
    assert (reply.content, reply.reasoning) == ("".join(REPLY), "let me see")


def test_a_remote_and_a_local_session_generate_at_the_same_time(
    stub: MakeStub, remote_chat: MakeChat, tiny_model: Path
) -> None:
    """The remote turn streams on its own threads: a local session's turn runs meanwhile."""
    server = stub("openai")
    chat = remote_chat(server.url)
    local = Session(stream_interval_s=0.0, name="local")
    local_events: queue.SimpleQueue[Any] = queue.SimpleQueue()
    local.subscribe_session(local_events.put)
    local.subscribe(1, local_events.put)
    try:
        local.load_model(str(tiny_model), ContextSettings(n_ctx=1024, n_threads=1))
        while not isinstance(event := local_events.get(timeout=60), ev.ModelLoaded):
            assert not isinstance(event, ev.ModelLoadFailed), event
        cid, events = chat.new_conversation()
        # held after its first piece until the local turn is done: the order is the
        # test's, not the machine's speed
        remote_future = chat.send(cid, "held [held]")
        assert server.state.chat_received.wait(60)  # the remote reply is under way
        local_turn = local.submit(
            1, [ChatMessage("user", "hello")], sampling=SamplingParams(max_tokens=8)
        )
        while True:
            event = local_events.get(timeout=60)
            if isinstance(event, ev.TurnFinished) and event.turn_id == local_turn:
                break
        # the local turn ended while the remote reply was held: it did not wait for it
        server.state.held_release.set()
        remote = chat.wait(remote_future, events)
        assert remote.failed is None and remote.result.text == "".join(REPLY)
    finally:
        local.shutdown()
        local.join(30)
