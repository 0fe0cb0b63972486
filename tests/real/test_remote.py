"""The remote engine against llama.cpp's own ``llama-server`` (tests/remote starts it) on
SmolLM2: a session that records into SQLite, two turns of one conversation.

The first reply is compared with llama-server answering the same request itself with its
prompt cache off: one sequence, the whole prompt in one batch either way, a fresh run of
the same shape (DESIGN.md section 7), so the greedy text must be equal. The second turn
must read only its new suffix (the first prompt and reply come from the server's cache).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from app.engine import SamplingParams
from app.remote import RemoteConnection, ServerKind
from tests.remote.conftest import RemoteChat
from tests.remote.llama_server_process import start_llama_server

pytestmark = pytest.mark.timeout(300)
GREEDY = SamplingParams(temperature=0.0, max_tokens=16, seed=1)
QUESTION = "What is the capital of France?"


@pytest.fixture(scope="module")
def llama_server(smollm2: Path) -> Iterator[str]:
    # start_llama_server adds the app's CPU quirk flags: on the AMX Xeons this project runs
    # on, llama-server dies while loading SmolLM2 without --no-repack (SIGILL, exit 132).
    proc, url = start_llama_server(smollm2)
    yield url
    proc.terminate()
    proc.wait(30)


@pytest.fixture
def chat(llama_server: str, tmp_path: Path) -> Iterator[RemoteChat]:
    remote = RemoteChat(RemoteConnection(llama_server), tmp_path / "chats.sqlite3")
    yield remote
    remote.close()


def test_two_turns_on_llama_server(llama_server: str, chat: RemoteChat) -> None:
    assert chat.load_error is None
    engine = chat.loader.engine
    assert engine is not None and engine.traits.kind is ServerKind.LLAMA_SERVER
    cid, events = chat.new_conversation()
    first = chat.turn(cid, events, QUESTION, GREEDY)
    assert first.failed is None and first.result.n_tokens > 0
    assert first.text == first.result.text

    # llama-server itself, the same request, its cache off: the same shape, the same text
    own = httpx2.post(
        f"{llama_server}/v1/chat/completions",
        json={
            "messages": [{"role": "user", "content": QUESTION}],
            "temperature": 0,
            "max_tokens": GREEDY.max_tokens,
            "cache_prompt": False,
        },
        timeout=120,
    ).json()
    assert own["choices"][0]["message"]["content"] == first.text
    assert own["usage"]["prompt_tokens"] == first.result.n_prompt
    assert own["usage"]["completion_tokens"] == first.result.n_tokens

    second = chat.turn(cid, events, "And of Italy?", GREEDY)
    assert second.failed is None and second.text
    result = second.result
    cached = result.n_prompt - result.n_prompt_processed
    # the first prompt and its reply came from the cache (all but the reply's last token,
    # sampled and never decoded): only the new message was read
    assert cached >= first.result.n_prompt + first.result.n_tokens - 1, (cached, first.result)

    stored = [(m.role, m.content, m.status) for m in chat.db.get_thread(cid)]
    assert stored == [
        ("user", QUESTION, "complete"),
        ("assistant", first.text, "complete"),
        ("user", "And of Italy?", "complete"),
        ("assistant", second.text, "complete"),
    ]
