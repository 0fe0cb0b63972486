"""Remote-engine fixtures: stub servers, ``llamadesk serve`` with a tiny model, and a
session on the remote engine that records into a real SQLite database.

``ServeProcess`` is copied from tests/server/conftest.py (not imported: pytest does not
want conftest modules imported as modules).
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from app.engine import ContextSettings, SamplingParams
from app.remote import RemoteConnection, RemoteLoader
from app.session import Session
from app.session import events as ev
from app.storage import Database, StateStore
from tests.remote.stub_server import StubServer
from tests.support.gguf_models import TinySpec, write_tiny_model
from tests.support.serve_process import ServeProcess

ROOT = Path(__file__).resolve().parents[2]
TURN_TIMEOUT_S = 30.0


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(
        tmp_path_factory.mktemp("models") / "tiny.gguf", TinySpec(n_ctx_train=4096)
    )


@pytest.fixture(scope="module")
def llamadesk_server(
    tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServeProcess]:
    """``llamadesk serve`` on 127.0.0.1 with the tiny model, its own data folder."""
    proc = ServeProcess(
        [str(tiny_model), "--ctx-size", "4096", "--threads", "1", "--parallel", "2"],
        tmp_path_factory.mktemp("serve-home"),
    )
    yield proc
    proc.stop()


@pytest.fixture
def stub() -> Iterator[Callable[..., StubServer]]:
    servers: list[StubServer] = []

    def make(kind: str = "openai", **options: Any) -> StubServer:
        server = StubServer(kind, **options)
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.close()


@dataclass
class Turn:
    """What one recorded turn gave: its result, its failure sentence, the stored reply."""

    result: Any
    failed: str | None
    reply_id: int | None
    text: str = ""
    progress: list[tuple[int, int]] = field(default_factory=list)


class RemoteChat:
    """A session on a remote engine, recording into ``db_path``."""

    def __init__(
        self,
        conn: RemoteConnection,
        db_path: Path,
        model: str = "",
        store: StateStore | None = None,
    ) -> None:
        self.loader = RemoteLoader(conn)
        self.db = Database.open(db_path)
        self.session = Session(store, self.db, stream_interval_s=0.0, loader=self.loader)
        self.events: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.session.subscribe_session(self.events.put)
        self.session.load_model(model, ContextSettings())
        self.loaded: ev.ModelLoaded | None = None
        self.load_error: str | None = None
        while True:
            event = self.events.get(timeout=TURN_TIMEOUT_S)
            if isinstance(event, ev.ModelLoaded):
                self.loaded = event
                break
            if isinstance(event, ev.ModelLoadFailed):
                self.load_error = event.message
                break

    def new_conversation(self) -> tuple[int, queue.SimpleQueue[Any]]:
        cid = self.db.create_conversation().id
        events: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.session.subscribe(cid, events.put)
        self.session.open(cid)
        return cid, events

    def send(self, cid: int, text: str, sampling: SamplingParams | None = None) -> Any:
        thread = self.db.get_thread(cid)
        parent = thread[-1].id if thread else None
        return self.session.answer(cid, parent, text, sampling=sampling)

    def wait(
        self, future: Any, events: queue.SimpleQueue[Any], timeout: float = TURN_TIMEOUT_S
    ) -> Turn:
        recorded = future.result(timeout=timeout)
        failed: str | None = None
        text: list[str] = []
        progress: list[tuple[int, int]] = []
        while True:
            event = events.get(timeout=timeout)
            if isinstance(event, ev.TurnFailed):
                failed = event.message
            elif isinstance(event, ev.TextStreamed):
                text.append(event.text)
            elif isinstance(event, ev.PromptProgressed):
                progress.append((event.done, event.total))
            elif isinstance(event, ev.TurnFinished) and event.turn_id == recorded.turn_id:
                return Turn(
                    event.result, failed, recorded.reply_message_id, "".join(text), progress
                )

    def turn(
        self,
        cid: int,
        events: queue.SimpleQueue[Any],
        text: str,
        sampling: SamplingParams | None = None,
    ) -> Turn:
        return self.wait(self.send(cid, text, sampling), events)

    def close(self) -> None:
        self.session.shutdown()
        assert self.session.join(30.0)
        self.db.close()


@pytest.fixture
def remote_chat(tmp_path: Path) -> Iterator[Callable[..., RemoteChat]]:
    chats: list[RemoteChat] = []

    def make(
        url: str, model: str = "", store: StateStore | None = None, **options: Any
    ) -> RemoteChat:
        conn = RemoteConnection(url, **options)
        chat = RemoteChat(conn, tmp_path / "chats.sqlite3", model, store)
        chats.append(chat)
        return chat

    yield make
    for chat in chats:
        chat.close()
