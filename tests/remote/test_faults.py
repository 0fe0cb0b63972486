"""Every fault of the wire, injected by stub servers: a sentence for that conversation, the
partial reply kept and marked stopped, retries only where safe, the others unaffected."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from app.remote import INSECURE_FLAG, RemoteConnection, RemoteConnectionError
from app.remote import turn as remote_turn
from app.session import FinishReason
from app.session import events as ev
from tests.remote.conftest import RemoteChat, Turn
from tests.remote.stub_server import REPLY, StubServer

pytestmark = pytest.mark.timeout(60)

MakeStub = Callable[..., StubServer]
MakeChat = Callable[..., RemoteChat]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def one_turn(chat: RemoteChat, text: str) -> tuple[int, Turn]:
    cid, events = chat.new_conversation()
    return cid, chat.turn(cid, events, text)


def assert_dropped_reply(chat: RemoteChat, cid: int, user_text: str) -> None:
    """A failure before any text: the user's message stays, no assistant message."""
    assert [(m.role, m.content) for m in chat.db.get_thread(cid)] == [("user", user_text)]


def assert_kept_cut_off(chat: RemoteChat, cid: int, sentence: str) -> None:
    """A failure mid-reply: what came is kept, stored as cut off (an error the window offers
    to try again), not as stopped (which only the user does)."""
    reply = chat.db.get_thread(cid)[-1]
    assert reply.role == "assistant"
    assert reply.content == "".join(REPLY[:2])  # what came before the fault
    assert reply.status == "error"
    assert sentence in reply.meta["error"]


# ---------------------------------------------------------------- connecting


def test_server_down_at_load_is_a_sentence(remote_chat: MakeChat) -> None:
    chat = remote_chat(f"http://127.0.0.1:{free_port()}", connect_timeout_s=2.0)
    assert chat.loaded is None
    assert chat.load_error is not None and "nothing answers there" in chat.load_error


def test_wrong_api_key_is_said_at_load(stub: MakeStub, remote_chat: MakeChat) -> None:
    server = stub("openai", api_key="sesame")
    assert "refused the API key" in (remote_chat(server.url, api_key="wrong").load_error or "")
    assert remote_chat(server.url, api_key="sesame").loaded is not None


def test_unknown_model_lists_the_servers_models(stub: MakeStub, remote_chat: MakeChat) -> None:
    chat = remote_chat(stub("openai").url, model="no-such-model")
    assert chat.load_error is not None and "stub-model" in chat.load_error


def test_plain_http_beyond_loopback_needs_the_confirmation() -> None:
    with pytest.raises(RemoteConnectionError, match=INSECURE_FLAG):
        RemoteConnection("http://192.0.2.7:8080").validate()
    RemoteConnection("http://192.0.2.7:8080", allow_insecure=True).validate()
    RemoteConnection("https://192.0.2.7:8443").validate()
    RemoteConnection("http://localhost:8080/v1").validate()
    RemoteConnection("http://[::1]:8080").validate()
    with pytest.raises(RemoteConnectionError, match="not a server address"):
        RemoteConnection("ftp://example.org").validate()


def test_server_gone_after_load_fails_that_turn(stub: MakeStub, remote_chat: MakeChat) -> None:
    server = stub("openai")
    chat = remote_chat(server.url, connect_timeout_s=1.0)
    server.close()
    t0 = time.monotonic()
    cid, turn = one_turn(chat, "Anyone?")
    assert turn.failed is not None and "nothing answers there" in turn.failed
    assert turn.result.finish_reason is FinishReason.ERROR
    assert time.monotonic() - t0 < 10  # two quick retries, not more
    assert_dropped_reply(chat, cid, "Anyone?")


class _Retrying(logging.Handler):
    """Set when the turn says it will try a refused connection again."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "Trying again in" in record.getMessage():
            self.seen.set()


def test_connection_refused_is_retried_before_anything_was_sent(
    stub: MakeStub, remote_chat: MakeChat, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = stub("openai")
    port = int(server.url.rsplit(":", 1)[1])
    chat = remote_chat(server.url)
    server.close()
    # a pause a busy machine cannot miss between the refusal and the retry
    monkeypatch.setattr(remote_turn, "CONNECT_BACKOFF_S", 2.0)
    retrying = _Retrying()
    logger = logging.getLogger(remote_turn.__name__)
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(retrying)
    try:
        cid, events = chat.new_conversation()
        future = chat.send(cid, "Back soon")
        assert retrying.seen.wait(60)  # the first try was refused
        again = stub("openai", port=port)  # the server is back for the retry
    finally:
        logger.removeHandler(retrying)
        logger.setLevel(level)
    turn = chat.wait(future, events)
    assert turn.failed is None and turn.result.text == "".join(REPLY)
    assert len(again.chat_bodies()) == 1


@pytest.fixture
def silent_listener() -> Iterator[str]:
    """A port whose listen queue is full: connections are never accepted."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    url = f"http://127.0.0.1:{server.getsockname()[1]}"
    fillers = []
    for _ in range(4):  # fill the backlog; later SYNs are dropped (no accept ever)
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(server.getsockname())
        fillers.append(s)
    yield url
    for s in fillers:
        s.close()
    server.close()


def test_connect_timeout_is_a_sentence(silent_listener: str, remote_chat: MakeChat) -> None:
    t0 = time.monotonic()
    chat = remote_chat(silent_listener, connect_timeout_s=0.3)
    assert chat.load_error is not None
    assert "did not accept the connection in time" in chat.load_error
    assert time.monotonic() - t0 < 10


# ---------------------------------------------------------------- statuses


@pytest.mark.parametrize(
    ("code", "sentence"),
    [
        ("401", "refused the API key (HTTP 401)"),
        ("404", "has no such model or route (HTTP 404)"),
        ("500", "failed while answering (HTTP 500)"),
    ],
)
def test_http_errors_fail_the_turn_with_a_sentence(
    stub: MakeStub, remote_chat: MakeChat, code: str, sentence: str
) -> None:
    server = stub("openai")
    chat = remote_chat(server.url)
    cid, turn = one_turn(chat, f"please [{code}]")
    assert turn.failed is not None and sentence in turn.failed
    assert f"stub says {code}" in turn.failed  # the server's own words go along
    assert turn.result.finish_reason is FinishReason.ERROR
    assert len(server.chat_bodies()) == 1  # not retried: the server may have run it
    assert_dropped_reply(chat, cid, f"please [{code}]")


def test_429_with_a_short_retry_after_is_waited_out_once(
    stub: MakeStub, remote_chat: MakeChat
) -> None:
    server = stub("openai")
    chat = remote_chat(server.url)
    _, turn = one_turn(chat, "busy? [429-once]")
    assert turn.failed is None and turn.result.text == "".join(REPLY)
    assert len(server.chat_bodies()) == 2


def test_429_with_a_long_retry_after_fails_at_once(stub: MakeStub, remote_chat: MakeChat) -> None:
    server = stub("openai")
    chat = remote_chat(server.url)
    t0 = time.monotonic()
    _, turn = one_turn(chat, "busy? [429]")
    assert turn.failed is not None and "rate-limited (HTTP 429)" in turn.failed
    assert "wait 60 s" in turn.failed
    assert time.monotonic() - t0 < 10 and len(server.chat_bodies()) == 1


# ---------------------------------------------------------------- streams


def test_stream_dropped_mid_reply_keeps_the_partial_reply(
    stub: MakeStub, remote_chat: MakeChat
) -> None:
    chat = remote_chat(stub("openai").url)
    cid, turn = one_turn(chat, "talk [drop]")
    assert turn.failed is not None and "broke off before the reply ended" in turn.failed
    assert turn.result.finish_reason is FinishReason.ABORTED
    assert turn.result.text == "".join(REPLY[:2])
    assert_kept_cut_off(chat, cid, "broke off")


def test_malformed_sse_keeps_the_partial_reply(stub: MakeStub, remote_chat: MakeChat) -> None:
    chat = remote_chat(stub("openai").url)
    cid, turn = one_turn(chat, "talk [malformed]")
    assert turn.failed is not None and "not JSON" in turn.failed
    assert_kept_cut_off(chat, cid, "not JSON")


def test_an_answer_that_is_no_event_stream(stub: MakeStub, remote_chat: MakeChat) -> None:
    chat = remote_chat(stub("openai").url)
    cid, turn = one_turn(chat, "talk [not-sse]")
    assert turn.failed is not None and "did not answer with an event stream" in turn.failed
    assert_dropped_reply(chat, cid, "talk [not-sse]")


def test_a_server_that_never_answers_times_out(stub: MakeStub, remote_chat: MakeChat) -> None:
    chat = remote_chat(stub("openai").url, read_timeout_s=0.5)
    t0 = time.monotonic()
    cid, turn = one_turn(chat, "hello? [hang]")
    assert turn.failed is not None and "stopped sending" in turn.failed
    assert time.monotonic() - t0 < 10
    assert_dropped_reply(chat, cid, "hello? [hang]")


def test_stop_mid_reply_closes_the_stream_at_once(stub: MakeStub, remote_chat: MakeChat) -> None:
    chat = remote_chat(stub("openai").url)
    cid, events = chat.new_conversation()
    future = chat.send(cid, "tell me the rest later [held]")
    while not isinstance(events.get(timeout=30), ev.TextStreamed):
        pass  # the reply is under way, and held after its first piece
    t0 = time.monotonic()
    chat.session.stop(cid)
    turn = chat.wait(future, events)
    # the stub holds the rest for 60 s: the stop, not the stream's end, ended the turn
    # (bounded for a busy machine; milliseconds when idle)
    assert time.monotonic() - t0 < 20
    assert turn.failed is None and turn.result.finish_reason is FinishReason.ABORTED
    reply = chat.db.get_thread(cid)[-1]
    assert reply.status == "stopped" and reply.content == turn.result.text
    assert 0 < len(turn.result.text) < len("".join(REPLY))


def test_a_failing_conversation_leaves_the_others_alone(
    stub: MakeStub, remote_chat: MakeChat
) -> None:
    chat = remote_chat(stub("openai").url)
    bad, bad_events = chat.new_conversation()
    good, good_events = chat.new_conversation()
    hang, hang_events = chat.new_conversation()
    f_bad = chat.send(bad, "slowly [slow] [drop]")
    f_hang = chat.send(hang, "[hang]")
    f_good = chat.send(good, "slowly [slow]")
    good_turn = chat.wait(f_good, good_events)
    bad_turn = chat.wait(f_bad, bad_events)
    assert bad_turn.failed is not None
    assert good_turn.failed is None and good_turn.result.text == "".join(REPLY)
    chat.session.stop(hang)  # the hung one is still waiting; a stop ends it
    assert chat.wait(f_hang, hang_events).result.finish_reason is FinishReason.ABORTED


def test_stop_before_the_headers_closes_the_connection(
    stub: MakeStub, remote_chat: MakeChat
) -> None:
    """A server still reading a long prompt has sent nothing yet: a stop closes the
    connection all the same (the server frees the slot) at once, not when the server gives up."""
    server = stub("openai")
    chat = remote_chat(server.url)
    cid, events = chat.new_conversation()
    chat.turn(cid, events, "first")  # the conversation's connection is kept alive
    server.state.chat_received.clear()
    future = chat.send(cid, "long prompt [silent]")
    assert server.state.chat_received.wait(60)  # the server has it and says nothing
    t0 = time.monotonic()
    chat.session.stop(cid)
    turn = chat.wait(future, events)
    assert turn.result.finish_reason is FinishReason.ABORTED
    # The stub gives up on a silent client after 30 s: well before that (bounded for a
    # busy machine; about a millisecond when idle), the client is what closed it.
    deadline = time.monotonic() + 20
    while not server.state.closed_at and time.monotonic() < deadline:
        time.sleep(0.02)
    assert 0 < server.state.closed_at - t0 < 20
