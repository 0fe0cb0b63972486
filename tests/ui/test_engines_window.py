"""The window on a remote engine: the picker lists local files and each connection's
models together, choosing a remote model makes the session answer from that server (a
real ``llamadesk serve``), the tab says which machine answered, the conversation records
the remote model and the window reopens on it; a connection that is down gives a
sentence in the tab and blocks nothing."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pytestqt.qtbot import QtBot

from app.remote import RemoteConnection
from app.remote.loader import probe_connection
from app.remote.saved import SavedConnection, address, dump_connections
from tests.remote.stub_server import StubServer
from tests.support.gguf_models import TinySpec, write_tiny_model
from tests.support.serve_process import ServeProcess
from tests.ui.conftest import send, set_sampling, wait_idle

pytestmark = pytest.mark.qt_log_ignore(r"This plugin does not support propagateSizeHints")

MakeWindow = Callable[..., tuple[Any, Any]]


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    model = write_tiny_model(
        tmp_path_factory.mktemp("served") / "served.gguf", TinySpec(n_ctx_train=2048)
    )
    proc = ServeProcess(
        [str(model), "--ctx-size", "2048", "--threads", "1"], tmp_path_factory.mktemp("home")
    )
    yield proc
    proc.stop()


def saved(serve: ServeProcess) -> tuple[SavedConnection, str]:
    traits = probe_connection(RemoteConnection(serve.url))
    conn = SavedConnection(
        "serve-box", "serve-box", serve.url, kind=traits.kind.value, models=traits.models
    )
    return conn, traits.models[0]


def test_a_remote_model_answers_the_window_and_it_reopens_on_it(
    qtbot: QtBot, make_window: MakeWindow, serve: ServeProcess, tiny_model: Path
) -> None:
    from app.ui.model_manager import read_metadata

    conn, model = saved(serve)
    remote = address(conn.id, model)
    window, _ = make_window(model=tiny_model, remote_connections=dump_connections([conn]))
    window.db.add_model_file(str(tiny_model), read_metadata)
    entries = {e.path: e for e in window.models_ui.model_picker.entries()}
    assert str(tiny_model) in entries  # the local file and the remote model, together
    assert entries[remote].label == f"{model} · on serve-box (LlamaDesk)" and entries[remote].usable
    assert window.model.engine == "llama.cpp"

    tab = window.new_tab()
    assert tab is not None and "on serve-box" not in tab.state_label.text()
    # Two turns must fit the server's 2,048-token context with their max_tokens: a random
    # model's first reply may run long, and the server refuses prompt + 1,024 past it.
    set_sampling(tab, max_tokens=64)
    window.models_ui.model_picker.actions_by_text()[entries[remote].label].trigger()
    qtbot.waitUntil(lambda: window.model is not None and window.model.path == remote, timeout=15000)
    assert window.model.engine == "LlamaDesk on serve-box"
    qtbot.waitUntil(lambda: "on serve-box · LlamaDesk" in tab.state_label.text(), timeout=5000)

    send(qtbot, tab, "Hello over the wire")
    result = wait_idle(qtbot, tab)
    assert result.error is None and result.text
    assert result.n_tokens > 0 and result.n_tokens == result.n_sampled  # the server's count
    messages = window.db.get_thread(tab.cid)
    assert [m.role for m in messages] == ["user", "assistant"]
    assert messages[-1].model_path == remote  # the conversation remembers its engine and model
    assert messages[-1].content
    assert messages[-1].token_count == result.n_tokens  # the reply's count is stored
    assert window.app_settings.last_model_path == remote

    new = window.new_tab()  # a tab opened later says it too
    assert new is not None
    qtbot.waitUntil(lambda: "on serve-box · LlamaDesk" in new.state_label.text(), timeout=5000)

    window.models_ui.model_picker.actions_by_text()[entries[str(tiny_model)].label].trigger()
    qtbot.waitUntil(
        lambda: window.model is not None and window.model.engine == "llama.cpp", timeout=15000
    )
    qtbot.waitUntil(lambda: "on serve-box" not in tab.state_label.text(), timeout=5000)
    window.models_ui.model_picker.actions_by_text()[entries[remote].label].trigger()
    qtbot.waitUntil(lambda: window.model is not None and window.model.path == remote, timeout=15000)
    window.close()
    qtbot.waitUntil(lambda: not window.isVisible(), timeout=10000)

    again, _ = make_window(model=None, write=False, wait_model=False)
    qtbot.waitUntil(again.model_ready, timeout=15000)
    assert again.model.path == remote and again.model.engine == "LlamaDesk on serve-box"
    reopened = again.tab_for(tab.cid)
    assert reopened is not None
    qtbot.waitUntil(lambda: "on serve-box · LlamaDesk" in reopened.state_label.text(), timeout=5000)
    send(qtbot, reopened, "And again")
    second = wait_idle(qtbot, reopened)
    assert second.error is None, second.error  # (an error reply is a notice, not stored)
    stored = again.db.get_thread(tab.cid)
    assert [m.role for m in stored] == ["user", "assistant", "user", "assistant"]
    assert stored[-1].model_path == remote


def test_a_connection_that_is_down_is_said_in_the_tab(
    qtbot: QtBot, make_window: MakeWindow
) -> None:
    server = StubServer("openai")
    url = server.url
    server.close()  # nothing listens there any more
    conn = SavedConnection("gone", "gone-box", url, kind="OpenAI-compatible", models=("m",))
    window, _ = make_window(
        model=address(conn.id, "m"), wait_model=False, remote_connections=dump_connections([conn])
    )
    tab = window.new_tab()
    assert tab is not None
    qtbot.waitUntil(lambda: "gone-box did not answer" in tab.state_label.text(), timeout=20000)
    assert window.model is None and window.models_ui.loading_path is None
    assert window.message_bar.isVisible()  # the reason, in a sentence
    tab.composer.setPlainText("typing is not blocked")
    assert tab.composer.toPlainText() == "typing is not blocked"


def test_plain_http_that_was_not_confirmed_is_not_loaded(
    qtbot: QtBot, make_window: MakeWindow
) -> None:
    conn = SavedConnection("far", "far-box", "http://gpu-box.invalid:8080", models=("m",))
    window, _ = make_window(
        model=address(conn.id, "m"), wait_model=False, remote_connections=dump_connections([conn])
    )
    (entry,) = [e for e in window.models_ui.model_picker.entries() if e.path.startswith("remote:")]
    assert not entry.usable  # the picker does not offer it before Preferences ▸ Engines asks
    tab = window.new_tab()
    assert tab is not None
    qtbot.waitUntil(lambda: "far-box did not answer" in tab.state_label.text(), timeout=10000)
    assert window.model is None
