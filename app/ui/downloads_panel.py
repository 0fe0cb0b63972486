"""The download queue in the window: a Qt face over :class:`app.hub.DownloadManager`.

:class:`Downloads` owns the one manager of the window (created at the first click on a
Download button: nothing is fetched before) and turns its events, which arrive on the
manager's worker thread, into queued signals on the GUI thread. :class:`DownloadsPanel`
lists the jobs with progress, speed, ETA, pause / resume / cancel and failures as sentences.
Discover and the welcome page's curated list both enqueue through the same :class:`Downloads`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal, Slot
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.hub.client import GGUFEntry, HubClient
from app.hub.download import DownloadManager, DownloadRequest, PendingDownload, scan_pending
from app.hub.errors import HubError
from app.hub.events import (
    Cancelled,
    DownloadEvent,
    Failed,
    Finished,
    Paused,
    Progress,
    Queued,
    Resumed,
    Retrying,
    Started,
    Verified,
)
from app.settings_schema import format_bytes
from app.ui.background import BackgroundJobs
from app.ui.theme import colors

__all__ = ["DownloadView", "Downloads", "DownloadsPanel", "format_eta", "make_client"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DownloadView:
    """What the panel shows of one job."""

    job_id: str
    name: str
    state: str  # queued / running / paused / retrying / verifying / finished / failed / cancelled
    done: int = 0
    total: int | None = None
    speed: float = 0.0
    eta: float | None = None
    message: str = ""
    path: Path | None = None

    @property
    def active(self) -> bool:
        return self.state in ("queued", "running", "retrying", "verifying")


def format_eta(seconds: float | None) -> str:
    if seconds is None:
        return ""
    s = max(0, int(seconds + 0.5))
    if s < 60:
        return f"{s} s left"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s left"
    return f"{s // 3600} h {(s % 3600) // 60:02d} min left"


class _Bridge(QObject):
    relayed = Signal(object)  # a DownloadEvent, emitted on the manager's thread (queued here)
    scanned = Signal(object)  # list[PendingDownload], from the scan's thread


class Downloads(QObject):
    """The window's download queue. ``changed(job_id)`` after every state change,
    ``finished(path)`` when a verified file has landed in the library folder."""

    changed = Signal(str)
    finished = Signal(str)
    restored = Signal(int)  # how many unfinished downloads of an earlier run were listed

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        # Options for the DownloadManager, read when it is created (tests shorten them).
        self.options: dict[str, Any] = {}
        self._manager: DownloadManager | None = None
        self._views: dict[str, DownloadView] = {}
        # Unfinished downloads of an earlier run, listed as paused until Resume or Cancel
        # hands them to the manager (which is only created then: no bytes without a click).
        self._pending: dict[str, PendingDownload] = {}
        self._scans = BackgroundJobs("downloads-scan")
        self._bridge = _Bridge(self)
        self._bridge.relayed.connect(self._on_event)
        self._bridge.scanned.connect(self._on_scanned)
        self._closed = False

    # -- the manager ----------------------------------------------------------------------

    def manager(self) -> DownloadManager:
        if self._manager is None:
            if self._closed:
                raise HubError("The download queue is closed.")
            client = make_client()
            self._manager = DownloadManager(client, on_event=self._relay, **self.options)
        return self._manager

    def _relay(self, event: DownloadEvent) -> None:
        # On the manager's thread: hand the event to the GUI thread (a queued signal).
        try:
            self._bridge.relayed.emit(event)
        except RuntimeError:  # the window is gone
            pass

    # -- commands -------------------------------------------------------------------------

    def enqueue(self, repo_id: str, entry: GGUFEntry, revision: str = "main") -> str:
        """Queue a model (all parts of a split one); raises HubError with a sentence."""
        request = DownloadRequest.of(repo_id, entry, revision)
        job_id = request.job_id
        # Downloading again what an earlier run left unfinished continues its partial file
        # (same ETag): the manager takes it from here.
        self._pending.pop(job_id, None)
        view = self._views.get(job_id)
        if view is None or not view.active:
            self._views[job_id] = DownloadView(job_id, _name(request), "queued", 0, request.total)
            self.changed.emit(job_id)
        return self.manager().enqueue(request)

    def pause(self, job_id: str) -> None:
        if self._manager is not None:
            self._manager.pause(job_id)

    def resume(self, job_id: str) -> None:
        manager = self._manager_for(job_id)
        if manager is not None:
            manager.resume(job_id)

    def cancel(self, job_id: str) -> None:
        manager = self._manager_for(job_id)
        if manager is not None:
            manager.cancel(job_id)

    def _manager_for(self, job_id: str) -> DownloadManager | None:
        """The manager, told first about ``job_id`` if it is a download of an earlier run."""
        pending = self._pending.pop(job_id, None)
        if pending is None:
            return self._manager
        try:
            manager = self.manager()
        except HubError as exc:
            self._pending[job_id] = pending
            view = self._views.get(job_id)
            if view is not None:
                self._views[job_id] = replace(view, message=str(exc))
                self.changed.emit(job_id)
            return None
        manager.adopt(pending)
        return manager

    def restore_pending(self) -> None:
        """List the downloads an earlier run left unfinished as paused, with their
        progress (read from their sidecars off the GUI thread); nothing is fetched until
        the user clicks Resume. ``restored(count)`` is emitted once they are listed."""
        if self._closed:
            return
        folder = self.options.get("downloads_dir")
        bridge = self._bridge

        def job() -> None:
            from app.hub import config

            try:
                found = scan_pending(Path(folder) if folder else config.downloads_dir())
            except OSError as exc:
                log.warning("could not list the unfinished downloads: %s", exc)
                found = []
            try:
                bridge.scanned.emit(found)
            except RuntimeError:  # the window is gone
                pass

        self._scans.submit(job)

    @Slot(object)
    def _on_scanned(self, found: object) -> None:
        if not isinstance(found, list):
            return
        count = 0
        for pending in found:
            if not isinstance(pending, PendingDownload):
                continue
            job_id = pending.request.job_id
            if job_id in self._views:  # already queued in this run
                continue
            self._pending[job_id] = pending
            self._views[job_id] = DownloadView(
                job_id,
                _name(pending.request),
                "paused",
                pending.done,
                pending.total,
                message="Left unfinished when LlamaDesk last closed: Resume continues it.",
            )
            self.changed.emit(job_id)
            count += 1
        self.restored.emit(count)

    def close(self, timeout: float = 2.0) -> None:
        """Stop the worker; a running job is paused with its partial file kept."""
        self._closed = True
        manager, self._manager = self._manager, None
        if manager is not None:
            manager.close(timeout)

    # -- state ----------------------------------------------------------------------------

    def views(self) -> list[DownloadView]:
        return list(self._views.values())

    def view(self, job_id: str) -> DownloadView | None:
        return self._views.get(job_id)

    @Slot(object)
    def _on_event(self, event: object) -> None:
        if not isinstance(event, DownloadEvent):
            return
        job_id = event.job_id
        view = self._views.get(job_id) or DownloadView(job_id, job_id, "queued")
        match event:
            case Queued():
                view = replace(view, state="queued", total=event.total, message="")
            case Started():
                view = replace(view, state="running", done=event.done, total=event.total)
            case Progress():
                view = replace(
                    view,
                    state="running",
                    done=event.done,
                    total=event.total,
                    speed=event.speed,
                    eta=event.eta,
                    message="",
                )
            case Retrying():
                view = replace(
                    view,
                    state="retrying",
                    speed=0.0,
                    eta=None,
                    message=f"{event.reason} Retrying in {event.delay:.0f} s "
                    f"(attempt {event.attempt + 1}).",
                )
            case Verified():
                view = replace(view, state="verifying", speed=0.0, eta=None)
            case Paused():
                view = replace(view, state="paused", done=event.done, speed=0.0, eta=None)
            case Resumed():
                view = replace(view, state="queued", message="")
            case Finished():
                view = replace(
                    view, state="finished", done=view.total or view.done, eta=None, speed=0.0
                )
                view = replace(view, path=event.path, message="")
            case Failed():
                kept = " The part already downloaded is kept: Resume continues it."
                view = replace(
                    view,
                    state="failed",
                    speed=0.0,
                    eta=None,
                    message=event.message + (kept if event.partial_kept else ""),
                )
            case Cancelled():
                view = replace(view, state="cancelled", speed=0.0, eta=None, message="")
        self._views[job_id] = view
        self.changed.emit(job_id)
        if isinstance(event, Finished):
            self.finished.emit(str(event.path))


def make_client() -> HubClient:
    """A client for the configured endpoint (setting, ``HF_ENDPOINT``) with the stored token."""
    from app.hub import config

    try:
        token = config.TokenStore().get()
    except Exception:  # a broken keyring: anonymous, gated repositories will say so
        token = None
    return HubClient(token=token)


def _name(request: DownloadRequest) -> str:
    first = Path(request.files[0].path).name
    more = f" (+{len(request.files) - 1} parts)" if len(request.files) > 1 else ""
    return f"{request.repo_id}: {first}{more}"


class _Row(QWidget):
    def __init__(self, panel: DownloadsPanel, job_id: str) -> None:
        super().__init__(panel)
        self.job_id = job_id
        self.setObjectName("download-row")
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 2, 0, 2)
        top = QHBoxLayout()
        self.name = QLabel()
        self.name.setObjectName("download-name")
        self.bar = QProgressBar()
        self.bar.setObjectName("download-progress")
        self.bar.setRange(0, 1000)
        self.figures = QLabel()
        self.figures.setObjectName("download-figures")
        self.pause = QPushButton("Pause")
        self.pause.setObjectName("download-pause")
        self.resume = QPushButton("Resume")
        self.resume.setObjectName("download-resume")
        self.cancel = QPushButton("Cancel")
        self.cancel.setObjectName("download-cancel")
        self.pause.clicked.connect(lambda: panel.downloads.pause(job_id))
        self.resume.clicked.connect(lambda: panel.downloads.resume(job_id))
        self.cancel.clicked.connect(lambda: panel.downloads.cancel(job_id))
        # The name on its own line (wrapped): a long repository and file name must not
        # push the buttons out of a narrow dialog.
        self.name.setWordWrap(True)
        outer.addWidget(self.name)
        top.addWidget(self.bar, 2)
        top.addWidget(self.figures, 3)
        for b in (self.pause, self.resume, self.cancel):
            top.addWidget(b)
        outer.addLayout(top)
        self.message = QLabel()
        self.message.setObjectName("download-message")
        self.message.setWordWrap(True)
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        outer.addWidget(self.message)
        self._style = ""

    def show_view(self, view: DownloadView) -> None:
        self.name.setText(view.name)
        self.name.setToolTip(view.job_id)
        total = view.total or 0
        self.bar.setValue(round(1000 * view.done / total) if total else 0)
        parts = [f"{format_bytes(view.done)} of {format_bytes(total)}" if total else ""]
        if view.state == "running" and view.speed > 0:
            parts.append(f"{format_bytes(view.speed)}/s")
            parts.append(format_eta(view.eta))
        labels = {
            "queued": "Waiting…",
            "paused": "Paused",
            "retrying": "Retrying…",
            "verifying": "Checking the SHA-256…",
            "finished": "Done: added to the library",
            "failed": "Failed",
            "cancelled": "Cancelled",
        }
        if view.state in labels:
            parts.append(labels[view.state])
        self.figures.setText(" · ".join(p for p in parts if p))
        self.pause.setVisible(view.state in ("queued", "running", "retrying"))
        self.resume.setVisible(view.state in ("paused", "failed"))
        self.cancel.setVisible(view.state not in ("finished", "cancelled"))
        self.message.setText(view.message)
        self.message.setVisible(bool(view.message))
        # A style sheet re-polishes the label: set it only when it changes, not on every
        # progress report.
        style = f"color: {colors(self).error};" if view.state == "failed" else ""
        if style != self._style:
            self._style = style
            self.message.setStyleSheet(style)


class DownloadsPanel(QWidget):
    """The queue: one row per download, newest last."""

    def __init__(
        self,
        downloads: Downloads,
        parent: QWidget | None = None,
        empty_text: str = "Nothing is downloading. Pick a file above and click Download.",
    ) -> None:
        super().__init__(parent)
        self.downloads = downloads
        self._rows: dict[str, _Row] = {}
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self._title = QLabel("<b>Downloads</b>")
        layout.addWidget(self._title)
        self._empty = QLabel(empty_text)
        self._empty.setObjectName("downloads-empty")
        layout.addWidget(self._empty)
        self._list = QVBoxLayout()
        layout.addLayout(self._list)
        layout.addStretch(1)
        downloads.changed.connect(self._on_changed)
        for view in downloads.views():
            self._on_changed(view.job_id)

    def row(self, job_id: str) -> _Row | None:
        return self._rows.get(job_id)

    def job_ids(self) -> list[str]:
        """The listed downloads, in the order shown."""
        return list(self._rows)

    @Slot(str)
    def _on_changed(self, job_id: str) -> None:
        view = self.downloads.view(job_id)
        if view is None:
            return
        row = self._rows.get(job_id)
        if row is None:
            row = _Row(self, job_id)
            self._rows[job_id] = row
            self._list.addWidget(row)
        row.show_view(view)
        self._empty.setVisible(not self._rows)
