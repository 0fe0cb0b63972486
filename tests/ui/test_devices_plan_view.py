"""The model manager shows the selected model's plan per device before loading, with the
saved device choices (a real ``llamadesk rpc-worker`` on loopback) and the window's
context."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtWidgets import QTableWidget
from pytestqt.qtbot import QtBot

from app.engine import ContextSettings
from app.storage import Database
from app.ui.devices_settings import DeviceSettings, save_device_settings
from app.ui.model_manager import ModelManager
from tests.devices.conftest import Worker, running_worker
from tests.support.gguf_models import write_tiny_model

TIMEOUT_MS = 20_000


@pytest.fixture(scope="module")
def worker() -> Iterator[Worker]:
    yield from running_worker()


@pytest.fixture
def manager(qtbot: QtBot, tmp_path: Path) -> Iterator[ModelManager]:
    folder = tmp_path / "models"
    folder.mkdir()
    write_tiny_model(folder / "tiny.gguf")
    db = Database.open()
    db.add_folder(folder)
    view = ModelManager(db)
    qtbot.addWidget(view)
    view.resize(1000, 600)
    view.show()
    qtbot.waitUntil(lambda: not view.is_scanning(), timeout=TIMEOUT_MS)
    view.set_plan_context(lambda: ContextSettings(n_ctx=8192, n_seq_max=4))
    yield view
    db.close()


def _select_first(manager: ModelManager) -> None:
    table = manager.findChild(QTableWidget, "modelTable")
    assert table is not None and table.rowCount() == 1
    table.clearSelection()
    table.selectRow(0)


def test_the_selected_model_shows_its_plan(qtbot: QtBot, manager: ModelManager) -> None:
    assert not manager.plan_label.isVisibleTo(manager)
    _select_first(manager)
    want = "Plan: All 2 layers on the CPU; 4 tabs of 2k."
    qtbot.waitUntil(lambda: manager.plan_label.text() == want, timeout=TIMEOUT_MS)
    assert manager.plan_label.isVisibleTo(manager)


def test_the_plan_follows_the_saved_devices(
    qtbot: QtBot, manager: ModelManager, worker: Worker
) -> None:
    save_device_settings(DeviceSettings(gpu_layers="all", rpc_servers=worker.endpoint))
    _select_first(manager)
    want = f"Plan: 2 of 2 layers on RPC0 ({worker.endpoint}); 4 tabs of 2k."
    qtbot.waitUntil(lambda: manager.plan_label.text() == want, timeout=TIMEOUT_MS)
