"""Discover shows where a file's layers would go before it is downloaded: from the
header's layer count and the file's size, with the saved device choices (a real
``llamadesk rpc-worker`` on loopback) - the Hub is a local fake."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pytestqt.qtbot import QtBot

from app.ui.devices_settings import DeviceSettings, save_device_settings
from tests.devices.conftest import Worker, running_worker
from tests.hub.fake_hub import FakeHub

pytestmark = pytest.mark.qt_log_ignore(
    r"This plugin does not support propagateSizeHints", r"This plugin does not support raise"
)

REPO = "acme/Tiny-GGUF"
Q8 = "tiny-Q8_0.gguf"


@pytest.fixture(scope="module")
def worker() -> Iterator[Worker]:
    yield from running_worker()


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, hub_gguf: Path) -> Iterator[FakeHub]:
    server = FakeHub().start()
    server.add_repo(REPO, downloads=1, likes=1, license="mit")
    server.add_file(REPO, Q8, hub_gguf)
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    yield server
    server.stop()


def test_discover_shows_the_plan_on_the_saved_devices(
    qtbot: QtBot, make_window: Callable[..., Any], hub: FakeHub, worker: Worker
) -> None:
    save_device_settings(DeviceSettings(gpu_layers="all", rpc_servers=worker.endpoint))
    window, _ = make_window(model=None, wait_model=False)
    window.show_discover()
    dialog = window.discover()
    dialog.search_edit.setText("gguf")
    dialog.search()
    qtbot.waitUntil(lambda: dialog.repo_ids() == [REPO], timeout=10000)
    dialog.select_repo(REPO)
    qtbot.waitUntil(lambda: dialog.details() is not None, timeout=10000)
    dialog.select_file(Q8)
    want = f"Plan: 2 of 2 layers on RPC0 ({worker.endpoint}); "
    qtbot.waitUntil(lambda: want in dialog.fit_label.text(), timeout=15000)
    assert not hub.cdn_requests(Q8) or all(r.headers.get("Range") for r in hub.cdn_requests(Q8)), (
        "only the header was read"
    )
