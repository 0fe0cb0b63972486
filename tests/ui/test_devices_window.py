"""The window with a remote worker in its saved device choices (a real ``llamadesk
rpc-worker`` on loopback): the model runs in a private server process, a tab is answered,
and killing the worker mid-session leaves the window, its tabs and their saved text alive
with a sentence."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pytestqt.qtbot import QtBot

from app.session import FinishReason
from app.ui.devices_settings import DeviceSettings, save_device_settings
from tests.devices.conftest import Worker, running_worker
from tests.ui.conftest import send, set_sampling, wait_idle

pytestmark = pytest.mark.qt_log_ignore(
    r"This plugin does not support propagateSizeHints", r"This plugin does not support raise"
)


@pytest.fixture
def worker() -> Iterator[Worker]:
    yield from running_worker()


def test_the_window_outlives_its_remote_worker(
    qtbot: QtBot, make_window: Callable[..., Any], worker: Worker, tiny_model: Path
) -> None:
    save_device_settings(DeviceSettings(gpu_layers="all", rpc_servers=worker.endpoint))
    window, _ = make_window(wait_model=False)
    qtbot.waitUntil(window.model_ready, timeout=60000)
    qtbot.waitUntil(lambda: "separate process" in window.message_bar.text(), timeout=10000)
    assert worker.endpoint in window.message_bar.text()
    tab = window.current_tab() or window.new_tab()
    assert tab is not None
    # The second turn must reach the model process (and so the stopped worker): a random
    # model's first reply that runs to the default 1,024 tokens makes the next prompt 2,281
    # tokens (measured: its text re-tokenizes longer), past the 2,048 context, and the
    # second turn was then refused before any decode - the process lived on and the wait
    # below for its end timed out (about 1 run in 10).
    set_sampling(tab, max_tokens=64)
    send(qtbot, tab, "hello there")
    first = wait_idle(qtbot, tab, timeout=60000)
    assert first.error is None and first.text, first.error
    loader = window.worker.session._models._loader.local  # the window's OffloadLoader
    private = loader.private  # the model's own process
    assert private is not None and private.alive()

    worker.stop()  # the worker goes away: its model process ends, the window stays
    send(qtbot, tab, "hello again")
    second = wait_idle(qtbot, tab, timeout=60000)
    assert second.finish_reason is FinishReason.ERROR and second.error, second.error
    qtbot.waitUntil(lambda: not private.alive(), timeout=30000)
    assert window.isVisible() and not window.is_shut_down()
    saved = [m.content for m in window.db.messages(tab.cid)]
    assert "hello there" in saved and first.text in saved  # the first turn is kept
