"""A remote engine's reply broken off mid-way (issue 28, item 6), on a real local stub
server: the tab stops generating, the reply's text stays and is labelled "cut off" (not
"stopped" like a user's stop), the notice stays and offers Try again, which answers again;
while the server is quiet the status says so instead of a falling speed; and the meter
counts the reply while it streams (the engine says its figures only at the end)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from PySide6.QtWidgets import QPushButton

from app.remote.saved import SavedConnection, address, dump_connections
from tests.remote.stub_server import StubServer
from tests.ui.conftest import send, wait_idle

pytestmark = pytest.mark.qt_log_ignore(r"This plugin does not support propagateSizeHints")


@pytest.fixture
def stub() -> Iterator[StubServer]:
    server = StubServer("openai")
    yield server
    server.state.held_release.set()
    server.close()


def remote_window(make_window: Any, stub: StubServer) -> Any:
    conn = SavedConnection(
        "stub", "stub-box", stub.url, kind="OpenAI-compatible", models=("stub-model",)
    )
    window, _ = make_window(
        model=address(conn.id, "stub-model"), remote_connections=dump_connections([conn])
    )
    return window


def test_a_reply_broken_off_by_the_server_is_kept_as_cut_off_with_try_again(
    qtbot: Any, make_window: Any, stub: StubServer
) -> None:
    window = remote_window(make_window, stub)
    tab = window.new_tab()
    send(qtbot, tab, "tell me [drop]")
    result = wait_idle(qtbot, tab, timeout=5000)  # at once, not after a read timeout
    assert result.error
    user, reply = window.db.get_thread(tab.cid)
    assert reply.content == "Hello from" and reply.status == "error"
    widget = tab.view.last()
    assert widget is not None and "cut off" in widget.figures.text()
    assert "stopped" not in widget.figures.text()
    # not "idle · on stub-box": the server failed the reply
    state = tab.state_label.text()
    assert state.startswith("the last reply failed") and "stub-box" in state
    # the notice stays (an error) and offers Try again
    assert tab.notice.isVisible()
    qtbot.wait(3500)
    assert tab.notice.isVisible()
    again = [b for b in tab.notice.findChildren(QPushButton) if b.text() == "Try again"]
    assert again and again[0].isVisible()
    again[0].click()
    wait_idle(qtbot, tab, timeout=5000)
    replies = [m for m in window.db.get_thread(tab.cid) if m.role == "assistant"]
    assert window.db.sibling_position(replies[-1].id) == (2, 2)  # answered again
    assert replies[-1].parent_id == user.id  # (the stub drops this one too)


def test_the_status_bar_and_the_intro_name_a_remote_model_without_local_figures(
    qtbot: Any, make_window: Any, stub: StubServer
) -> None:
    window = remote_window(make_window, stub)
    tab = window.new_tab()
    model_text = window.status_ui.model_label.text()
    assert model_text.startswith("stub-model · ") and " 0 " not in model_text + " "
    assert "· 0 ·" not in model_text and "0 bytes" not in window.status_ui.memory_label.text()
    assert tab.view._placeholder.text().splitlines()[0] == "stub-model"


def test_a_quiet_server_is_said_and_the_meter_counts_the_streaming_reply(
    qtbot: Any, make_window: Any, stub: StubServer
) -> None:
    window = remote_window(make_window, stub)
    tab = window.new_tab()
    tab.update_status()
    before = tab.meter_label.text()
    send(qtbot, tab, "go on [held]")  # the first piece, then nothing until released
    qtbot.waitUntil(lambda: tab.reply.gen_tokens >= 1, timeout=5000)
    qtbot.waitUntil(lambda: "waiting for text: none for" in tab.state_label.text(), timeout=6000)
    assert "tok/s" not in tab.state_label.text()
    # the stub says no context size: the chat's tokens, about, growing with the reply
    meter = tab.meter_label.text()
    assert meter.startswith("~") and meter != before and "no model" not in before
    stub.state.held_release.set()
    wait_idle(qtbot, tab, timeout=5000)
    assert "waiting" not in tab.state_label.text()
