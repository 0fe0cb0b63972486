"""The main window's models: the picker and the no-model banner, load and unload, the model
manager, a model file chosen or dropped, and what follows a model loading or going."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import (
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QToolBar,
    QToolButton,
)

from app import paths
from app.engine import ContextSettings
from app.errors import LlamaDeskError
from app.session import ContextFullPolicy, LoadedModel
from app.ui.engines_models import EnginesPicker, down_note, engine_note
from app.ui.model_picker import ModelPicker

if TYPE_CHECKING:
    from app.ui.model_manager import ModelManager
    from app.ui.model_manager_dialog import ModelManagerDialog
    from app.ui.window_protocols import ModelsWindow

log = logging.getLogger(__name__)


class WindowModels:
    """Which model ``win`` has loaded (or is loading), and the ways to choose one
    (``window``: the window as the parent of its dialogs, the holder of its toolbar)."""

    def __init__(self, win: ModelsWindow, window: QMainWindow) -> None:
        self.win = win
        self.window = window
        self.loading_path: str | None = None
        self._model_manager: ModelManager | None = None
        self.models_dialog: ModelManagerDialog | None = None
        self._file_dialog: QFileDialog | None = None
        self.engine_down = ""  # why the last remote model did not load (the tabs say it)

    def build_no_model_banner(self) -> QFrame:
        """Shown over the chats while no model is loaded (Send is disabled then)."""
        banner = QFrame()
        banner.setObjectName("no-model-banner")
        row = QHBoxLayout(banner)
        row.setContentsMargins(8, 4, 8, 4)
        label = QLabel("No model is loaded, so chats cannot be answered.")
        self.banner_button = QToolButton()
        self.banner_button.setObjectName("load-a-model")
        self.banner_button.setText("Load a model ▾")
        self.banner_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        row.addWidget(label)
        row.addWidget(self.banner_button)
        row.addStretch(1)
        banner.setVisible(False)
        self.no_model_banner = banner
        return banner

    def build_picker(self) -> ModelPicker:
        """The model picker in the toolbar (its menu is the banner button's too)."""
        win = self.win
        # local files and the Engines' connections' models together
        self.model_picker = EnginesPicker(win.db, win.app_settings)
        self.model_picker.loadRequested.connect(win.load_model)
        self.model_picker.unloadRequested.connect(win.unload_model)
        self.model_picker.discoverRequested.connect(win.show_discover)
        self.model_picker.managerRequested.connect(win.show_model_manager)
        self.model_picker.fileRequested.connect(win.choose_model_file)
        self.banner_button.setMenu(self.model_picker.menu())
        toolbar = QToolBar("Model")
        toolbar.setObjectName("model-toolbar")
        toolbar.setMovable(False)
        toolbar.addWidget(self.model_picker)
        self.window.addToolBar(Qt.ToolBarArea.TopToolBarArea, toolbar)
        return self.model_picker

    def demo_loaded(self) -> bool:
        path = self.win.model_path()
        return path is not None and Path(path) == paths.demo_model_path()

    def load_model(self, path: str, *, safe: bool = False) -> None:
        """Load ``path``; ``safe``: without llama.cpp's extra CPU buffer types (the way
        out after a crash, app/ui/window_crash.py)."""
        win = self.win
        if self.loading_path is not None:
            return
        for tab in win.tabs():
            if tab.generating:
                win.session.stop(tab.cid)
        self.loading_path = path
        win.load_bar.setValue(0)
        win.show_loading(True)
        self.engine_down = ""
        win.model_label.setText(f"Loading {Path(path).name}…")
        if self._model_manager is not None:
            self._model_manager.set_loading(path, 0.0)
        win.session.load_model(
            path,
            ContextSettings.from_dict(dict(win.app_settings.context)),
            ContextFullPolicy.parse(win.context_policy()) or ContextFullPolicy.SHIFT,
            # its chat template and devices
            model_settings=replace(win.model_settings_for(path), use_extra_bufts=not safe),
        )
        win.update_stack()

    def unload_model(self) -> None:
        win = self.win
        for tab in win.tabs():
            if tab.generating:
                win.session.stop(tab.cid)
        win.session.unload_model()

    def sync_picker(self) -> None:
        win = self.win
        name = win.model.info.display_name if win.model is not None else None
        self.model_picker.set_state(win.model_path(), self.loading_path, name)
        self.sync_engine_notes()

    def sync_engine_notes(self) -> None:
        """Each tab says which machine answers (or that the remote one did not)."""
        win = self.win
        note = engine_note(win.app_settings, win.model) if win.model else self.engine_down
        for tab in win.tabs():
            if tab.info.engine != note:
                tab.show_figures(replace(tab.info, engine=note))

    def choose_model_file(self) -> None:
        from app.ui.model_manager import start_folder

        dialog = QFileDialog(self.window, "Choose a GGUF model file", str(start_folder()))
        dialog.setNameFilter("GGUF models (*.gguf);;All files (*)")
        dialog.setFileMode(QFileDialog.FileMode.ExistingFile)
        dialog.fileSelected.connect(self.model_file_chosen)
        self._file_dialog = dialog
        dialog.open()

    def model_file_chosen(self, path: str) -> None:
        if not path:
            return
        try:
            from app.ui.model_manager import read_metadata, remember_folder

            remember_folder(Path(path).parent)

            self.win.db.add_model_file(path, read_metadata)
        except (ImportError, LlamaDeskError) as exc:
            log.info("not added to the library: %s", exc)
        if self._model_manager is not None:
            self._model_manager.refresh()
        self.win.load_model(path)

    def model_manager(self) -> ModelManager | None:
        win = self.win
        if self._model_manager is None:
            try:
                from app.ui.model_manager import ModelManager
                from app.ui.model_manager_dialog import ModelManagerDialog
            except ImportError as exc:
                log.warning("model manager unavailable: %s", exc)
                return None
            manager = ModelManager(win.db)
            manager.set_plan_context(
                lambda: ContextSettings.from_dict(dict(win.app_settings.context))
            )
            manager.loadRequested.connect(win.load_model)
            manager.unloadRequested.connect(win.unload_model)
            manager.cancelLoadRequested.connect(win.session.cancel_load)
            manager.scanFinished.connect(self.sync_picker)
            manager.set_loaded(win.model_path())
            if self.loading_path:
                manager.set_loading(self.loading_path, win.load_bar.value() / 1000)
            self.models_dialog = ModelManagerDialog(manager, self.window)
            self._model_manager = manager
        return self._model_manager

    def show_model_manager(self) -> None:
        if self.model_manager() is None or self.models_dialog is None:
            self.choose_model_file()
            return
        self.models_dialog.show()
        self.models_dialog.raise_()
        self.models_dialog.activateWindow()

    def add_model_files(self, files: list[str]) -> None:
        """Add GGUF files to the library (their headers are read in the background)."""
        win = self.win
        manager = self.model_manager()
        if manager is None or win.read_only:
            win.show_message("The model library cannot be changed (it is open read-only).")
            return
        manager.add_files(files)
        self.window.statusBar().showMessage(
            "Added to the library: " + ", ".join(Path(f).name for f in files), 5000
        )

    @staticmethod
    def dropped_models(event: QDragEnterEvent | QDropEvent) -> list[str]:
        mime = event.mimeData()
        if not mime.hasUrls():
            return []
        return [
            url.toLocalFile()
            for url in mime.urls()
            if url.isLocalFile() and url.toLocalFile().lower().endswith(".gguf")
        ]

    # ---------------------------------------------------------------- session events

    def on_model_loaded(self, model: LoadedModel) -> None:
        win = self.win
        win.model = model
        self.loading_path = None
        win.show_loading(False)
        path = model.path
        win.app_settings.last_model_path = path
        win.save_app_settings()
        if not win.read_only:
            try:
                win.db.mark_used(path)
            except LlamaDeskError:
                pass
        win.update_model_labels()
        support = win.reasoning_support()
        for tab in win.tabs():  # the session bound every open conversation again
            tab.model_changed()  # notices about the model before no longer apply
            tab.show_intro()  # the model, its context and template
            tab.set_reasoning_support(*support)
        if self._model_manager is not None:
            self._model_manager.set_loading(None, 0.0)
            self._model_manager.set_loaded(path)
        panel = win.settings_panel()
        if panel is not None:
            panel.set_loaded_model(model)
            panel.set_settings(win.current_context_settings())
            panel.set_presets(win.presets())
        win.update_stack()

    def on_model_unloaded(self) -> None:
        win = self.win
        win.model = None
        for tab in win.tabs():
            tab.model_changed()
            tab.show_figures(tab.info.unloaded())
            tab.set_reasoning_support(False, False)
            # a reply that was streaming ended (stopped, recorded by the session) before this
        win.update_model_labels()
        if self._model_manager is not None:
            self._model_manager.set_loaded(None)
        panel = win.settings_panel()
        if panel is not None:
            panel.set_loaded_model(None)
        win.update_stack()

    def on_load_progress(self, fraction: float) -> None:
        self.win.load_bar.setValue(int(fraction * 1000))
        if self._model_manager is not None and self.loading_path:
            self._model_manager.set_loading(self.loading_path, fraction)

    def on_load_failed(self, path: str, message: str) -> None:
        win = self.win
        self.loading_path = None
        win.show_loading(False)
        win.update_model_labels()
        win.show_message(message)
        self.engine_down = down_note(win.app_settings, path)  # a local file: ""
        if self._model_manager is not None:
            self._model_manager.set_loading(None, 0.0)
            self._model_manager.show_error(path, message)
        win.update_stack()
