"""UI test fixtures: a temporary LLAMADESK_HOME, tiny real GGUF models, a real window.

Every window test runs the real engine on its worker thread with a tiny generated model
(tests/support/gguf_models.py); nothing on the app's path is mocked.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QLoggingCategory, QObject, Slot

from app import crash_record, paths
from app.engine.reasoning import Channel
from app.session import ConversationSnapshot, TurnResult
from app.session import events as ev
from app.storage import Database
from tests.support.gguf_models import TinySpec, write_tiny_model
from tests.support.tool_models import write_qwen25_model

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

# The offscreen platform's font database warns about scripts its fonts lack (the tiny
# model's output is random bytes and scripts); that is the test machine's fonts, not the app.
QLoggingCategory.setFilterRules("qt.text.font.db.warning=false\nqt.qpa.fonts.warning=false")

# Small contexts and one thread: the machine is shared; the tests stay quick.
TEST_CONTEXT: dict[str, Any] = {
    "n_ctx": 2048,
    "n_batch": 256,
    "n_ubatch": 256,
    "n_seq_max": 4,
    "n_threads": 1,
    "n_threads_batch": 1,
}

# A grammar the tiny model cannot end (no end-of-turn allowed): replies run until stopped
# or max_tokens, and the text is readable.
ENDLESS_GRAMMAR = 'root ::= ("hello" | " world" | " tab" | " llama") root'
# Readable replies that may end: their text renders back to the tokens the model sampled.
WORDS_GRAMMAR = 'root ::= ("hello" | " world" | " tab" | " llama")+'


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "home"
    monkeypatch.setenv("LLAMADESK_HOME", str(folder))
    # No bundled demo model in tests unless a test asks for one.
    monkeypatch.setattr(paths, "demo_model_path", lambda: folder / "no-demo.gguf")
    return paths.data_dir()


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("models") / "tiny.gguf", TinySpec())


@pytest.fixture(scope="session")
def slow_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Larger (~10 MB): prompt processing takes long enough to stop it half-way."""
    spec = TinySpec(n_embd=256, n_layer=4, n_ff=512, n_ctx_train=4096, name="tiny-slow")
    return write_tiny_model(tmp_path_factory.mktemp("models") / "slow.gguf", spec)


@pytest.fixture(scope="module")
def qwen_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model with Qwen 2.5's template: the chat's tool calls."""
    return write_qwen25_model(tmp_path_factory.mktemp("tools"), 4096)


def write_settings(model: Path | None, **extra: Any) -> None:
    data: dict[str, Any] = {"context": dict(TEST_CONTEXT)}
    if model is not None:
        data["last_model_path"] = str(model)
    data.update(extra)
    paths.settings_path().write_text(json.dumps(data), encoding="utf-8")


class Recorder(QObject):
    """Collects every conversation's session events on the GUI thread (a QObject slot)."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens: list[tuple[int, str]] = []
        self.reasoning: list[tuple[int, str]] = []
        self.progress: list[tuple[int, int, int]] = []
        self.finished: list[tuple[int, TurnResult]] = []

    @Slot(object)
    def on_event(self, event: object) -> None:
        if isinstance(event, ev.TextStreamed):
            pieces = self.reasoning if event.channel is Channel.REASONING else self.tokens
            pieces.append((event.conversation_id, event.text))
        elif isinstance(event, ev.PromptProgressed):
            self.progress.append((event.conversation_id, event.done, event.total))
        elif isinstance(event, ev.TurnFinished):
            self.finished.append((event.conversation_id, event.result))

    def texts(self, tab: int) -> str:
        return "".join(t for k, t in self.tokens if k == tab)

    def reasoning_text(self, tab: int) -> str:
        return "".join(t for k, t in self.reasoning if k == tab)

    def completions(self, tab: int) -> list[TurnResult]:
        return [c for k, c in self.finished if k == tab]


@pytest.fixture
def make_window(qtbot: Any, tiny_model: Path) -> Iterator[Callable[..., Any]]:
    """``make_window(model=tiny_model, context=None, wait_model=True)`` -> (window, recorder)."""
    opened: list[tuple[Any, Database]] = []

    def make(
        model: Path | None = tiny_model,
        context: dict[str, Any] | None = None,
        wait_model: bool = True,
        write: bool = True,
        **settings: Any,
    ) -> tuple[Any, Recorder]:
        if write:
            write_settings(model, **settings)
            if context:
                data = json.loads(paths.settings_path().read_text())
                data["context"].update(context)
                paths.settings_path().write_text(json.dumps(data))
        return open_window(qtbot, opened, wait_ms=15000 if wait_model and model else 0)

    yield make
    close_windows(qtbot, opened)


def open_window(
    qtbot: Any, opened: list[tuple[Any, Database]], wait_ms: int = 15000
) -> tuple[Any, Recorder]:
    """A real MainWindow on the settings written (added to ``opened``), started as
    app/ui/main.py's start_window does (less this test process's own crash record);
    ``wait_ms`` > 0: until its model is loaded."""
    from app.ui.main_window import MainWindow

    db = Database.open()
    window = MainWindow(db)
    recorder = Recorder()
    window.worker.conversationEvent.connect(recorder.on_event)
    opened.append((window, db))
    window.show()
    window.start(crash=crash_record.last_window_crash())
    if wait_ms > 0:
        qtbot.waitUntil(window.model_ready, timeout=wait_ms)
    return window, recorder


def close_windows(qtbot: Any, opened: list[tuple[Any, Database]]) -> None:
    for window, db in opened:
        close_window(qtbot, window)
        db.close()


def close_window(qtbot: Any, window: Any, timeout: int = 5000) -> None:
    if not window.is_shut_down():
        window.close()
        qtbot.waitUntil(window.is_shut_down, timeout=timeout)


def send(qtbot: Any, tab: Any, text: str) -> None:
    """Type a message and press Enter in the tab's composer."""
    from PySide6.QtCore import Qt

    tab.composer.setPlainText(text)
    qtbot.keyClick(tab.composer, Qt.Key.Key_Return)


def set_sampling(tab: Any, **values: Any) -> None:
    """Store sampling values in the tab's conversation and show them in its settings."""
    sampling = {**tab.conversation.sampling, **values}
    tab.host.db.update_conversation_settings(tab.cid, sampling=sampling)
    tab.conversation = tab.host.db.get_conversation(tab.cid)
    tab.settings.set_values(tab.conversation.system_prompt, tab.conversation.sampling)


def wait_idle(qtbot: Any, tab: Any, timeout: int = 20000) -> TurnResult:
    qtbot.waitUntil(lambda: not tab.generating, timeout=timeout)
    result = tab.last_completion
    assert isinstance(result, TurnResult)
    return result


def inspect(qtbot: Any, window: Any, tab: Any) -> ConversationSnapshot:
    """What the session holds for the tab's conversation (asked through its public API)."""
    future = window.session.inspect(tab.cid)
    qtbot.waitUntil(future.done, timeout=10000)
    snapshot = future.result()
    assert isinstance(snapshot, ConversationSnapshot)
    return snapshot


def held_tokens(qtbot: Any, window: Any, tab: Any) -> list[int]:
    return list(inspect(qtbot, window, tab).tokens)


@pytest.fixture
def db(home: Path) -> Iterator[Database]:
    """The app's database in the test's data folder."""
    database = Database.open()
    yield database
    database.close()


# Downloads that retry at once and report every chunk: the tests stay quick.
FAST_DOWNLOADS: dict[str, float] = {
    "backoff": 0.05,
    "stall_timeout": 2.0,
    "progress_interval": 0.0,
    "max_attempts": 4,
}


@pytest.fixture(scope="session")
def hub_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The file the fake Hub serves (~1.5 MB: a drop at 300 kB is in the middle)."""
    return write_tiny_model(
        tmp_path_factory.mktemp("hub") / "tiny.gguf", TinySpec(n_embd=256, n_ff=512, n_layer=2)
    )


@pytest.fixture
def view(qtbot: Any) -> Iterator[Any]:
    """A bare ChatView, shown at a usual size."""
    from app.ui.chat_view import ChatView

    v = ChatView()
    qtbot.addWidget(v)
    v.resize(820, 560)
    v.show()
    qtbot.waitExposed(v)
    yield v


def settle() -> None:
    """Let queued layout and paint events run."""
    from PySide6.QtWidgets import QApplication

    for _ in range(4):
        QApplication.processEvents()
