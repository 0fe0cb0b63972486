"""The downloads list outside Discover, and downloads left unfinished by an earlier run:
listed as paused with their progress at start, fetched again only after a click."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QSignalSpy
from pytestqt.qtbot import QtBot

from app import paths
from app.hub import config
from app.hub.client import HubClient
from app.hub.download import DownloadManager, DownloadRequest, scan_pending
from app.hub.events import DownloadEvent, Failed
from app.ui.downloads_dialog import DownloadsDialog
from app.ui.downloads_panel import Downloads
from tests.hub.fake_hub import FakeHub, Fault
from tests.ui.conftest import FAST_DOWNLOADS

pytestmark = pytest.mark.qt_log_ignore(r"This plugin does not support propagateSizeHints")

REPO = "acme/Tiny-GGUF"
Q8 = "tiny-Q8_0.gguf"
DROP = 300_000


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, hub_gguf: Path) -> Iterator[FakeHub]:
    server = FakeHub().start()
    server.add_repo(REPO)
    server.add_file(REPO, Q8, hub_gguf)
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    yield server
    server.stop()


def _leave_unfinished(hub: FakeHub) -> str:
    """An earlier run: the connection drops after DROP bytes, the app closes (one attempt:
    the job fails with its partial file kept, as after a crash or a quit)."""
    hub.fault(REPO, Q8, Fault(drop_after=DROP))
    failed: list[DownloadEvent] = []
    manager = DownloadManager(HubClient(), max_attempts=1, on_event=failed.append)
    try:
        request = DownloadRequest.of(REPO, HubClient().details(REPO).entries[0])
        job_id = manager.enqueue(request)
        status = manager.wait(job_id, timeout=20)
    finally:
        manager.close()
    assert status.state == "failed", status
    assert any(isinstance(e, Failed) and e.partial_kept for e in failed)
    return job_id


def test_unfinished_downloads_are_listed_paused_at_start_and_resume_on_click(
    qtbot: QtBot, hub: FakeHub, hub_gguf: Path
) -> None:
    job_id = _leave_unfinished(hub)
    gets_before = len(hub.cdn_requests(Q8))
    size = hub_gguf.stat().st_size
    (pending,) = scan_pending(config.downloads_dir())
    assert (pending.request.job_id, pending.done, pending.total) == (job_id, DROP, size)

    # The next start: the window's queue lists it, paused, with its progress.
    downloads = Downloads()
    downloads.options = dict(FAST_DOWNLOADS)
    dialog = DownloadsDialog(downloads)
    qtbot.addWidget(dialog)
    dialog.show()
    with qtbot.waitSignal(downloads.restored, timeout=5000) as restored:
        downloads.restore_pending()
    assert restored.args == [1]
    view = downloads.view(job_id)
    assert view is not None and (view.state, view.done, view.total) == ("paused", DROP, size)
    assert dialog.panel.job_ids() == [job_id]
    row = dialog.panel.row(job_id)
    assert row is not None
    assert row.bar.value() == round(1000 * DROP / size)
    assert "Paused" in row.figures.text() and "Resume continues it" in row.message.text()
    qtbot.waitUntil(row.isVisible)  # a row added to a shown panel is shown by the event loop
    assert row.resume.isVisible() and row.cancel.isVisible() and not row.pause.isVisible()
    # Listing it fetched nothing, and a second scan does not list it twice.
    with qtbot.waitSignal(downloads.restored, timeout=5000) as again:
        downloads.restore_pending()
    assert again.args == [0] and dialog.panel.job_ids() == [job_id]
    qtbot.wait(200)
    assert len(hub.cdn_requests(Q8)) == gets_before, "no bytes without a click"

    # Resume continues from the partial file and lands the verified file in the library.
    finished = QSignalSpy(downloads.finished)
    qtbot.mouseClick(row.resume, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: downloads.view(job_id).state in ("finished", "failed"), timeout=20000)  # type: ignore[union-attr]
    view = downloads.view(job_id)
    assert view is not None and view.state == "finished", view
    gets = [r for r in hub.cdn_requests(Q8) if r.method == "GET"][gets_before - 1 :]
    assert gets[-1].headers.get("Range") == f"bytes={DROP}-"
    target = paths.data_dir() / "models" / Q8
    assert target.read_bytes() == hub_gguf.read_bytes()
    assert finished.count() == 1 and row.bar.value() == 1000
    assert scan_pending(config.downloads_dir()) == []
    downloads.close()


def test_cancel_of_an_unfinished_download_deletes_its_partial_file(
    qtbot: QtBot, hub: FakeHub
) -> None:
    job_id = _leave_unfinished(hub)
    parts = list(config.downloads_dir().glob("*/*.part*"))
    assert len(parts) == 2  # the partial file and its sidecar
    downloads = Downloads()
    downloads.options = dict(FAST_DOWNLOADS)
    dialog = DownloadsDialog(downloads)
    qtbot.addWidget(dialog)
    dialog.show()
    with qtbot.waitSignal(downloads.restored, timeout=5000):
        downloads.restore_pending()
    row = dialog.panel.row(job_id)
    assert row is not None
    gets_before = len(hub.cdn_requests(Q8))
    qtbot.mouseClick(row.cancel, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: downloads.view(job_id).state == "cancelled", timeout=5000)  # type: ignore[union-attr]
    assert not any(p.exists() for p in parts)
    assert "Cancelled" in row.figures.text() and row.resume.isHidden()
    assert len(hub.cdn_requests(Q8)) == gets_before
    downloads.close()


def test_the_dialog_shares_the_queue_and_asks_for_discover(qtbot: QtBot, hub: FakeHub) -> None:
    downloads = Downloads()
    downloads.options = dict(FAST_DOWNLOADS)
    dialog = DownloadsDialog(downloads)
    qtbot.addWidget(dialog)
    dialog.show()
    assert dialog.panel.job_ids() == []
    assert dialog.panel._empty.isVisible() and "Discover" in dialog.panel._empty.text()
    with qtbot.waitSignal(dialog.discoverRequested, timeout=1000):
        qtbot.mouseClick(dialog.discover_button, Qt.MouseButton.LeftButton)
    # A download queued elsewhere (Discover, the welcome page) shows up here.
    entry = HubClient().details(REPO).entries[0]
    job_id = downloads.enqueue(REPO, entry)
    assert dialog.panel.job_ids() == [job_id] and not dialog.panel._empty.isVisible()
    qtbot.waitUntil(lambda: downloads.view(job_id).state == "finished", timeout=20000)  # type: ignore[union-attr]
    row = dialog.panel.row(job_id)
    assert row is not None and "library" in row.figures.text()
    downloads.close()
