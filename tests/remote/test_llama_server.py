"""The remote engine against llama.cpp's own ``llama-server`` on 127.0.0.1 (the tiny
model), built from the vendored sources by benchmarks/bench_server.py into the benchmark
cache; skipped (with the reason) where it has not been built.

Two turns: the second reports cached tokens and decodes only the new suffix; each
conversation is pinned to a slot of its own; prompt progress comes through; closing a
conversation mid-reply frees its slot within a second.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx2
import pytest

from app.engine import SamplingParams
from app.remote import ServerKind
from app.session import ChatMessage
from app.session import events as ev
from tests.remote.conftest import RemoteChat

pytestmark = pytest.mark.timeout(180)

CACHE = Path(os.environ.get("LLAMADESK_BENCH_CACHE", "~/.cache/llamadesk-bench")).expanduser()
BINARY = Path(
    os.environ.get("LLAMADESK_LLAMA_SERVER", CACHE / "llama-server-build" / "bin" / "llama-server")
)


@pytest.fixture(scope="module")
def llama_server(tiny_model: Path) -> Iterator[str]:
    if not BINARY.exists():
        pytest.skip(f"llama-server is not built ({BINARY}): benchmarks/bench_server.py builds it")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [str(BINARY), "-m", str(tiny_model), "--port", str(port), "-c", "4096"]
    argv += ["--parallel", "2", "-t", "1", "--no-webui"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"llama-server exited with {proc.returncode}"
        try:
            if httpx2.get(f"{url}/health", timeout=2).status_code == 200:
                break
        except httpx2.HTTPError:
            pass
        time.sleep(0.2)
    yield url
    proc.terminate()
    proc.wait(30)


def test_probe_knows_llama_server(
    llama_server: str, remote_chat: Callable[..., RemoteChat]
) -> None:
    chat = remote_chat(llama_server)
    engine = chat.loader.engine
    assert engine is not None
    assert engine.traits.kind is ServerKind.LLAMA_SERVER
    assert engine.traits.total_slots == 2 and engine.traits.pins_slots
    assert engine.traits.n_ctx == 2048  # 4096 over two slots
    for _ in range(2):
        chat.new_conversation()
    deadline = time.monotonic() + 10
    while len(engine.pinned_slots()) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)  # the opens run on the session thread
    assert sorted(engine.pinned_slots(), key=str) == [0, 1]  # one slot per conversation


def test_second_turn_reads_only_the_new_suffix(
    llama_server: str, remote_chat: Callable[..., RemoteChat]
) -> None:
    chat = remote_chat(llama_server)
    cid, events = chat.new_conversation()
    first = chat.turn(cid, events, "hello world, what is the cache of the model")
    assert first.failed is None and first.result.n_prompt > 0
    assert first.progress, "llama-server's return_progress"
    second = chat.turn(cid, events, "and the tab")
    result = second.result
    cached = result.n_prompt - result.n_prompt_processed
    assert cached > 0
    # the first prompt and (most of) its reply came from the cache: only the suffix was read
    assert cached >= first.result.n_prompt
    assert result.n_prompt_processed < result.n_prompt - first.result.n_prompt + 2


def test_closing_mid_reply_frees_the_slot(
    llama_server: str, remote_chat: Callable[..., RemoteChat]
) -> None:
    chat = remote_chat(llama_server)
    cid, events = chat.new_conversation()
    chat.session.submit(
        cid, [ChatMessage("user", "talk")], sampling=SamplingParams(max_tokens=1500)
    )
    while not isinstance(event := events.get(timeout=30), ev.TextStreamed):
        assert not isinstance(event, ev.TurnFinished), "the reply ended before the close"
    chat.session.close(cid, save=False)
    t0 = time.monotonic()

    def processing() -> bool:
        slots = httpx2.get(f"{llama_server}/slots", timeout=5).json()
        return any(s.get("is_processing") for s in slots)

    while processing():
        assert time.monotonic() - t0 < 1.0, "the slot is still generating"
        time.sleep(0.05)
