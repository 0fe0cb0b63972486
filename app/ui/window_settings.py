"""The main window's settings: the context-settings panel (its presets, "Stop all and
apply"), the preferences dialog, the theme, and saving the app settings."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QMainWindow

from app.engine import ContextSettings, Engine, ModelInfo
from app.engine.chat_template import TemplateChoice, user_template_problem
from app.engine.settings import ModelSettings
from app.engine.threads import clamp_threads
from app.errors import LlamaDeskError
from app.session import LoadedModel
from app.storage import save_settings
from app.ui.devices_settings import load_device_settings
from app.ui.text_completion import engine_template
from app.ui.theme import THEMES, apply_theme, current_theme

if TYPE_CHECKING:
    from app.ui.preferences import PreferencesDialog
    from app.ui.settings_panel import SettingsPanel
    from app.ui.window_protocols import SettingsWindow


def saved_thread_notes(path: Path) -> list[str]:
    """What the window says of thread counts under 1 in the settings file (the loader
    used them as 1, with :func:`~app.engine.threads.clamp_threads`, whose sentence this
    is): one sentence, however many of the counts were under 1."""
    try:
        context = json.loads(path.read_text(encoding="utf-8")).get("context")
    except (OSError, ValueError, AttributeError):
        return []  # no file, or one the loader already said it could not read
    notes: list[str] = []
    for name in ("n_threads", "n_threads_batch"):
        value = context.get(name) if isinstance(context, dict) else None
        if isinstance(value, int) and not isinstance(value, bool):
            note = clamp_threads(value)[1]
            if note is not None and note not in notes:
                notes.append(note)
    return notes


class WindowSettings:
    """The settings dialogs of ``win`` and what applying them changes (``window``: the
    window as their parent, and its status bar)."""

    def __init__(self, win: SettingsWindow, window: QMainWindow) -> None:
        self.win = win
        self.window = window
        self.panel: SettingsPanel | None = None
        self.preferences: PreferencesDialog | None = None
        self._pending_settings: ContextSettings | None = None
        self._pending_deadline = 0.0

    def save_settings(self) -> None:
        try:
            save_settings(self.win.app_settings)
        except LlamaDeskError as exc:
            self.win.show_message(str(exc))

    # ---------------------------------------------------------------- the chat template

    def model_settings_for(self, path: str) -> ModelSettings:
        """The model settings a load of ``path`` gets: its stored chat template (a stored
        choice that cannot be used any more, a moved file, is said and dropped)."""
        win = self.win
        value = win.app_settings.model_chat_templates.get(path, "")
        problem = user_template_problem(engine_template(value))  # raw: the automatic one
        if problem is not None:
            win.show_message(f"{problem} The model gets its automatic template.")
            self._store_template(path, "")
            value = ""
        # the devices section's choices (app/ui/devices_settings) with this model's template
        return dataclasses.replace(
            load_device_settings().model_settings(), chat_template=engine_template(value)
        )

    def template_value(self, path: str) -> str:
        return self.win.app_settings.model_chat_templates.get(path, "")

    def _store_template(self, path: str, value: str) -> None:
        templates = dict(self.win.app_settings.model_chat_templates)
        if value:
            templates[path] = value
        else:
            templates.pop(path, None)
        self.win.app_settings.model_chat_templates = templates
        self.save_settings()

    def choose_chat_template(self, value: str) -> None:
        """The user's template for the loaded model (a bundled name, a file, "":
        automatic): checked, kept for the model file, used from the next reply on."""
        win = self.win
        if win.model is None:
            return
        problem = user_template_problem(engine_template(value))  # raw: the automatic one
        if problem is not None:
            win.show_message(problem)
            self.sync_template_picker()
            return
        path = win.model.path
        self._store_template(path, value)

        def use(engine: Engine) -> TemplateChoice:
            return engine.set_chat_template(engine_template(value))

        win.worker.call(use, lambda result: self._template_set(path, result))

    def _template_set(self, path: str, result: TemplateChoice | BaseException) -> None:
        win = self.win
        if isinstance(result, BaseException):
            win.show_message(str(result))
        elif win.model is not None and win.model.path == path:
            win.model = dataclasses.replace(win.model, chat_template=result)
            win.model_changed()
        self.sync_template_picker()

    def sync_template_picker(self) -> None:
        panel, model = self.panel, self.win.model
        if panel is not None:
            value = self.template_value(model.path) if model is not None else ""
            panel.template_picker.set_model(
                model.chat_template if model is not None else None, value
            )

    # ---------------------------------------------------------------- context settings

    def current_context_settings(self) -> ContextSettings:
        win = self.win
        if win.model is not None:
            return win.model.settings
        return ContextSettings.from_dict(win.app_settings.context)

    def model_info(self) -> ModelInfo | None:
        return self.win.model.info if self.win.model is not None else None

    def presets(self) -> dict[str, dict[str, Any]]:
        win = self.win
        path = win.model_path()
        if path is None:
            return {}
        try:
            return {p.name: dict(p.settings) for p in win.db.get_presets(path)}
        except LlamaDeskError as exc:
            win.show_message(str(exc))
            return {}

    def open_settings(self) -> None:
        win = self.win
        if self.panel is not None:
            self.panel.show()
            self.panel.raise_()
            self.panel.activateWindow()
            return
        try:
            from app.ui.settings_panel import SettingsPanel
        except ImportError as exc:
            win.show_message(f"The settings panel is not available ({exc}).")
            return
        panel = SettingsPanel(
            self.current_context_settings(),
            self.model_info(),
            self.presets(),
            self.window,
            loaded=win.model,
        )
        panel.set_generating(win.any_generating())
        panel.template_value = self.template_value
        panel.template_picker.chosen.connect(self.choose_chat_template)
        panel.applyRequested.connect(self.apply_settings)
        panel.presetSaveRequested.connect(self.save_preset)
        panel.presetDeleteRequested.connect(self.delete_preset)
        panel.finished.connect(self.settings_closed)
        self.panel = panel
        self.sync_template_picker()
        panel.open()

    def settings_closed(self, _result: int) -> None:
        panel, self.panel = self.panel, None
        if panel is not None:
            panel.deleteLater()

    def apply_settings(self, settings: object) -> None:
        win = self.win
        if not isinstance(settings, ContextSettings):
            return
        panel = self.panel
        if win.model is None:
            win.app_settings.context = settings.to_dict()
            self.save_settings()
            if panel is not None:
                panel.set_applying(False)
                panel.set_settings(settings)
            return
        if self.current_context_settings().needs_rebuild(settings) and win.any_generating():
            # "Stop all and apply": the engine rebuilds no context while replies are being
            # written; stop them (their text so far is kept) and apply once all have ended.
            if panel is not None:
                panel.set_applying(True, "Stopping the replies, then rebuilding the context…")
            self._pending_settings = settings
            self._pending_deadline = time.monotonic() + 10.0
            win.session.stop(None)
            QTimer.singleShot(50, self.window, self.apply_when_idle)
            return
        if panel is not None:
            panel.set_applying(True, "Saving the tabs' caches and rebuilding the context…")
        win.session.reconfigure(settings)

    def apply_when_idle(self) -> None:
        settings = self._pending_settings
        if settings is None:
            return
        if self.win.any_generating():
            if time.monotonic() < self._pending_deadline:
                QTimer.singleShot(50, self.window, self.apply_when_idle)
                return
            self._pending_settings = None
            if self.panel is not None:
                self.panel.show_failed("The replies did not stop within 10 seconds.")
            return
        self._pending_settings = None
        if self.panel is not None:
            self.panel.set_applying(True, "Saving the tabs' caches and rebuilding the context…")
        self.win.session.reconfigure(settings)

    def on_reconfigured(self, model: LoadedModel) -> None:
        win = self.win
        win.model = model
        win.app_settings.context = model.settings.to_dict()
        self.save_settings()
        win.update_model_labels()
        panel = self.panel
        if panel is not None:
            panel.show_applied(model)
        self.window.statusBar().showMessage("Context settings applied; every tab was kept.", 5000)

    def on_reconfigure_failed(self, message: str) -> None:
        panel = self.panel
        if panel is not None:
            panel.show_failed(message)
        else:
            self.win.show_message(message)

    def save_preset(self, name: str, settings: dict[str, Any]) -> None:
        path = self.win.model_path()
        if path is None:
            if self.panel is not None:
                self.panel.show_error("Load a model first: presets belong to a model.")
            return
        try:
            self.win.db.save_preset(path, name, settings)
        except LlamaDeskError as exc:
            if self.panel is not None:
                self.panel.show_error(str(exc))
            return
        if self.panel is not None:
            self.panel.set_presets(self.presets())

    def delete_preset(self, name: str) -> None:
        path = self.win.model_path()
        if path is None:
            return
        try:
            self.win.db.delete_preset(path, name)
        except LlamaDeskError as exc:
            self.win.show_message(str(exc))
        if self.panel is not None:
            self.panel.set_presets(self.presets())

    # ---------------------------------------------------------------- preferences, theme

    def open_preferences(self) -> PreferencesDialog:
        if self.preferences is not None:
            self.preferences.raise_()
            self.preferences.activateWindow()
            return self.preferences
        from app.ui.preferences import open_preferences

        win = self.win
        dialog = open_preferences(
            self.window, win.app_settings, self.apply_preferences, state_usage=win.store.total_bytes
        )
        dialog.finished.connect(self.on_preferences_closed)
        self.preferences = dialog
        return dialog

    def on_preferences_closed(self, _result: int) -> None:
        self.preferences = None

    def apply_preferences(self, change: object) -> None:
        """The dialog wrote ``app_settings`` and saved it; what the window shows follows.
        (Restoring tabs and the defaults of new chats are read when used; the Hub endpoint
        and token at each request.)"""
        from app.ui.preferences import PreferencesChange

        if not isinstance(change, PreferencesChange):
            return
        win = self.win
        new, changed = change.new, change.changed
        if "theme" in changed:
            win.theme_actions[new.theme].setChecked(True)
            apply_theme(new.theme)
        if "font_size" in changed:
            for tab in win.tabs():
                tab.set_font_size(new.font_size)
        if "send_with_enter" in changed:
            for tab in win.tabs():
                tab.composer.set_enter_sends(new.send_with_enter)
            win.sync_send()
        if "state_quota_bytes" in changed:
            win.store.quota_bytes = new.state_quota_bytes  # applies at the next save

    def set_theme(self, theme: str) -> None:
        """System, light or dark: applied at once and remembered."""
        if theme not in THEMES:
            return
        win = self.win
        action = win.theme_actions.get(theme)
        if action is not None and not action.isChecked():
            action.setChecked(True)
        if theme == win.app_settings.theme and theme == current_theme():
            return
        win.app_settings.theme = theme  # type: ignore[assignment]
        apply_theme(theme)
        self.save_settings()
