"""The reply's room in a remote server's context (issue 21's leftover): ``max_tokens`` is
capped to what the server's context has left, and a conversation that fills it says the
local engine's sentence instead of a 400, against ``llamadesk serve`` with a 512-token
context (and llama-server where it is built)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from app.engine import SamplingParams
from app.engine.chat_template import ReasoningOptions
from app.remote import RemoteConnection
from app.remote.completion import Renderer
from app.remote.room import ContextRoom, count_tokens, fit
from app.session import FinishReason
from tests.remote.conftest import RemoteChat
from tests.remote.llama_server_process import start_llama_server
from tests.support.serve_process import ServeProcess

pytestmark = pytest.mark.timeout(180)

N_CTX = 512
# The tiny model cannot end this: a reply runs to its max_tokens (or the room left).
ENDLESS = 'root ::= ("hello" | " world" | " tab" | " llama") root'
FULL = re.compile(
    r"The conversation needs ([\d,]+) tokens but the context holds 512: raise the context "
    r"size, shorten the message, or start a new chat\."
)


def words(n: int) -> str:
    """``n`` words: about 5 tokens each (the tiny vocabulary's tokenizer spells them)."""
    return " ".join(["hello", "world", "the", "model"] * (n // 4))


@pytest.fixture(scope="module")
def small_server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    proc = ServeProcess(
        [str(tiny_model), "--ctx-size", str(N_CTX), "--threads", "1", "--parallel", "1"],
        tmp_path_factory.mktemp("serve-small"),
    )
    yield proc.url
    proc.stop()


@pytest.fixture(scope="module")
def small_llama_server(tiny_model: Path) -> Iterator[str]:
    proc, url = start_llama_server(tiny_model, "-c", str(N_CTX), "--parallel", "1")
    yield url
    proc.terminate()
    proc.wait(30)


def endless(max_tokens: int) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, grammar=ENDLESS)


def test_a_long_conversation_gets_the_room_left_not_a_400(
    remote_chat: Callable[..., RemoteChat], small_server: str
) -> None:
    # The server itself caps what the conversation asks for when sent as it is (as
    # llama-server does): the reply runs until its context is full.
    body = {
        "messages": [{"role": "user", "content": words(64)}],
        "max_tokens": 400,
        "stream": False,
    }
    capped = httpx2.post(small_server + "/v1/chat/completions", json=body, timeout=60)
    assert capped.status_code == 200, capped.text
    usage, finish = capped.json()["usage"], capped.json()["choices"][0]["finish_reason"]
    # until the context is full (its last token sampled, never stored: hence + 1), unless
    # the sampled reply ended by itself first
    assert finish == "stop" or usage["total_tokens"] == N_CTX + 1, (finish, usage)
    chat = remote_chat(small_server)
    assert chat.loaded is not None and chat.loaded.model.n_ctx == N_CTX
    cid, events = chat.new_conversation()
    turn = chat.turn(cid, events, words(64), endless(400))
    assert turn.failed is None and turn.result.error is None
    result = turn.result
    assert result.finish_reason is FinishReason.LENGTH
    assert result.n_prompt > 250
    # the reply filled the room the count left: all of it (the count may err by the one
    # BOS a template writes itself, never the other way)
    assert N_CTX - 1 <= result.n_prompt + result.n_tokens <= N_CTX
    # a short turn in a fresh conversation keeps its own max_tokens
    cid2, events2 = chat.new_conversation()
    short = chat.turn(cid2, events2, "hello world", endless(12))
    assert short.result.finish_reason is FinishReason.LENGTH and short.result.n_tokens == 12


def test_a_full_context_says_the_local_sentence(
    remote_chat: Callable[..., RemoteChat], small_server: str
) -> None:
    chat = remote_chat(small_server)
    cid, events = chat.new_conversation()
    turn = chat.turn(cid, events, words(120), endless(64))
    assert turn.failed is not None and turn.result.finish_reason is FinishReason.ERROR
    match = FULL.fullmatch(turn.failed)
    assert match, turn.failed
    assert int(match.group(1).replace(",", "")) >= N_CTX
    # the conversation goes on: a short message in a new one is answered
    cid2, events2 = chat.new_conversation()
    assert chat.turn(cid2, events2, "hello", endless(4)).result.n_tokens == 4


def test_counting_is_asked_only_when_it_could_matter(small_server: str) -> None:
    seen: list[str] = []

    def hook(request: Any) -> None:
        seen.append(request.url.path)

    conn = RemoteConnection(small_server)
    with httpx2.Client(event_hooks={"request": [hook]}) as client:
        renderer = Renderer(None, "", "")
        room = ContextRoom(N_CTX, 64, renderer, ReasoningOptions())
        short = {"messages": [{"role": "user", "content": "hello world"}]}
        assert fit(client, conn, room, short) == 64
        assert seen == []  # its bytes alone show that it fits
        long = {"messages": [{"role": "user", "content": words(88)}]}
        started = time.perf_counter()
        capped = fit(client, conn, room, long)
        elapsed_ms = (time.perf_counter() - started) * 1000
        assert seen == ["/apply-template", "/tokenize"]
        assert 0 < capped < 64
        rendered = renderer.render(client, conn, long, ReasoningOptions())
        assert capped == N_CTX - count_tokens(client, conn, rendered)
        print(f"apply-template + tokenize of {len(words(88))} characters: {elapsed_ms:.1f} ms")


def test_llama_server_gets_the_room_left_too(
    remote_chat: Callable[..., RemoteChat], small_llama_server: str
) -> None:
    chat = remote_chat(small_llama_server)
    assert chat.loaded is not None and chat.loaded.model.n_ctx == N_CTX
    cid, events = chat.new_conversation()
    turn = chat.turn(cid, events, words(64), endless(400))
    assert turn.failed is None and turn.result.finish_reason is FinishReason.LENGTH
    assert N_CTX - 2 <= turn.result.n_prompt + turn.result.n_tokens <= N_CTX
    cid2, events2 = chat.new_conversation()
    full = chat.turn(cid2, events2, words(120), endless(64))
    assert full.failed is not None and FULL.fullmatch(full.failed), full.failed
