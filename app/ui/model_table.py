"""The model manager's table of models: its columns, one row per file (metadata and the
fit verdict, or why a broken file cannot be used), and the status column (loaded, loading,
failed to load)."""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePath
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QFont
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableWidget, QTableWidgetItem

from app.engine.metadata import ModelInfo
from app.storage import ModelEntry
from app.ui.settings_panel import format_bytes

__all__ = [
    "BROKEN_ROLE",
    "COLUMNS",
    "PATH_ROLE",
    "fill_row",
    "folder_hints",
    "model_name",
    "new_model_table",
    "recolor_broken_rows",
    "same_file_key",
    "show_status",
    "shown_names",
]

COLUMNS = (
    "Name",
    "Architecture",
    "Parameters",
    "Quantization",
    "Size",
    "Trained context",
    "Chat template",
    "Last used",
    "Fit",
    "File",
    "Status",
)
_COL_NAME, _COL_FIT, _COL_FILE, _COL_STATUS = (
    0,
    len(COLUMNS) - 3,
    len(COLUMNS) - 2,
    len(COLUMNS) - 1,
)
PATH_ROLE = Qt.ItemDataRole.UserRole
BROKEN_ROLE = Qt.ItemDataRole.UserRole + 1


def same_file_key(path: str) -> str:
    try:
        return os.path.normcase(os.path.realpath(os.path.expanduser(path)))
    except (OSError, ValueError):
        return os.path.normcase(os.path.abspath(path))


def model_name(entry: ModelEntry) -> str:
    """The name a model is listed by: its metadata's name, else the file's stem (a file
    that cannot be read: its file name)."""
    if entry.error is not None or entry.metadata is None:
        return entry.name
    return str(entry.metadata.get("name") or "") or Path(entry.path).stem


def folder_hints(paths: Sequence[str]) -> dict[str, str]:
    """Files of one name in different folders -> the end of each one's folder that tells
    them apart (``models/old``); a file whose name no other file has is absent."""
    by_file: dict[str, list[str]] = {}
    for path in paths:
        by_file.setdefault(os.path.normcase(PurePath(path).name), []).append(path)
    hints: dict[str, str] = {}
    for group in by_file.values():
        if len(group) < 2:
            continue
        parents = [PurePath(path).parent.parts for path in group]
        depth = 1
        while depth < max(len(p) for p in parents) and len({p[-depth:] for p in parents}) < len(
            parents
        ):
            depth += 1
        for path, parts in zip(group, parents, strict=True):
            hints[path] = str(PurePath(*parts[-depth:])) if parts else ""
    return hints


def shown_names(entries: Sequence[ModelEntry]) -> dict[str, str]:
    """Path -> the text of its Name cell: the model's name; where two entries share it,
    its file name too ("Gemma 3 · gemma-3-Q4_K_M.gguf"), and where the file names are the
    same as well, the folder that tells them apart ("… · gemma-3.gguf in models/old")."""
    names = {entry.path: model_name(entry) for entry in entries}
    counts = Counter(name.casefold() for name in names.values())
    hints = folder_hints([entry.path for entry in entries])
    shown: dict[str, str] = {}
    for entry in entries:
        name = names[entry.path]
        if counts[name.casefold()] < 2:
            shown[entry.path] = name
            continue
        detail = entry.name if entry.name != name else ""
        if hint := hints.get(entry.path):
            detail = f"{detail} in {hint}".strip()
        shown[entry.path] = f"{name} · {detail}" if detail else name
    return shown


def new_model_table() -> QTableWidget:
    """The empty table: whole rows selected one at a time, not editable."""
    table = QTableWidget(0, len(COLUMNS))
    table.setObjectName("modelTable")
    table.setHorizontalHeaderLabels(list(COLUMNS))
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.setAlternatingRowColors(True)
    table.setWordWrap(False)
    table.verticalHeader().hide()
    header = table.horizontalHeader()
    header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    header.setSectionResizeMode(_COL_NAME, QHeaderView.ResizeMode.Interactive)
    header.setStretchLastSection(True)
    header.resizeSection(_COL_NAME, 210)  # room for a model's name
    return table


def fill_row(
    table: QTableWidget,
    row: int,
    entry: ModelEntry,
    free_memory: Callable[[], int],
    error: QColor,
    name: str | None = None,
) -> None:
    """Row ``row`` for ``entry``: its details and fit against ``free_memory()`` bytes (asked
    for readable files only), or (a broken file) why it cannot be used, in the ``error``
    colour; the status cell is left empty. ``name``: the Name cell's text (default: the
    model's name; a library passes :func:`shown_names`, which tells equal names apart)."""
    meta = entry.metadata if entry.error is None and entry.metadata is not None else None
    name_item = QTableWidgetItem()
    name_item.setData(PATH_ROLE, entry.path)
    tip = entry.path
    name_item.setText(model_name(entry) if name is None else name)
    if meta is None:
        reason = entry.error or "This file's details could not be read."
        tip += f"\n\n{reason}"
        cells = [name_item, QTableWidgetItem(f"Cannot be used: {reason}")]
        cells[1].setToolTip(reason)
        cells[1].setForeground(error)
        cells[1].setData(BROKEN_ROLE, True)
        for col, item in enumerate(cells):
            table.setItem(row, col, item)
        for col in range(2, _COL_FILE):
            table.setItem(row, col, QTableWidgetItem())
        table.setSpan(row, 1, 1, _COL_FILE - 1)
        fit = None
    else:
        tip += f"\nFile: {entry.name}"
        values = [
            name_item,
            QTableWidgetItem(str(meta.get("architecture") or "?")),
            QTableWidgetItem(_params_label(meta)),
            QTableWidgetItem(str(meta.get("file_type") or "unknown")),
            QTableWidgetItem(format_bytes(entry.size)),
            QTableWidgetItem(_ctx_label(meta)),
            QTableWidgetItem("Yes" if meta.get("chat_template") else "No"),
            QTableWidgetItem(_when(entry.last_used)),
        ]
        if not meta.get("chat_template"):
            values[6].setToolTip(
                "No chat template in the file: LlamaDesk falls back to a generic format."
            )
        for col, item in enumerate(values):
            table.setItem(row, col, item)
        fit = _fit_item(entry.size, meta, free_memory(), error)
    if fit is not None:
        table.setItem(row, _COL_FIT, fit)
    name_item.setToolTip(tip)
    file_item = QTableWidgetItem(entry.name)  # two quantizations of one model differ here
    file_item.setToolTip(entry.path)
    table.setItem(row, _COL_FILE, file_item)
    table.setItem(row, _COL_STATUS, QTableWidgetItem())


def show_status(
    table: QTableWidget,
    entries: Sequence[ModelEntry],
    loaded_path: str | None,
    loading_path: str | None,
    load_errors: Mapping[str, str],
) -> None:
    """The status column (broken, loading, loaded in bold, failed to load) of every row;
    ``load_errors`` is keyed by :func:`same_file_key`."""
    loaded = same_file_key(loaded_path) if loaded_path else None
    loading = same_file_key(loading_path) if loading_path else None
    for row, entry in enumerate(entries):
        key = same_file_key(entry.path)
        item = table.item(row, _COL_STATUS)
        if item is None:
            continue
        font = QFont(table.font())
        if entry.error is not None or entry.metadata is None:
            text, tip = "Broken", entry.error or ""
        elif key == loading:
            text, tip = "Loading…", ""
        elif key == loaded:
            text, tip = "● Loaded", "This model is loaded."
            font.setBold(True)
        elif key in load_errors:
            text = "Failed to load"
            tip = load_errors[key]
        else:
            text, tip = "", ""
        item.setText(text)
        item.setToolTip(tip)
        for col in range(len(COLUMNS)):
            cell = table.item(row, col)
            if cell is not None:
                cell.setFont(font)


def recolor_broken_rows(table: QTableWidget, error: QColor) -> None:
    """Give the broken rows' "Cannot be used" cells the (new palette's) error colour."""
    for row in range(table.rowCount()):
        item = table.item(row, 1)
        if item is not None and item.data(BROKEN_ROLE):
            item.setForeground(error)


# -- formatting ------------------------------------------------------------------------


def _params_label(meta: Mapping[str, Any]) -> str:
    try:
        return ModelInfo.from_dict(dict(meta)).params_label
    except TypeError:  # metadata cached by another version: fall back to the raw count
        n = meta.get("n_params")
        return f"{n:,}" if isinstance(n, int) else "?"


def _ctx_label(meta: Mapping[str, Any]) -> str:
    n = meta.get("n_ctx_train")
    return f"{n:,}" if isinstance(n, int) and n > 0 else "?"


def _when(timestamp: float | None) -> str:
    if timestamp is None:
        return "Never"
    now = time.time()
    if now - timestamp < 60:
        return "Just now"
    local = time.localtime(timestamp)
    if time.strftime("%Y-%m-%d", local) == time.strftime("%Y-%m-%d", time.localtime(now)):
        return time.strftime("Today %H:%M", local)
    return time.strftime("%Y-%m-%d %H:%M", local)


def _fit_item(size: int, meta: Mapping[str, Any], free: int, error: QColor) -> QTableWidgetItem:
    """The fit verdict before loading: weights + what the engine would allocate for the
    default context (by architecture family) + a compute buffer, against free memory."""
    from app.hub.fit import estimate

    try:
        fit = estimate(size, ModelInfo.from_dict(dict(meta)), available=free)
    except (TypeError, ValueError, KeyError):  # metadata cached by another version
        fit = estimate(size, None, available=free)
    item = QTableWidgetItem(
        {"fits": "Fits", "tight": "Tight", "will not fit": "Will not fit"}[fit.verdict]
    )
    item.setToolTip(fit.sentence)
    if fit.verdict == "will not fit":
        item.setForeground(error)
    return item
