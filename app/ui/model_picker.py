"""The model picker in the main window's toolbar: which model is loaded, and a menu of the
library's models (file names told apart), the bundled demo model (always listed), load /
unload, "Discover…" and the model manager.

It never loads anything itself: it emits :attr:`ModelPicker.loadRequested` and friends;
the window reports the state back with :meth:`ModelPicker.set_state`. Listing reads the
library's cached rows on the GUI thread (no header is read here).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import Signal, Slot
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMenu, QToolButton, QWidget

from app import paths
from app.storage import Database, StorageError
from app.ui.model_table import folder_hints

__all__ = ["ModelPicker", "PickerEntry"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PickerEntry:
    label: str  # "Name · file.gguf"
    path: str
    usable: bool
    demo: bool = False


def _key(path: str) -> str:
    try:
        return os.path.normcase(os.path.realpath(path))
    except (OSError, ValueError):
        return os.path.normcase(os.path.abspath(path))


class ModelPicker(QToolButton):
    loadRequested = Signal(str)
    unloadRequested = Signal()
    discoverRequested = Signal()
    managerRequested = Signal()
    fileRequested = Signal()

    def __init__(self, db: Database, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("model-picker")
        self._db = db
        self._loaded: str | None = None
        self._loading: str | None = None
        self._loaded_name: str | None = None
        self.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.setToolButtonStyle(self.toolButtonStyle())
        self._menu = QMenu(self)
        self._menu.setObjectName("model-picker-menu")
        self._menu.aboutToShow.connect(self.rebuild)
        self.setMenu(self._menu)
        self.rebuild()
        self._update_text()

    # -- state ------------------------------------------------------------------------------

    def set_state(
        self, loaded: str | None, loading: str | None = None, name: str | None = None
    ) -> None:
        self._loaded, self._loading, self._loaded_name = loaded, loading, name
        self._update_text()
        self.rebuild()

    def entries(self) -> list[PickerEntry]:
        """The demo model first, then the library's models (by name)."""
        out: list[PickerEntry] = []
        demo = paths.demo_model_path()
        out.append(
            PickerEntry(
                "LlamaDesk demo model (bundled)"
                + ("" if demo.is_file() else " — missing from this installation"),
                str(demo),
                demo.is_file(),
                demo=True,
            )
        )
        seen = {_key(str(demo))}
        try:
            models = self._db.list_models()
        except StorageError as exc:
            log.info("library not listed: %s", exc)
            models = []
        hints = folder_hints([entry.path for entry in models])  # one file name, two folders
        for entry in models:
            if _key(entry.path) in seen:
                continue
            seen.add(_key(entry.path))
            meta = entry.metadata if entry.error is None else None
            name = str(meta.get("name") or "") if meta else ""
            label = f"{name} · {entry.name}" if name else entry.name
            if hint := hints.get(entry.path):
                label += f" in {hint}"
            if meta is None:
                label += " (cannot be used)"
            out.append(PickerEntry(label, entry.path, meta is not None))
        return out

    def actions_by_text(self) -> dict[str, QAction]:
        return {a.text(): a for a in self._menu.actions() if not a.isSeparator()}

    # -- menu -------------------------------------------------------------------------------

    @Slot()
    def rebuild(self) -> None:
        menu = self._menu
        menu.clear()
        loaded = _key(self._loaded) if self._loaded else None
        for entry in self.entries():
            action = menu.addAction(entry.label)
            action.setCheckable(True)
            action.setChecked(loaded is not None and _key(entry.path) == loaded)
            action.setEnabled(entry.usable and self._loading is None)
            action.setToolTip(entry.path)
            action.setData(entry.path)
            action.triggered.connect(lambda _c=False, p=entry.path: self._pick(p))
        menu.addSeparator()
        unload = menu.addAction("Unload the model")
        unload.setObjectName("picker-unload")
        unload.setEnabled(self._loaded is not None and self._loading is None)
        unload.triggered.connect(self.unloadRequested)
        menu.addSeparator()
        discover = menu.addAction("Discover…")
        discover.setObjectName("picker-discover")
        discover.triggered.connect(self.discoverRequested)
        add = menu.addAction("Load a model file…")
        add.triggered.connect(self.fileRequested)
        # "…": it opens a window of its own (the model manager dialog)
        manager = menu.addAction("Model manager…")
        manager.setObjectName("picker-manager")
        manager.setToolTip("Every model in your library: load, add files and folders.")
        manager.triggered.connect(self.managerRequested)

    def _pick(self, path: str) -> None:
        if self._loaded is not None and _key(path) == _key(self._loaded):
            return
        self.loadRequested.emit(path)

    def _update_text(self) -> None:
        if self._loading:
            text = f"Loading {Path(self._loading).name}…"
        elif self._loaded:
            text = f"Model: {self._loaded_name or Path(self._loaded).name}"
        else:
            text = "Load a model"
        self.setText(text)  # the style draws the menu's arrow (a "▾" here made two)
        self.setToolTip(self._loaded or "Choose the model to chat with.")
