"""The API server inside the running window: started from the Server menu on the window's
own session, used with the official ``openai`` client from a worker thread while the Qt
event loop keeps running (the test never blocks the GUI thread on HTTP)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import httpx2
import openai
import pytest
from PySide6.QtGui import QAction, QGuiApplication

from app.server import app_settings
from app.server.app_settings import ServerAppSettings
from app.server.service import RequestRecord
from app.ui.server_controller import LOG_ROWS, ServerController, ServerState
from app.ui.server_panel import ServerPanel
from tests.ui.conftest import ENDLESS_GRAMMAR, WORDS_GRAMMAR, send, wait_idle

# The offscreen platform cannot resize or raise top-level windows (the panel); it says so.
pytestmark = pytest.mark.qt_log_ignore(
    r"This plugin does not support propagateSizeHints", r"This plugin does not support raise"
)

T = TypeVar("T")
HTTP_TIMEOUT_MS = 30000


@pytest.fixture
def worker() -> Iterator[Callable[[Callable[[], Any]], Future[Any]]]:
    """Runs a client call on another thread; the test waits with qtbot (events flow)."""
    pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="test-client")
    yield pool.submit
    pool.shutdown(wait=True, cancel_futures=True)


def result(qtbot: Any, future: Future[T], timeout: int = HTTP_TIMEOUT_MS) -> T:
    qtbot.waitUntil(future.done, timeout=timeout)
    return future.result()


def action(window: Any, name: str) -> QAction:
    found = window.findChild(QAction, name)
    assert isinstance(found, QAction), name
    return found


def started(qtbot: Any, window: Any, **settings: Any) -> ServerController:
    """The Server menu installed, its settings saved, started from the menu."""
    controller: ServerController = window.server  # the window installs its Server menu itself
    before = controller.status  # named: mypy would keep an assert's narrowing in the wait
    assert before.state is ServerState.STOPPED  # never started by itself
    controller.update_settings(ServerAppSettings(port=0, **settings))
    action(window, "server-toggle").trigger()
    qtbot.waitUntil(lambda: controller.status.state is not ServerState.STARTING, timeout=10000)
    assert controller.running, controller.status.message
    assert action(window, "server-toggle").text() == "Stop server"
    return controller


def stop(qtbot: Any, window: Any, controller: ServerController) -> None:
    action(window, "server-toggle").trigger()
    qtbot.waitUntil(lambda: controller.status.state is ServerState.STOPPED, timeout=10000)


def make_client(controller: ServerController, key: str = "unused") -> openai.OpenAI:
    assert controller.url is not None
    return openai.OpenAI(
        base_url=f"{controller.url}/v1", api_key=key, max_retries=0, timeout=HTTP_TIMEOUT_MS / 1000
    )


def endless_tab(window: Any, max_tokens: int) -> Any:
    tab = window.new_tab()
    sampling = {
        **tab.conversation.sampling,
        "grammar": ENDLESS_GRAMMAR,
        "max_tokens": max_tokens,
        "temperature": 0.8,
        "seed": 3,
    }
    tab.host.db.update_conversation_settings(tab.cid, sampling=sampling)
    tab.conversation = tab.host.db.get_conversation(tab.cid)
    tab.settings.set_values(tab.conversation.system_prompt, tab.conversation.sampling)
    return tab


def api_conversation_id(window: Any, name: str) -> int:
    for conv in window.db.list_conversations(include_archived=True):
        if conv.sampling.get("api_conversation") == name:
            return int(conv.id)
    raise AssertionError(f"no stored API conversation {name!r}")


def test_server_in_the_window_serves_the_loaded_model(
    qtbot: Any, make_window: Any, worker: Any, tiny_model: Path
) -> None:
    window, _ = make_window()
    controller = started(qtbot, window)
    action(window, "server-panel-action").trigger()
    panel = window.findChild(ServerPanel)
    assert isinstance(panel, ServerPanel) and panel.isVisible()
    assert panel.url.text() == f"{controller.url}/v1" and "Serving at" in panel.status.text()
    assert not panel.port.isEnabled()  # the bind's settings are fixed while serving
    panel.copy_url.click()
    assert QGuiApplication.clipboard().text() == f"{controller.url}/v1"
    client = make_client(controller)
    model = tiny_model.stem

    # the model the window had loaded before the server started
    assert [m.id for m in result(qtbot, worker(lambda: client.models.list())).data] == [model]

    # chat, whole and streamed
    messages: list[Any] = [{"role": "user", "content": "hello llama"}]
    whole = result(
        qtbot,
        worker(
            lambda: client.chat.completions.create(
                model=model, messages=messages, max_tokens=5, temperature=0
            )
        ),
    )
    assert whole.choices[0].finish_reason in ("stop", "length")
    assert 0 < whole.usage.completion_tokens <= 5

    def streamed() -> tuple[str, Any]:
        chunks = list(
            client.chat.completions.create(
                model=model,
                messages=messages,
                max_tokens=5,
                temperature=0,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        return text, chunks[-1].usage

    text, usage = result(qtbot, worker(streamed))
    assert text == whole.choices[0].message.content  # greedy: the same reply
    assert usage.completion_tokens == whole.usage.completion_tokens

    # a named conversation stays warm: the re-sent chat comes from its cache
    history: list[Any] = [{"role": "user", "content": "remember the llama " * 20}]

    def named(chat: list[Any]) -> Any:
        return client.chat.completions.create(
            model=model,
            messages=chat,
            max_tokens=4,
            temperature=0,
            extra_body={"conversation": "agent", "grammar": WORDS_GRAMMAR},
        )

    first = result(qtbot, worker(lambda: named(history)))
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    history += [
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "what was it"},
    ]
    second = result(qtbot, worker(lambda: named(history)))
    assert second.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens

    # the conversation is in the window's list; opened in a tab, the API leaves it alone
    cid = api_conversation_id(window, "agent")
    window.open_conversation(cid)
    tab = window.tab_for(cid)
    assert tab is not None
    controller.set_open_conversations(t.cid for t in window.tabs())  # what the window calls
    with pytest.raises(openai.ConflictError) as conflict:
        result(qtbot, worker(lambda: named(history)))
    assert conflict.value.status_code == 409
    assert "open in a LlamaDesk tab" in str(conflict.value.body)
    # the tab can use it meanwhile
    send(qtbot, tab, "and now from the window")
    assert wait_idle(qtbot, tab).n_tokens > 0
    window.close_tab(window.tab_widget.indexOf(tab))
    controller.set_open_conversations(t.cid for t in window.tabs())
    third = result(qtbot, worker(lambda: named(history)))  # free again
    assert third.usage.completion_tokens > 0

    # the panel's log shows every generation request, newest first
    qtbot.waitUntil(lambda: len(panel.rows()) >= 6, timeout=5000)
    rows = panel.rows()
    assert [r[2] for r in rows[:6]] == ["/v1/chat/completions"] * 6
    statuses = [r[7].split()[0] for r in rows[:6]]
    assert statuses == ["200", "409", "200", "200", "200", "200"]
    assert "(agent)" in rows[0][1] and "open in a LlamaDesk tab" in rows[1][7]
    assert rows[2][4] == str(second.usage.prompt_tokens_details.cached_tokens)
    assert rows[2][3] == str(second.usage.prompt_tokens)
    assert rows[2][5] == str(second.usage.completion_tokens)

    stop(qtbot, window, controller)
    assert panel.start_stop.text() == "Start" and panel.port.isEnabled()
    with pytest.raises(openai.APIConnectionError):
        result(qtbot, worker(lambda: client.models.list()))


def test_a_tab_and_an_api_request_generate_at_once(
    qtbot: Any, make_window: Any, worker: Any
) -> None:
    window, recorder = make_window()
    controller = started(qtbot, window)
    client = make_client(controller)
    tab = endless_tab(window, max_tokens=1500)
    send(qtbot, tab, "keep going")
    qtbot.waitUntil(lambda: recorder.texts(tab.cid) != "", timeout=10000)

    def api_stream() -> tuple[int, bool]:
        n = 0
        for chunk in client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "at the same time"}],
            max_tokens=40,
            temperature=0,
            stream=True,
            extra_body={"grammar": ENDLESS_GRAMMAR},
        ):
            if chunk.choices and chunk.choices[0].delta.content:
                n += 1
        return n, tab.generating  # a bool read: is the tab still writing at the API's end?

    pieces, tab_still_generating = result(qtbot, worker(api_stream))
    assert pieces > 0
    assert tab_still_generating  # the two replies were decoded side by side
    done = wait_idle(qtbot, tab, timeout=60000)
    assert done.finish_reason == "length" and done.n_tokens == 1500
    stop(qtbot, window, controller)


def test_port_in_use_and_other_devices_need_a_key(
    qtbot: Any, make_window: Any, worker: Any, home: Path
) -> None:
    window, _ = make_window()
    controller = window.server  # the window installs its Server menu itself
    action(window, "server-panel-action").trigger()
    panel = window.findChild(ServerPanel)
    assert isinstance(panel, ServerPanel)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        panel.port.setValue(port)
        panel.port.editingFinished.emit()
        assert controller.settings.port == port
        panel.start_stop.click()
        qtbot.waitUntil(lambda: controller.status.state is ServerState.FAILED, timeout=10000)
        assert f"Port {port} on 127.0.0.1 is already in use" in panel.status.text()
        assert "choose another port" in panel.status.text()
        assert panel.start_stop.text() == "Start"

    # other devices: refused without a key, with a sentence saying what to do
    panel.port.setValue(0)
    panel.port.editingFinished.emit()
    panel.allow_other.setChecked(True)
    assert "Generate key" in panel.status.text()
    panel.start_stop.click()
    assert controller.status.state is ServerState.FAILED
    assert "needs an API key" in panel.status.text()
    panel.generate.click()
    key = panel.key.text()
    assert key.startswith("ld-") and len(key) > 30
    saved = json.loads((home / "server.json").read_text())
    assert saved == {
        "port": 0,
        "allow_other_devices": True,
        "api_key": key,
        "start_with_app": False,
    }
    assert (home / "server.json").stat().st_mode & 0o077 == 0  # the key's file is private
    panel.start_stop.click()
    qtbot.waitUntil(lambda: controller.running, timeout=10000)
    assert "other devices" in panel.status.text()
    url = controller.url
    assert url is not None

    def get(key: str | None) -> int:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx2.get(f"{url}/v1/models", headers=headers, timeout=10).status_code

    assert result(qtbot, worker(lambda: get(None))) == 401
    assert result(qtbot, worker(lambda: get("wrong"))) == 401
    assert result(qtbot, worker(lambda: get(key))) == 200
    stop(qtbot, window, controller)


def test_the_server_starts_with_the_app_only_when_asked(
    qtbot: Any, make_window: Any, home: Path
) -> None:
    window, _ = make_window()
    controller = window.server  # the window installs its Server menu itself
    qtbot.wait(300)  # an autostart would be under way by now
    assert controller.status.state is ServerState.STOPPED
    # a damaged settings file: the defaults (never autostart) and a sentence
    (home / "server.json").write_text("{not json")
    damaged = ServerController(window.session, lambda: window.model)
    assert "damaged" in damaged.status.message and not damaged.settings.start_with_app
    qtbot.wait(300)
    assert damaged.status.state is ServerState.STOPPED

    # turned on: the next start of the app serves
    app_settings.save(ServerAppSettings(port=0, start_with_app=True))
    window2, _ = make_window()
    auto = window2.server
    qtbot.waitUntil(lambda: auto.running, timeout=10000)
    auto.stop()
    qtbot.waitUntil(lambda: auto.status.state is ServerState.STOPPED, timeout=10000)


def test_without_a_model_the_api_says_so_then_serves_the_one_loaded(
    qtbot: Any, make_window: Any, worker: Any, tiny_model: Path
) -> None:
    window, _ = make_window(model=None)
    controller = started(qtbot, window)
    client = make_client(controller)
    with pytest.raises(openai.APIStatusError) as missing:
        result(qtbot, worker(lambda: client.models.list()))
    assert missing.value.status_code == 503
    assert "load one in the window" in str(missing.value.body)
    window.load_model(str(tiny_model))
    qtbot.waitUntil(window.model_ready, timeout=15000)
    assert [m.id for m in result(qtbot, worker(lambda: client.models.list())).data] == ["tiny"]
    window.unload_model()
    qtbot.waitUntil(lambda: not window.model_ready(), timeout=15000)
    with pytest.raises(openai.APIStatusError):
        result(qtbot, worker(lambda: client.models.list()))
    stop(qtbot, window, controller)


def test_the_log_takes_records_from_other_threads_and_stays_bounded(
    qtbot: Any, make_window: Any
) -> None:
    window, _ = make_window(model=None)
    controller = window.server  # the window installs its Server menu itself
    action(window, "server-panel-action").trigger()
    panel = window.findChild(ServerPanel)
    assert isinstance(panel, ServerPanel)
    n = LOG_ROWS + 25

    def emit_all() -> None:  # as request threads do
        for i in range(n):
            controller.logged.emit(
                RequestRecord(
                    at=time.time(),
                    client=f"client {i}",
                    endpoint="/v1/completions",
                    conversation=None,
                    status=200 if i % 2 == 0 else 499,
                    prompt_tokens=i,
                    completion_tokens=3,
                    tokens_per_second=12.5,
                    finish_reason="length",
                )
            )

    thread = threading.Thread(target=emit_all)
    thread.start()
    qtbot.waitUntil(lambda: not thread.is_alive(), timeout=10000)
    qtbot.waitUntil(lambda: len(controller.records) == LOG_ROWS, timeout=5000)
    qtbot.waitUntil(
        lambda: bool(panel.rows()) and panel.rows()[0][1] == f"client {n - 1}", timeout=5000
    )
    rows = panel.rows()
    assert len(rows) == LOG_ROWS  # the oldest went
    assert rows[0][3] == str(n - 1) and rows[0][6] == "12.5" and rows[0][7] == "200 length"
    assert rows[1][7] == "client left"
    assert rows[-1][1] == f"client {n - LOG_ROWS}"
    # a panel opened later shows what was logged before
    later = ServerPanel(controller, window)
    assert later.rows() == rows
    later.deleteLater()


def test_a_conversation_answering_an_api_client_does_not_open_in_a_tab(
    qtbot: Any, make_window: Any, worker: Any
) -> None:
    window, _ = make_window()
    controller = started(qtbot, window)
    client = make_client(controller)
    history: list[Any] = [{"role": "user", "content": "hello"}]
    named = {"conversation": "busy"}
    result(
        qtbot,
        worker(
            lambda: client.chat.completions.create(
                model="tiny", messages=history, max_tokens=2, extra_body=named
            )
        ),
    )
    cid = api_conversation_id(window, "busy")
    first, release = threading.Event(), threading.Event()

    def stream() -> int:
        n = 0
        chunks = client.chat.completions.create(
            model="tiny",
            messages=history,
            max_tokens=1500,
            stream=True,
            extra_body={**named, "grammar": ENDLESS_GRAMMAR},
        )
        with chunks:
            for chunk in chunks:
                if chunk.choices and chunk.choices[0].delta.content:
                    n += 1
                    first.set()
                if release.is_set():
                    break  # the client goes away: its slot is freed
        return n

    future = worker(stream)
    qtbot.waitUntil(lambda: first.is_set() or future.done(), timeout=20000)
    assert first.is_set(), future.result()
    window.open_conversation(cid)
    assert window.tab_for(cid) is None  # refused while the API writes into it
    assert "API client" in window.message_bar.text()
    release.set()
    assert result(qtbot, future) > 1
    qtbot.waitUntil(lambda: not controller.api_busy(cid), timeout=10000)
    window.open_conversation(cid)  # idle again: the tab takes it over
    tab = window.tab_for(cid)
    assert tab is not None and [m.role for m in tab.branch][:1] == ["user"]
    stop(qtbot, window, controller)
