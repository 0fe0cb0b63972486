"""Discover, the download queue, the model picker and drops, against a local fake Hub."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent
from PySide6.QtWidgets import QPushButton
from pytestqt.qtbot import QtBot

from app import paths
from app.hub import config
from tests.hub.fake_hub import FakeHub, Fault
from tests.support.gguf_models import TinySpec, write_tiny_model
from tests.ui.conftest import FAST_DOWNLOADS

pytestmark = pytest.mark.qt_log_ignore(
    r"This plugin does not support propagateSizeHints", r"This plugin does not support raise"
)

REPO = "acme/Tiny-GGUF"
Q8 = "tiny-Q8_0.gguf"
Q4 = "tiny-Q4_K_M.gguf"


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, hub_gguf: Path) -> Iterator[FakeHub]:
    server = FakeHub().start()
    server.add_repo(REPO, downloads=120, likes=7, license="mit")
    server.add_file(REPO, Q8, hub_gguf)
    server.add_file(REPO, Q4, hub_gguf)
    server.add_repo("acme/Other-GGUF", downloads=3, likes=50, gated="manual")
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    yield server
    server.stop()


def _window(make_window: Callable[..., Any], model: Path | None = None) -> Any:
    window, _ = make_window(model=model, wait_model=model is not None)
    window.downloads.options = dict(FAST_DOWNLOADS)
    return window


def test_discover_downloads_with_a_drop_and_the_manager_lists_it(
    qtbot: QtBot, make_window: Callable[..., Any], hub: FakeHub
) -> None:
    assert config.endpoint() == hub.url
    window = _window(make_window)
    window.show_discover()
    dialog = window.discover()
    # Search, sorted by downloads: both repositories, most downloaded first.
    dialog.search_edit.setText("gguf")
    qtbot.mouseClick(dialog.search_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: len(dialog.repo_ids()) == 2, timeout=10000)
    assert dialog.repo_ids() == [REPO, "acme/Other-GGUF"]
    assert dialog.repo_table.item(0, 3).text() == "mit"
    assert dialog.repo_table.item(1, 4).text().startswith("Gated")
    # Sorting by likes asks the Hub again.
    dialog.sort_combo.setCurrentIndex(1)
    qtbot.waitUntil(lambda: dialog.repo_ids()[:1] == ["acme/Other-GGUF"], timeout=10000)
    dialog.sort_combo.setCurrentIndex(0)
    qtbot.waitUntil(lambda: dialog.repo_ids()[:1] == [REPO], timeout=10000)
    assert not hub.cdn_requests(Q8), "no bytes before a click"

    # The repository's files, grouped by quantization, with a verdict from the header.
    dialog.select_repo(REPO)
    qtbot.waitUntil(
        lambda: not dialog.is_busy() and len(dialog.fits()) == 2 and dialog.details() is not None,
        timeout=10000,
    )
    details = dialog.details()
    assert details is not None
    assert [e.quant for e in details.entries] == ["Q4_K_M", "Q8_0"]
    assert all(f.basis == "header" for f in dialog.fits())
    assert {f.verdict for f in dialog.fits()} <= {"fits", "tight", "will not fit"}
    groups = [dialog.files_tree.topLevelItem(i).text(0) for i in range(2)]
    assert groups == ["Q4_K_M", "Q8_0"]
    if dialog.recommended() is not None:
        assert any("recommended" in item.text(2) for item in dialog._entry_items())
    assert not hub.cdn_requests(Q8)

    # Download the Q8_0 file; the connection drops after 300 kB, the download resumes.
    hub.fault(REPO, Q8, Fault(drop_after=300_000))
    dialog.select_file(Q8)
    assert dialog.download_button.isEnabled()
    qtbot.mouseClick(dialog.download_button, Qt.MouseButton.LeftButton)
    job = f"{REPO}/{Q8}@{details.revision}"

    def state() -> str:
        view = window.downloads.view(job)
        return view.state if view is not None else ""

    qtbot.waitUntil(lambda: state() in ("finished", "failed"), timeout=20000)
    view = window.downloads.view(job)
    assert view is not None and view.state == "finished", view
    ranges = [r.headers.get("Range") for r in hub.cdn_requests(Q8) if r.method == "GET"]
    assert ranges == [None, "bytes=300000-"]
    row = dialog.panel.row(job)
    assert row is not None and row.bar.value() == 1000
    assert "library" in row.figures.text()

    # It lands in the library folder and the manager lists it (by its file name).
    target = (paths.data_dir() / "models" / Q8).resolve()
    assert view.path == target and target.is_file()
    manager = window.model_manager()
    assert manager is not None
    qtbot.waitUntil(lambda: str(target) in manager.listed_paths(), timeout=10000)
    labels = [e.label for e in window.model_picker.entries()]
    assert any(label.endswith(Q8) for label in labels)


def test_picker_lists_demo_and_library_send_needs_a_model_and_drops_add(
    qtbot: QtBot,
    make_window: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    tiny_model: Path,
    tmp_path: Path,
) -> None:
    demo = tmp_path / "demo" / "llamadesk-demo.gguf"
    demo.parent.mkdir()
    shutil.copy(tiny_model, demo)
    monkeypatch.setattr(paths, "demo_model_path", lambda: demo)
    other = write_tiny_model(tmp_path / "other-Q4_K_M.gguf", TinySpec(name="Other Tiny"))
    window, _ = make_window(model=None, wait_model=False)
    qtbot.waitUntil(window.model_ready, timeout=15000)  # the demo model, on first start
    picker = window.model_picker
    entries = picker.entries()
    assert entries[0].demo and entries[0].path == str(demo)
    assert picker.actions_by_text()[entries[0].label].isChecked()
    assert picker.text().startswith("Model:")

    tab = window.new_tab()
    assert tab is not None and tab.send_button.isEnabled()
    window.unload_model()
    qtbot.waitUntil(lambda: not window.model_ready(), timeout=10000)
    assert not tab.send_button.isEnabled()
    assert window.no_model_banner.isVisible()
    assert picker.text().startswith("Load a model")
    # The demo stays listed after Unload: picking it loads it again.
    picker.actions_by_text()[entries[0].label].trigger()
    qtbot.waitUntil(window.model_ready, timeout=15000)
    assert tab.send_button.isEnabled() and not window.no_model_banner.isVisible()

    # A .gguf dropped on the window joins the library and the picker.
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(other)), QUrl.fromLocalFile(str(tmp_path / "x.txt"))])
    drop = QDropEvent(
        QPointF(20, 20),
        Qt.DropAction.CopyAction,
        mime,
        Qt.MouseButton.NoButton,
        Qt.KeyboardModifier.NoModifier,
    )
    window.dropEvent(drop)
    manager = window.model_manager()
    assert manager is not None
    qtbot.waitUntil(lambda: str(other) in manager.listed_paths(), timeout=10000)
    labels = [e.label for e in picker.entries()]
    assert "Other Tiny · other-Q4_K_M.gguf" in labels
    assert not any(label.endswith("x.txt") for label in labels)


def test_welcome_page_offers_the_catalog_and_downloads_through_the_queue(
    qtbot: QtBot, make_window: Callable[..., Any], hub: FakeHub, hub_gguf: Path
) -> None:
    hub.add_repo("Qwen/Qwen3-0.6B-GGUF")
    hub.add_file("Qwen/Qwen3-0.6B-GGUF", "Qwen3-0.6B-Q8_0.gguf", hub_gguf)
    window = _window(make_window)
    catalog = window.welcome.catalog
    assert catalog.isVisible()
    assert "Qwen3 0.6B" in catalog.buttons and "demo" in catalog.buttons
    assert not catalog.buttons["demo"].isEnabled()  # no demo model in the tests' install
    button = catalog.buttons["Qwen3 0.6B"]
    assert isinstance(button, QPushButton)
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    target = paths.data_dir() / "models" / "Qwen3-0.6B-Q8_0.gguf"
    manager = window.model_manager()
    assert manager is not None
    qtbot.waitUntil(lambda: str(target.resolve()) in manager.listed_paths(), timeout=20000)
    assert window.discover().isVisible()  # the queue is shown
