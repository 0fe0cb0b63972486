"""The Devices section of the settings with a real ``llamadesk rpc-worker`` on loopback:
the devices listed with their memory, workers added (probed off the GUI thread) and
removed, loopback only unless the network is trusted, and the plan for the current model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtWidgets import QTableWidgetItem
from pytestqt.qtbot import QtBot

from app.engine import ContextSettings
from app.ui.devices_page import DevicesPage
from app.ui.devices_settings import load_device_settings
from tests.devices.conftest import Worker, free_port, running_worker

TIMEOUT_MS = 20_000


@pytest.fixture(scope="module")
def worker() -> Iterator[Worker]:
    yield from running_worker()


def _page(qtbot: QtBot, model: Path | None) -> DevicesPage:
    page = DevicesPage(
        str(model) if model else None, lambda: ContextSettings(n_ctx=8192, n_seq_max=2)
    )
    qtbot.addWidget(page)
    assert page.table.rowCount() == 0 and not page.body.isVisibleTo(page)  # folded: idle
    page.toggle.click()
    assert page.body.isVisibleTo(page)
    qtbot.waitUntil(lambda: page.table.rowCount() > 0, timeout=TIMEOUT_MS)
    return page


def _cells(page: DevicesPage) -> list[list[str]]:
    table = page.table
    return [
        [(table.item(r, c) or QTableWidgetItem()).text() for c in range(table.columnCount())]
        for r in range(table.rowCount())
    ]


def test_a_worker_is_added_listed_planned_and_removed(
    qtbot: QtBot, worker: Worker, tiny_model: Path
) -> None:
    page = _page(qtbot, tiny_model)
    assert [row[1] for row in _cells(page)] == ["cpu"]
    qtbot.waitUntil(lambda: page.plan_label.text().startswith("Plan: All"), timeout=TIMEOUT_MS)
    assert page.plan_label.text() == "Plan: All 2 layers on the CPU; 2 tabs of 4k."
    page.gpu_layers.setText("2")
    page.gpu_layers.editingFinished.emit()
    page.endpoint_edit.setText(worker.endpoint)
    page.add_button.click()
    qtbot.waitUntil(lambda: page.endpoint_list() == (worker.endpoint,), timeout=TIMEOUT_MS)
    qtbot.waitUntil(lambda: len(_cells(page)) == 2, timeout=TIMEOUT_MS)
    name, kind, free, total = _cells(page)[1]
    assert (name, kind) == (worker.endpoint, "remote") and free and total
    saved = load_device_settings()
    assert saved.rpc_servers == worker.endpoint and saved.gpu_layers == "2"
    assert saved.model_settings().rpc_servers == worker.endpoint
    expected = f"Plan: 1 of 2 layers on RPC0 ({worker.endpoint}), 1 on the CPU; 2 tabs of 4k."
    qtbot.waitUntil(lambda: page.plan_label.text() == expected, timeout=TIMEOUT_MS)
    page.endpoints.setCurrentRow(0)
    page.remove_button.click()
    assert page.endpoint_list() == () and load_device_settings().rpc_servers == ""
    qtbot.waitUntil(lambda: len(_cells(page)) == 1, timeout=TIMEOUT_MS)


def test_a_dead_endpoint_gets_a_sentence_and_is_not_added(qtbot: QtBot, worker: Worker) -> None:
    page = _page(qtbot, None)
    page.endpoint_edit.setText(f"127.0.0.1:{free_port()}")
    page.add_button.click()
    qtbot.waitUntil(lambda: "Nothing listens" in page.message.text(), timeout=TIMEOUT_MS)
    assert page.endpoint_list() == () and load_device_settings().rpc_servers == ""


def test_another_machine_needs_the_trusted_network_tick(qtbot: QtBot, worker: Worker) -> None:
    page = _page(qtbot, None)
    page.endpoint_edit.setText("192.0.2.7:50052")
    page.add_button.click()
    assert "is not this computer" in page.message.text()
    assert page.endpoint_list() == ()
    page.trusted.setChecked(True)
    assert load_device_settings().trusted_network
    page.endpoint_edit.setText("not an address")
    page.add_button.click()
    assert page.message.text() and page.endpoint_list() == ()
