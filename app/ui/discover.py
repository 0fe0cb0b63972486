"""Models -> Discover: search the Hub for GGUF models, see what fits, download.

Search, a repository's file listing and its header (the first MB of one file, for the
engine's memory estimate) go over the network as jobs of a
:class:`~app.ui.background.BackgroundJobs` (the UI's one kind of background work); their results come back as queued signals, each
tagged with the request it answers so a late answer to an old search is dropped. Nothing is
downloaded before a click on Download; the bytes go through the window's
:class:`~app.ui.downloads_panel.Downloads` queue, listed at the bottom.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal, Slot
from PySide6.QtGui import QColor, QFont
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QScrollArea,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.hub import catalog
from app.hub.client import GGUFEntry, RepoDetails, RepoSummary, Sort
from app.hub.errors import HubError
from app.hub.fit import FitEstimate, estimate, recommend
from app.settings_schema import format_bytes
from app.ui.background import BackgroundJobs
from app.ui.downloads_panel import Downloads, DownloadsPanel, make_client
from app.ui.theme import colors

__all__ = ["SORTS", "DiscoverDialog"]

log = logging.getLogger(__name__)

SORTS: tuple[tuple[str, Sort], ...] = (
    ("Most downloaded", "downloads"),
    ("Most liked", "likes"),
    ("Recently updated", "last_modified"),
)
REPO_COLUMNS = ("Repository", "Downloads", "Likes", "Licence", "Access")
FILE_COLUMNS = ("Quantization / file", "Size", "Fit on this computer")
_ENTRY_ROLE = Qt.ItemDataRole.UserRole


@dataclass(frozen=True)
class _Answer:
    token: int
    value: Any = None
    error: str | None = None


class _Bridge(QObject):
    """Lives on the GUI thread; the job's pool thread emits through it (queued)."""

    searched = Signal(object)  # _Answer(list[RepoSummary])
    detailed = Signal(object)  # _Answer((RepoDetails, list[FitEstimate]))
    fitted = Signal(object)  # _Answer(list[FitEstimate]) from the header
    resolved = Signal(object)  # _Answer((repo_id, GGUFEntry)) of a catalog model
    planned = Signal(object)  # _Answer(list[str]): each file's plan per device


def _emit(signal: Any, answer: _Answer) -> None:
    try:
        signal.emit(answer)
    except RuntimeError:  # the dialog is gone
        pass


def device_plans(sizes: list[int], info: Any, settings: Any) -> list[str]:
    """On a pool thread: each file's plan with the saved device choices ("" where none)."""
    from app.engine.offload_preview import preview_by_size, remote_devices
    from app.ui.devices_settings import load_device_settings

    try:
        choices = load_device_settings().model_settings()
        remote, _problems = remote_devices(choices.rpc_servers)
        return [preview_by_size(n, info, choices, settings, remote).text for n in sizes]
    except Exception as exc:  # the plan is extra: Discover works without it
        log.info("no device plan: %s", exc)
        return []


def _count(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1_000_000:.1f} M"
    if n >= 10_000:
        return f"{n / 1000:.0f} k"
    return f"{n:,}"


def _access(gated: bool | str, private: bool) -> str:
    if private:
        return "Private (token)"
    if gated:
        return "Gated: accept the licence"
    return "Open"


class DiscoverDialog(QDialog):
    """See the module docstring. ``context_settings`` gives the context the fit is for."""

    def __init__(
        self,
        downloads: Downloads,
        parent: QWidget | None = None,
        context_settings: Callable[[], Any] | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("discover")
        self.setWindowTitle("Discover models")
        self.resize(980, 680)
        self.downloads = downloads
        self._context_settings = context_settings
        self._jobs = BackgroundJobs("discover")
        self._bridge = _Bridge(self)
        self._bridge.searched.connect(self._on_searched)
        self._bridge.planned.connect(self._on_planned)
        self._plans: list[str] = []
        self._bridge.detailed.connect(self._on_detailed)
        self._bridge.fitted.connect(self._on_fitted)
        self._bridge.resolved.connect(self._on_resolved)
        self._search_token = 0
        self._details_token = 0
        self._busy = 0
        self._results: list[RepoSummary] = []
        self._details: RepoDetails | None = None
        self._fits: list[FitEstimate] = []
        self._recommended: int | None = None
        self._build()

    # -- construction ---------------------------------------------------------------------

    def _build(self) -> None:
        outer = QVBoxLayout(self)
        top = QHBoxLayout()
        self.search_edit = QLineEdit()
        self.search_edit.setObjectName("discover-search")
        self.search_edit.setPlaceholderText("Search Hugging Face for GGUF models, e.g. “qwen3”")
        self.search_edit.returnPressed.connect(self.search)
        self.sort_combo = QComboBox()
        self.sort_combo.setObjectName("discover-sort")
        for label, value in SORTS:
            self.sort_combo.addItem(label, value)
        self.sort_combo.currentIndexChanged.connect(lambda _i: self.search())
        self.search_button = QPushButton("Search")
        self.search_button.setObjectName("discover-search-button")
        self.search_button.clicked.connect(self.search)
        top.addWidget(self.search_edit, 1)
        top.addWidget(self.sort_combo)
        top.addWidget(self.search_button)
        outer.addLayout(top)

        self.status_label = QLabel()
        self.status_label.setObjectName("discover-status")
        self.status_label.setWordWrap(True)
        self.status_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        outer.addWidget(self.status_label)

        split = QSplitter(Qt.Orientation.Horizontal)
        self.repo_table = QTableWidget(0, len(REPO_COLUMNS))
        self.repo_table.setObjectName("discover-repos")
        self.repo_table.setHorizontalHeaderLabels(list(REPO_COLUMNS))
        self.repo_table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.repo_table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.repo_table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.repo_table.verticalHeader().hide()
        header = self.repo_table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.repo_table.itemSelectionChanged.connect(self._on_repo_selected)
        split.addWidget(self.repo_table)

        right = QWidget()
        rlayout = QVBoxLayout(right)
        rlayout.setContentsMargins(0, 0, 0, 0)
        self.repo_label = QLabel("Choose a repository to see its files.")
        self.repo_label.setObjectName("discover-repo")
        self.repo_label.setWordWrap(True)
        rlayout.addWidget(self.repo_label)
        self.files_tree = QTreeWidget()
        self.files_tree.setObjectName("discover-files")
        self.files_tree.setColumnCount(len(FILE_COLUMNS))
        self.files_tree.setHeaderLabels(list(FILE_COLUMNS))
        self.files_tree.header().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.files_tree.header().setStretchLastSection(False)
        self.files_tree.header().setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        self.files_tree.header().setSectionResizeMode(2, QHeaderView.ResizeMode.ResizeToContents)
        self.files_tree.itemSelectionChanged.connect(self._update_buttons)
        self.files_tree.itemDoubleClicked.connect(lambda *_: self.download_selected())
        rlayout.addWidget(self.files_tree, 1)
        row = QHBoxLayout()
        self.fit_label = QLabel()
        self.fit_label.setObjectName("discover-fit")
        self.fit_label.setWordWrap(True)
        self.download_button = QPushButton("Download")
        self.download_button.setObjectName("discover-download")
        self.download_button.setToolTip("Download the selected file into the model library.")
        self.download_button.clicked.connect(self.download_selected)
        row.addWidget(self.fit_label, 1)
        row.addWidget(self.download_button, 0, Qt.AlignmentFlag.AlignTop)
        rlayout.addLayout(row)
        split.addWidget(right)
        split.setSizes([420, 560])
        outer.addWidget(split, 3)

        self.panel = DownloadsPanel(self.downloads)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(self.panel)
        outer.addWidget(scroll, 1)
        self._update_buttons()

    # -- public interface -----------------------------------------------------------------

    def is_busy(self) -> bool:
        """Whether a search, listing or header read is under way."""
        return self._busy > 0

    def repo_ids(self) -> list[str]:
        return [r.repo_id for r in self._results]

    def details(self) -> RepoDetails | None:
        return self._details

    def fits(self) -> list[FitEstimate]:
        return list(self._fits)

    def recommended(self) -> GGUFEntry | None:
        if self._details is None or self._recommended is None:
            return None
        return self._details.entries[self._recommended]

    def select_repo(self, repo_id: str) -> None:
        for row, summary in enumerate(self._results):
            if summary.repo_id == repo_id:
                self.repo_table.selectRow(row)
                return
        raise KeyError(repo_id)

    def select_file(self, name: str) -> None:
        for item in self._entry_items():
            index = item.data(0, _ENTRY_ROLE)
            if self._details is not None and self._details.entries[index].name == name:
                self.files_tree.setCurrentItem(item)
                return
        raise KeyError(name)

    def selected_entry(self) -> GGUFEntry | None:
        item = self.files_tree.currentItem()
        if item is None or self._details is None:
            return None
        index = item.data(0, _ENTRY_ROLE)
        if not isinstance(index, int):
            return None
        return self._details.entries[index]

    @Slot()
    def search(self) -> None:
        query = self.search_edit.text().strip()
        sort: Sort = self.sort_combo.currentData() or "downloads"
        self._search_token += 1
        token = self._search_token
        self._set_status("Searching…")
        self._start()

        def job() -> None:
            try:
                found = make_client().search(query, sort=sort)
                _emit(self._bridge.searched, _Answer(token, found))
            except HubError as exc:
                _emit(self._bridge.searched, _Answer(token, error=str(exc)))
            except Exception as exc:  # a bug: say so, keep the window alive
                log.exception("search failed")
                _emit(self._bridge.searched, _Answer(token, error=f"The search failed: {exc}"))

        self._jobs.submit(job)

    @Slot()
    def download_selected(self) -> None:
        entry = self.selected_entry()
        details = self._details
        if entry is None or details is None:
            return
        self._enqueue(details.repo_id, entry, details.revision)

    def download_catalog(self, model: catalog.CatalogModel) -> None:
        """Download a curated model: its entry (size, SHA-256) is read from the Hub first."""
        self._set_status(f"Looking up {model.name} on the Hub…")
        self._start()

        def job() -> None:
            try:
                _resolved, entry = catalog.resolve(model, make_client())
                _emit(self._bridge.resolved, _Answer(0, (model.repository, entry)))
            except HubError as exc:
                _emit(self._bridge.resolved, _Answer(0, error=str(exc)))
            except Exception as exc:
                log.exception("catalog lookup failed")
                _emit(self._bridge.resolved, _Answer(0, error=f"The lookup failed: {exc}"))

        self._jobs.submit(job)

    # -- answers --------------------------------------------------------------------------

    def _start(self) -> None:
        self._busy += 1
        self._update_buttons()

    def _end(self) -> None:
        self._busy = max(0, self._busy - 1)
        self._update_buttons()

    @Slot(object)
    def _on_searched(self, answer: object) -> None:
        self._end()
        if not isinstance(answer, _Answer) or answer.token != self._search_token:
            return
        if answer.error:
            self._set_status(answer.error, error=True)
            return
        self._results = list(answer.value or [])
        self._fill_repos()
        if not self._results:
            self._set_status("No GGUF repository matches this search.")
        else:
            self._set_status(f"{len(self._results)} repositories.")

    def _fill_repos(self) -> None:
        table = self.repo_table
        table.blockSignals(True)
        try:
            table.clearContents()
            table.setRowCount(len(self._results))
            for row, r in enumerate(self._results):
                cells = [
                    r.repo_id,
                    _count(r.downloads),
                    _count(r.likes),
                    r.license or "?",
                    _access(r.gated, r.private),
                ]
                tip = f"{r.downloads:,} downloads, {r.likes:,} likes"
                if r.last_modified is not None:
                    tip += f", updated {r.last_modified:%Y-%m-%d}"
                for col, text in enumerate(cells):
                    item = QTableWidgetItem(text)
                    item.setToolTip(tip)
                    if col in (1, 2):
                        item.setTextAlignment(
                            Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
                        )
                    table.setItem(row, col, item)
        finally:
            table.blockSignals(False)
        self._details = None
        self.files_tree.clear()
        self.repo_label.setText("Choose a repository to see its files.")

    @Slot()
    def _on_repo_selected(self) -> None:
        rows = self.repo_table.selectionModel().selectedRows()
        if not rows or not 0 <= rows[0].row() < len(self._results):
            return
        repo_id = self._results[rows[0].row()].repo_id
        self._details_token += 1
        token = self._details_token
        self._details = None
        self._fits = []
        self._recommended = None
        self.files_tree.clear()
        self.fit_label.setText("")
        self._plans = []
        self.repo_label.setText(f"<b>{html.escape(repo_id)}</b>: reading the file list…")
        settings = self._context_settings() if self._context_settings is not None else None
        self._start()

        def job() -> None:
            try:
                client = make_client()
                details = client.details(repo_id)
            except HubError as exc:
                _emit(self._bridge.detailed, _Answer(token, error=str(exc)))
                return
            except Exception as exc:
                log.exception("listing failed")
                _emit(self._bridge.detailed, _Answer(token, error=f"The listing failed: {exc}"))
                return
            rough = [estimate(e.size, None, settings=settings) for e in details.entries]
            _emit(self._bridge.detailed, _Answer(token, (details, rough)))
            # The header of the smallest file (its first MB) says the architecture; the
            # context's cost is the same for every quantization of the model.
            smallest = min(details.entries, key=lambda e: e.size)
            try:
                info = client.remote_model_info(repo_id, smallest, details.revision)
                fits = [estimate(e.size, info, settings=settings) for e in details.entries]
            except Exception as exc:  # the size-based estimate stays
                log.info("no header for %s: %s", repo_id, exc)
                fits, info = rough, None
            _emit(self._bridge.fitted, _Answer(token, fits))
            if info is not None:  # where each file's layers would go (issue 22)
                plans = device_plans([e.size for e in details.entries], info, settings)
                _emit(self._bridge.planned, _Answer(token, plans))

        self._jobs.submit(job)
        self._busy += 1  # the header read answers separately

    @Slot(object)
    def _on_detailed(self, answer: object) -> None:
        self._end()
        if isinstance(answer, _Answer) and answer.error:
            self._end()  # no header read follows
        if not isinstance(answer, _Answer) or answer.token != self._details_token:
            return
        if answer.error:
            self.repo_label.setText(html.escape(answer.error))
            self._set_status(answer.error, error=True)
            return
        details, fits = answer.value
        self._details = details
        lic = details.license or "unknown"
        access = _access(details.gated, details.private)
        text = f"<b>{html.escape(details.repo_id)}</b> · licence {html.escape(lic)} · {html.escape(access)}"
        if details.gated:
            text += (
                "<br>This repository is gated: accept the licence on its Hugging Face page, "
                "then add a token in Settings → Preferences → Hugging Face."
            )
        if details.incomplete_splits:
            text += "<br>Left out (parts missing): " + html.escape(
                ", ".join(details.incomplete_splits)
            )
        self.repo_label.setText(text)
        self._show_fits(fits)

    @Slot(object)
    def _on_fitted(self, answer: object) -> None:
        self._end()
        if not isinstance(answer, _Answer) or answer.token != self._details_token:
            return
        if self._details is not None:
            self._show_fits(answer.value)

    def _show_fits(self, fits: list[FitEstimate]) -> None:
        details = self._details
        if details is None:
            return
        selected = self.selected_entry()
        self._fits = list(fits)
        sizes = [e.size for e in details.entries]
        self._recommended = recommend(sizes, lambda i: self._fits[i]) if self._fits else None
        tree = self.files_tree
        tree.blockSignals(True)
        try:
            tree.clear()
            groups: dict[str, QTreeWidgetItem] = {}
            for i, entry in enumerate(details.entries):
                group = groups.get(entry.quant)
                if group is None:
                    group = QTreeWidgetItem([entry.quant, "", ""])
                    group.setFlags(group.flags() & ~Qt.ItemFlag.ItemIsSelectable)
                    groups[entry.quant] = group
                    tree.addTopLevelItem(group)
                fit = self._fits[i] if i < len(self._fits) else None
                verdict: str = fit.verdict if fit is not None else "?"
                label = Path(entry.name).name
                if entry.is_split:
                    label += f" ({len(entry.files)} parts)"
                if i == self._recommended:
                    verdict = f"★ recommended · {verdict}"
                item = QTreeWidgetItem([label, format_bytes(entry.size), verdict])
                item.setData(0, _ENTRY_ROLE, i)
                item.setToolTip(0, entry.name)
                if fit is not None:
                    item.setToolTip(2, fit.sentence)
                    palette = colors(self)
                    tone = {"fits": palette.ok, "tight": palette.warn}.get(fit.verdict)
                    item.setForeground(2, QColor(tone or palette.error))
                if i == self._recommended:
                    font = QFont(tree.font())
                    font.setBold(True)
                    for col in range(len(FILE_COLUMNS)):
                        item.setFont(col, font)
                group.addChild(item)
                if selected is not None and entry.name == selected.name:
                    tree.setCurrentItem(item)
            tree.expandAll()
        finally:
            tree.blockSignals(False)
        if selected is None and self._recommended is not None:
            for item in self._entry_items():
                if item.data(0, _ENTRY_ROLE) == self._recommended:
                    tree.setCurrentItem(item)
        self._update_buttons()

    @Slot(object)
    def _on_resolved(self, answer: object) -> None:
        self._end()
        if not isinstance(answer, _Answer):
            return
        if answer.error:
            self._set_status(answer.error, error=True)
            return
        repo_id, entry = answer.value
        self._enqueue(repo_id, entry, "main")

    def _enqueue(self, repo_id: str, entry: GGUFEntry, revision: str) -> None:
        try:
            self.downloads.enqueue(repo_id, entry, revision)
        except HubError as exc:
            self._set_status(str(exc), error=True)
            return
        self._set_status(f"Downloading {Path(entry.name).name} into the model library…")

    # -- helpers --------------------------------------------------------------------------

    def _entry_items(self) -> list[QTreeWidgetItem]:
        out: list[QTreeWidgetItem] = []
        for i in range(self.files_tree.topLevelItemCount()):
            group = self.files_tree.topLevelItem(i)
            if group is None:
                continue
            for j in range(group.childCount()):
                child = group.child(j)
                if child is not None:
                    out.append(child)
        return out

    @Slot()
    def _update_buttons(self) -> None:
        entry = self.selected_entry()
        self.download_button.setEnabled(entry is not None)
        if entry is None:
            self.fit_label.setText("")
            return
        index = self._details.entries.index(entry) if self._details is not None else -1
        fit = self._fits[index] if 0 <= index < len(self._fits) else None
        text = f"{Path(entry.name).name}, {format_bytes(entry.size)}."
        if fit is not None:
            basis = "" if fit.basis == "header" else " (from the file size; header not read)"
            text += f" {fit.sentence}{basis}"
        if 0 <= index < len(self._plans):
            text += f" Plan: {self._plans[index]}."
        self.fit_label.setText(text)

    @Slot(object)
    def _on_planned(self, answer: object) -> None:
        if isinstance(answer, _Answer) and answer.token == self._details_token:
            self._plans = list(answer.value)
            self._update_buttons()

    def _set_status(self, text: str, error: bool = False) -> None:
        self.status_label.setText(text)
        self.status_label.setStyleSheet(f"color: {colors(self).error};" if error else "")
