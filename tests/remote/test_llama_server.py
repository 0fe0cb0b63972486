"""The remote engine against llama.cpp's own ``llama-server`` on 127.0.0.1 (the tiny
model), built from the vendored sources by ``python -m tests.support.peers`` (the README's
test command runs it first).

Two turns: the second reports cached tokens and decodes only the new suffix; each
conversation is pinned to a slot of its own; prompt progress comes through; closing a
conversation mid-reply frees its slot (the reply is cut short); a closed conversation's slot is
saved to a file (``--slot-save-path``) and restored into its slot when it is opened again,
after other conversations took every slot; a conversation on llama-server and one on
the local engine generate at the same time.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx2
import pytest

from app.engine import ContextSettings, SamplingParams
from app.remote import ServerKind
from app.session import ChatMessage, RestoreOutcome, Session
from app.session import events as ev
from app.session.engine_port import Capability
from app.storage import Database, StateStore
from tests.remote.conftest import RemoteChat
from tests.remote.llama_server_process import start_llama_server

T = TypeVar("T")

# The tiny model cannot end this (no end of turn allowed): replies run to max_tokens.
ENDLESS_GRAMMAR = 'root ::= ("hello" | " world" | " tab" | " llama") root'
LONG_REPLY = 2000  # tokens: about a slot's whole context (2,048)
# Readable replies: the random tiny model's free text has bytes that are no UTF-8, which
# come back as U+FFFD and re-tokenize differently (so the history would not be the
# prefix the cache holds); words of its vocabulary render back to the tokens it sampled.
WORDS = SamplingParams(
    max_tokens=24, grammar='root ::= ("hello" | " world" | " tab" | " llama")+', seed=3
)

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def slot_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("slots")


@pytest.fixture(scope="module")
def llama_server(tiny_model: Path, slot_dir: Path) -> Iterator[str]:
    # --metrics: how many tokens it generated (a reply cut by a close is shorter)
    proc, url = start_llama_server(tiny_model, "--slot-save-path", str(slot_dir), "--metrics")
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
    first = chat.turn(cid, events, "hello world, what is the cache of the model", WORDS)
    assert first.failed is None and first.result.n_prompt > 0
    assert first.progress, "llama-server's return_progress"
    second = chat.turn(cid, events, "and the tab", WORDS)
    result = second.result
    cached = result.n_prompt - result.n_prompt_processed
    assert cached > 0
    # the first prompt and its reply came from the cache (all but the reply's last token,
    # sampled and never decoded): only the new suffix was read
    held = first.result.n_prompt + first.result.n_tokens - 1
    assert cached >= held, (cached, first.result.n_prompt, first.result.n_tokens)
    assert result.n_prompt_processed <= result.n_prompt - held
    # the third turn is rendered here (the first two checked this rendering against the
    # server's), with the same outcome
    engine = chat.loader.engine
    assert engine is not None and engine.renderer.local_renders == 0
    third = chat.turn(cid, events, "one more", WORDS).result
    assert engine.renderer.local_renders == 1
    assert third.cached_tokens >= result.n_prompt + result.n_tokens - 1


def test_closing_mid_reply_frees_the_slot(
    llama_server: str, remote_chat: Callable[..., RemoteChat]
) -> None:
    chat = remote_chat(llama_server)
    cid, events = chat.new_conversation()
    before = _tokens_predicted(llama_server)
    endless = SamplingParams(max_tokens=LONG_REPLY, grammar=ENDLESS_GRAMMAR)
    chat.session.submit(cid, [ChatMessage("user", "talk")], sampling=endless)
    while not isinstance(event := events.get(timeout=30), ev.TextStreamed):
        assert not isinstance(event, ev.TurnFinished), "the reply ended before the close"
    chat.session.close(cid, save=False)
    t0 = time.monotonic()

    def processing() -> bool:
        slots = httpx2.get(f"{llama_server}/slots", timeout=5).json()
        return any(s.get("is_processing") for s in slots)

    while processing():  # about 20 ms here; bounded for a busy machine
        assert time.monotonic() - t0 < 30, "the slot is still generating"
        time.sleep(0.05)
    # the slot stopped because the close cut the reply, not because it ran to its end
    assert _tokens_predicted(llama_server) - before < LONG_REPLY


def _tokens_predicted(url: str) -> int:
    """llama-server's count of the tokens it generated (--metrics)."""
    for line in httpx2.get(f"{url}/metrics", timeout=5).text.splitlines():
        if line.startswith("llamacpp:tokens_predicted_total "):
            return int(float(line.split()[1]))
    raise AssertionError("llama-server's /metrics has no tokens_predicted_total")


def _next(events: queue.SimpleQueue[Any], kind: type[T]) -> T:
    while True:
        event = events.get(timeout=30)
        if isinstance(event, kind):
            return event


def test_a_reopened_conversation_restores_its_slot(
    llama_server: str, remote_chat: Callable[..., RemoteChat], tmp_path: Path, slot_dir: Path
) -> None:
    chat = remote_chat(llama_server, store=StateStore(tmp_path / "states"))
    engine = chat.loader.engine
    assert engine is not None and engine.traits.slot_files
    assert Capability.STATE_FILES in engine.capabilities
    cid, events = chat.new_conversation()
    first = chat.turn(cid, events, "hello world, what is the cache of the model", WORDS)
    assert first.failed is None
    chat.session.close(cid)  # saved: the slot goes to a file on the server
    _next(events, ev.ConversationClosed)
    files = list(slot_dir.glob("llamadesk-*.bin"))
    assert len(files) == 1 and files[0].stat().st_size > 0
    for text in ("llama tab world", "tab tab llama"):  # every slot holds another's cache now
        other, other_events = chat.new_conversation()
        assert chat.turn(other, other_events, text, WORDS).failed is None
    chat.session.open(cid)
    restored = _next(events, ev.CacheRestored)
    assert restored.outcome is RestoreOutcome.RESTORED, restored.reason
    second = chat.turn(cid, events, "and the tab", WORDS)
    # the first turn's prompt came back from the slot file: only what follows is read
    assert second.result.cached_tokens >= first.result.n_prompt
    assert len(list(slot_dir.glob("llamadesk-*.bin"))) == 1  # saved again under its name


def test_a_remote_and_a_local_conversation_generate_at_once(
    llama_server: str,
    remote_chat: Callable[..., RemoteChat],
    tiny_model: Path,
    tmp_path: Path,
) -> None:
    chat = remote_chat(llama_server)
    local = Session(None, Database.open(tmp_path / "local.sqlite3"), stream_interval_s=0.0)
    loaded: queue.SimpleQueue[Any] = queue.SimpleQueue()
    local.subscribe_session(loaded.put)
    local.load_model(str(tiny_model), ContextSettings(n_ctx=1024, n_threads=1))
    assert isinstance(_next(loaded, ev.ModelLoaded), ev.ModelLoaded)
    try:
        streams: dict[str, list[float]] = {"remote": [], "local": []}
        finished: dict[str, threading.Event] = {n: threading.Event() for n in streams}
        lock = threading.Lock()

        def watch(name: str) -> Callable[[Any], None]:
            def on_event(event: Any) -> None:
                with lock:
                    if isinstance(event, ev.TextStreamed):
                        streams[name].append(time.monotonic())
                    elif isinstance(event, ev.TurnFinished):
                        finished[name].set()

            return on_event

        # The remote reply is long (its slot's whole context) and is stopped only once the
        # local one is done, so the two overlap by construction, whatever the machine's
        # load: a session that waited for the other would never finish its turn.
        rcid, _ = chat.new_conversation()
        chat.session.subscribe(rcid, watch("remote"))
        local.subscribe(1, watch("local"))
        local.open(1)
        long = SamplingParams(max_tokens=LONG_REPLY, grammar=ENDLESS_GRAMMAR, seed=1)
        chat.session.submit(rcid, [ChatMessage("user", "talk")], sampling=long)
        deadline = time.monotonic() + 60
        while not streams["remote"]:  # the remote reply is under way
            assert time.monotonic() < deadline and not finished["remote"].is_set()
            time.sleep(0.01)
        short = SamplingParams(max_tokens=40, grammar=ENDLESS_GRAMMAR, seed=1)
        local.submit(1, [ChatMessage("user", "talk")], sampling=short)
        assert finished["local"].wait(120), "the local reply ends while the remote one runs"
        remote_ended_first = finished["remote"].is_set()
        chat.session.stop(rcid)
        assert finished["remote"].wait(60)
        assert not remote_ended_first, "2,000 tokens took less time than 40 local ones"
        with lock:
            remote_times, local_times = streams["remote"], streams["local"]
        assert local_times and remote_times[0] < local_times[0]
    finally:
        local.shutdown()
        assert local.join(30.0)


def test_a_server_that_goes_away_is_said_in_that_conversation(
    tiny_model: Path, remote_chat: Callable[..., RemoteChat], tmp_path: Path
) -> None:
    (tmp_path / "slots").mkdir()
    proc, url = start_llama_server(tiny_model, "--slot-save-path", str(tmp_path / "slots"))
    try:
        chat = remote_chat(url, store=StateStore(tmp_path / "states"))
        assert chat.loader.engine is not None and chat.loader.engine.traits.token_prompts
        cid, events = chat.new_conversation()
        assert chat.turn(cid, events, "hello", WORDS).failed is None
        endless = SamplingParams(max_tokens=4000, grammar=ENDLESS_GRAMMAR)
        future = chat.send(cid, "talk on", endless)
        while not isinstance(events.get(timeout=30), ev.TextStreamed):
            pass
        proc.kill()  # mid-reply
        dropped = chat.wait(future, events)
        assert dropped.failed is not None and "127.0.0.1" in dropped.failed
        assert dropped.result.text  # what came is kept, stored as cut off (not a user stop)
        stored = chat.db.get_thread(cid)[-1]
        assert stored.status == "error" and stored.content == dropped.result.text
        gone = chat.turn(cid, events, "are you there?", WORDS)  # the render cannot be asked
        assert gone.failed is not None and gone.result.text == ""
        last = chat.db.get_thread(cid)[-1]  # an error is no reply: the question stays
        assert (last.role, last.content) == ("user", "are you there?")
        t0 = time.monotonic()
        chat.session.close(cid)  # its slot cannot be saved: said in the log, not waited for
        _next(events, ev.ConversationClosed)
        # a refused connection is not retried for SLOT_ACTION_TIMEOUT_S (120 s); bounded
        # for a busy machine
        assert time.monotonic() - t0 < 30
    finally:
        proc.kill()
        proc.wait(30)


def test_a_regenerate_reads_nothing_again(
    llama_server: str, remote_chat: Callable[..., RemoteChat]
) -> None:
    chat = remote_chat(llama_server)
    cid, events = chat.new_conversation()
    chat.turn(cid, events, "hello world", WORDS)
    last = chat.turn(cid, events, "and the tab", WORDS)
    question = chat.db.get_thread(cid)[-2]
    assert question.role == "user"
    again = chat.wait(chat.session.answer(cid, question.id, None, sampling=WORDS), events)
    # the same prompt as the last turn's, sent as it was: all of it but the last token
    # (which gives the first logits) comes from the cache
    assert again.failed is None and again.result.n_prompt == last.result.n_prompt
    assert again.result.n_prompt_processed <= 1
