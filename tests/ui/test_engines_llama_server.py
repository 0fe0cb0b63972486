"""The window on llama.cpp's own llama-server (built by ``python -m tests.support.peers``): a chat answered there, its slot saved on the server when
the window closes and restored into its slot when the window opens it again."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pytestqt.qtbot import QtBot

from app.remote import RemoteConnection
from app.remote.loader import probe_connection
from app.remote.saved import SavedConnection, address, dump_connections
from tests.remote.llama_server_process import start_llama_server
from tests.support.gguf_models import TinySpec, write_tiny_model
from tests.ui.conftest import close_window, send, wait_idle

pytestmark = [
    pytest.mark.qt_log_ignore(r"This plugin does not support propagateSizeHints"),
    pytest.mark.timeout(180),
]

MakeWindow = Callable[..., tuple[Any, Any]]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    model = write_tiny_model(
        tmp_path_factory.mktemp("served") / "served.gguf", TinySpec(n_ctx_train=4096)
    )
    slots = tmp_path_factory.mktemp("slots")
    proc, url = start_llama_server(model, "--slot-save-path", str(slots))
    yield url, slots
    proc.terminate()
    proc.wait(30)


def test_a_chat_on_llama_server_gets_its_slot_back_when_the_window_reopens(
    qtbot: QtBot, make_window: MakeWindow, server: tuple[str, Path]
) -> None:
    url, slots = server
    traits = probe_connection(RemoteConnection(url))
    conn = SavedConnection("box", "gpu-box", url, kind=traits.kind.value, models=traits.models)
    remote = address(conn.id, traits.models[0])
    window, _ = make_window(model=remote, remote_connections=dump_connections([conn]))
    assert window.model.engine == "llama-server on gpu-box"
    tab = window.new_tab()
    assert tab is not None
    qtbot.waitUntil(lambda: "on gpu-box · llama-server" in tab.state_label.text(), timeout=5000)
    send(qtbot, tab, "Hello over the wire")
    first = wait_idle(qtbot, tab)
    assert first.error is None and first.n_tokens > 0
    cid = tab.cid
    close_window(qtbot, window, timeout=15000)  # every tab's slot goes to a file there
    assert list(slots.glob("llamadesk-*.bin"))

    again, _ = make_window(model=None, write=False, wait_model=False)
    qtbot.waitUntil(again.model_ready, timeout=15000)
    reopened = again.tab_for(cid)
    assert reopened is not None
    qtbot.waitUntil(lambda: "cache restored" in reopened.state_label.text(), timeout=10000)
    assert "on gpu-box · llama-server" in reopened.state_label.text()
    send(qtbot, reopened, "And again")
    second = wait_idle(qtbot, reopened)
    assert second.error is None
    assert second.cached_tokens >= first.n_prompt  # the first turn came back from the file


def test_the_engines_page_says_what_llama_server_keeps(
    qtbot: QtBot, server: tuple[str, Path], home: Path
) -> None:
    from app.remote.saved import ApiKeys
    from app.storage.settings import AppSettings, save_settings
    from app.ui.engines_page import EnginesPage

    url, _ = server
    page = EnginesPage(AppSettings(), save_settings, ApiKeys(use_keyring=False))
    qtbot.addWidget(page)
    page.name_edit.setText("gpu-box")
    page.url_edit.setText(url)
    page.add_button.click()
    qtbot.waitUntil(lambda: not page.testing(), timeout=15000)
    page.shutdown()
    said = page.status.text()
    assert said.startswith("gpu-box answers: llama-server")
    assert "context 2,048 tokens per conversation" in said  # 4096 over its two slots
    assert "2 slots, kept in files when a chat closes" in said
