"""Settings -> Preferences…: how the app looks and behaves, separate from the context.

Five sections: General (theme, the chat's font size, which key sends, reopening tabs),
New conversations (default system prompt and sampling: the schema's editors and ranges,
the ones the chat's own controls use), Storage (the state-cache quota beside what is used
now), Hugging Face (the Hub's address for mirrors, the access token) and Engines (remote
servers, :mod:`app.ui.engines_page`; saved at once).

The dialog edits the window's own :class:`~app.storage.AppSettings`. OK and Apply check
every value (a sentence in the dialog names the first wrong one and nothing is changed),
write the values into that object, save ``settings.json`` and emit ``applied`` with a
:class:`PreferencesChange`; the window applies what changed (font, keys, theme, quota).
Cancel leaves everything as it was.

The token is not a setting: it goes to :class:`~app.hub.config.TokenStore` (the system
keyring, else a file only the user can read) on a background thread (a keyring may wait
for an unlock), the field is emptied at once, and from then on the dialog only says that a
token is saved, with Remove. It is never shown, logged or put in a message.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from PySide6.QtCore import QObject, Qt, Signal, Slot
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QRadioButton,
    QSpinBox,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.errors import LlamaDeskError
from app.hub import config
from app.settings_schema import SAMPLING_FIELDS, format_bytes
from app.storage.settings import (
    FONT_SIZE_MAX,
    FONT_SIZE_SYSTEM,
    AppSettings,
    Preferences,
    SamplingDefaults,
    Theme,
    save_settings,
)
from app.ui.background import BackgroundJobs
from app.ui.field_editors import make_editor, read_editor, tooltip, write_editor
from app.ui.mcp_page import McpPage
from app.ui.theme import THEME_LABELS, THEMES, colors

__all__ = ["PreferencesChange", "PreferencesDialog", "TokenState", "open_preferences"]

log = logging.getLogger(__name__)

_GIB = 1024**3
# The sampling defaults' fields with a spin box; ``stop`` (a list) has its own text box.
SAMPLING_EDITED: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(SamplingDefaults) if f.name != "stop"
)

# Token and disk work off the GUI thread; one thread for every dialog (it idles between).
_jobs = BackgroundJobs("preferences")


@dataclass(frozen=True)
class PreferencesChange:
    """What ``applied`` carries: the values before and after."""

    old: Preferences
    new: Preferences

    @property
    def changed(self) -> frozenset[str]:
        return self.new.changed(self.old)


@dataclass(frozen=True)
class TokenState:
    """What the dialog knows of the token (never the token itself)."""

    saved: bool
    where: str  # "the system keyring" or the file's path
    env: bool  # HF_TOKEN is set
    error: str | None = None


class _Bridge(QObject):
    """Lives on the GUI thread; the jobs emit through it (queued)."""

    token = Signal(object)  # TokenState
    usage = Signal(object)  # int bytes, or None


def _emit(signal: Any, value: object) -> None:
    try:
        signal.emit(value)
    except RuntimeError:  # the dialog is gone
        pass


class PreferencesDialog(QDialog):
    """See the module docstring.

    ``state_usage`` is called on a background thread for the bytes the state cache uses
    now (``StateStore.total_bytes``); ``token_store`` defaults to a :class:`TokenStore`
    made on that thread; ``save`` writes the settings (``save_settings``)."""

    applied = Signal(object)  # PreferencesChange

    def __init__(
        self,
        settings: AppSettings,
        parent: QWidget | None = None,
        *,
        state_usage: Callable[[], int] | None = None,
        token_store: config.TokenStore | None = None,
        save: Callable[[AppSettings], None] = save_settings,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("preferences")
        self.setWindowTitle("Preferences")
        self._settings = settings
        self._save = save
        self._store = token_store
        self._state_usage = state_usage
        self._token_state: TokenState | None = None
        self._remove_token = False  # Remove was clicked: the token goes at OK / Apply
        self._token_busy = 0
        self._close_when_done = False
        # name -> (what the editor showed, the stored value it stands for)
        self._shown: dict[str, tuple[Any, Any]] = {}
        self._bridge = _Bridge(self)
        self._bridge.token.connect(self._on_token_state)
        self._bridge.usage.connect(self._on_usage)
        self._build()
        self.show_preferences(Preferences.of(settings))
        self._ask_token_state()
        self._ask_usage()

    # -- construction ---------------------------------------------------------------------

    def _build(self) -> None:
        outer = QVBoxLayout(self)
        self.tabs = QTabWidget()
        self.tabs.setObjectName("preferences-sections")
        self.tabs.addTab(self._build_general(), "General")
        self.tabs.addTab(self._build_new_conversations(), "New conversations")
        self.tabs.addTab(self._build_storage(), "Storage")
        self.tabs.addTab(self._build_hub(), "Hugging Face")
        from app.ui.engines_page import EnginesPage  # remote engines (saved at once)

        self.engines_page = EnginesPage(self._settings, self._save)
        self.tabs.addTab(self.engines_page, "Engines")
        self.mcp_page = McpPage.for_window(self.parentWidget())  # saves on its own, not at OK
        self.tabs.addTab(self.mcp_page, "Tools (MCP)")
        outer.addWidget(self.tabs, 1)
        self.status = QLabel()
        self.status.setObjectName("preferences-status")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        outer.addWidget(self.status)
        self.buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok
            | QDialogButtonBox.StandardButton.Cancel
            | QDialogButtonBox.StandardButton.Apply
        )
        self.ok_button = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        self.apply_button = self.buttons.button(QDialogButtonBox.StandardButton.Apply)
        self.cancel_button = self.buttons.button(QDialogButtonBox.StandardButton.Cancel)
        self.ok_button.clicked.connect(self.accept)
        self.apply_button.clicked.connect(self.apply)
        self.cancel_button.clicked.connect(self.reject)
        outer.addWidget(self.buttons)
        # Wide enough for every section's tab: a narrower dialog hid "Tools (MCP)" behind
        # the tab bar's scroll arrows (a screen too small for it still gets the arrows).
        margins = outer.contentsMargins()
        wanted = self.tabs.tabBar().sizeHint().width() + margins.left() + margins.right() + 16
        screen = self.screen()
        most = int(screen.availableGeometry().width() * 0.9) if screen is not None else wanted
        self.setMinimumWidth(min(wanted, most))

    def _build_general(self) -> QWidget:
        page = QWidget()
        form = QFormLayout(page)
        self.theme_combo = QComboBox()
        self.theme_combo.setObjectName("pref-theme")
        for name in THEMES:
            self.theme_combo.addItem(THEME_LABELS[name], name)
        self.theme_combo.setToolTip("System follows the desktop's light or dark setting.")
        form.addRow("Theme", self.theme_combo)
        self.font_spin = QSpinBox()
        self.font_spin.setObjectName("pref-font-size")
        # The editor allows 1-5 so that a typed value gets a sentence, not a silent clamp.
        self.font_spin.setRange(FONT_SIZE_SYSTEM, FONT_SIZE_MAX)
        self.font_spin.setSpecialValueText("System size")
        self.font_spin.setSuffix(" pt")
        self.font_spin.setToolTip("The messages' and the composer's text size.")
        form.addRow("Chat font size", self.font_spin)
        self.enter_sends = QRadioButton("Enter sends, Shift+Enter starts a new line")
        self.enter_sends.setObjectName("pref-enter-sends")
        self.ctrl_enter_sends = QRadioButton("Ctrl+Enter sends, Enter starts a new line")
        self.ctrl_enter_sends.setObjectName("pref-ctrl-enter-sends")
        group = QButtonGroup(page)
        group.addButton(self.enter_sends)
        group.addButton(self.ctrl_enter_sends)
        keys = QVBoxLayout()
        keys.addWidget(self.enter_sends)
        keys.addWidget(self.ctrl_enter_sends)
        form.addRow("Sending", keys)
        self.restore_check = QCheckBox("Reopen the tabs that were open when LlamaDesk closed")
        self.restore_check.setObjectName("pref-restore-tabs")
        form.addRow("At start", self.restore_check)
        return page

    def _build_new_conversations(self) -> QWidget:
        page = QWidget()
        layout = QVBoxLayout(page)
        note = QLabel(
            "For chats created from now on; each chat keeps its own settings, changed in the chat."
        )
        note.setWordWrap(True)
        layout.addWidget(note)
        form = QFormLayout()
        self.system_prompt = QPlainTextEdit()
        self.system_prompt.setObjectName("pref-system-prompt")
        self.system_prompt.setPlaceholderText("No system prompt")
        self.system_prompt.setFixedHeight(80)
        form.addRow("System prompt", self.system_prompt)
        self.sampling: dict[str, QWidget] = {}
        for name in SAMPLING_EDITED:
            spec = SAMPLING_FIELDS[name]
            editor = make_editor(spec, special_format="{text}")
            editor.setObjectName(f"pref-{name}")
            editor.setToolTip(tooltip(spec))
            label = QLabel(spec.label)
            label.setToolTip(tooltip(spec))
            form.addRow(label, editor)
            self.sampling[name] = editor
        stop_spec = SAMPLING_FIELDS["stop"]
        self.stop_edit = QPlainTextEdit()
        self.stop_edit.setObjectName("pref-stop")
        self.stop_edit.setPlaceholderText("One per line (none: the model's own end)")
        self.stop_edit.setFixedHeight(60)
        self.stop_edit.setToolTip(stop_spec.help + " One per line; empty lines are ignored.")
        form.addRow(stop_spec.label, self.stop_edit)
        layout.addLayout(form)
        reset = QPushButton("Reset sampling to the defaults")
        reset.setObjectName("pref-reset-sampling")
        reset.clicked.connect(self._reset_sampling)
        layout.addWidget(reset, 0, Qt.AlignmentFlag.AlignLeft)
        layout.addStretch(1)
        return page

    def _build_storage(self) -> QWidget:
        page = QWidget()
        layout = QVBoxLayout(page)
        form = QFormLayout()
        self.quota_spin = QDoubleSpinBox()
        self.quota_spin.setObjectName("pref-state-quota")
        self.quota_spin.setDecimals(2)
        self.quota_spin.setRange(0.0, 1024.0)
        self.quota_spin.setSingleStep(0.5)
        self.quota_spin.setSuffix(" GiB")
        self.quota_spin.setToolTip(
            "Saved model states let a reopened chat continue without re-reading its text; "
            "beyond this size the least recently used are deleted. 0 keeps none."
        )
        form.addRow("State cache at most", self.quota_spin)
        self.usage_label = QLabel("Measuring what is used now…")
        self.usage_label.setObjectName("pref-state-usage")
        form.addRow("Used now", self.usage_label)
        layout.addLayout(form)
        note = QLabel(
            "Saved model states let a reopened chat go on at once; beyond the quota the "
            "least recently used are deleted (0 keeps none). A state lost costs only time: "
            "the chat's text is read again."
        )
        note.setWordWrap(True)
        layout.addWidget(note)
        layout.addStretch(1)
        return page

    def _build_hub(self) -> QWidget:
        page = QWidget()
        layout = QVBoxLayout(page)
        form = QFormLayout()
        self.endpoint_edit = QLineEdit()
        self.endpoint_edit.setObjectName("pref-hub-endpoint")
        self.endpoint_edit.setPlaceholderText(f"{config.DEFAULT_ENDPOINT} (the default)")
        self.endpoint_edit.setToolTip(
            "A mirror of the Hugging Face Hub, e.g. https://hf-mirror.com. Empty: the Hub."
        )
        form.addRow("Hub address", self.endpoint_edit)
        self.endpoint_note = QLabel()
        self.endpoint_note.setObjectName("pref-hub-endpoint-note")
        self.endpoint_note.setWordWrap(True)
        env = config.env_endpoint()
        if env is not None:
            self.endpoint_note.setText(
                f"HF_ENDPOINT is set to {env}: it is used while it is set, whatever this "
                "field says."
            )
        else:
            self.endpoint_note.setText("Empty: huggingface.co. HF_ENDPOINT, when set, wins.")
        form.addRow("", self.endpoint_note)
        self.token_edit = QLineEdit()
        self.token_edit.setObjectName("pref-hub-token")
        self.token_edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.token_edit.setPlaceholderText("hf_… paste a token to save it")
        self.token_edit.setToolTip(
            "A Hugging Face access token (read access) for gated and private models. It is "
            "kept in the system keyring, else in a file only you can read."
        )
        self.token_edit.textEdited.connect(self._on_token_typed)
        form.addRow("Access token", self.token_edit)
        row = QHBoxLayout()
        self.token_label = QLabel("Checking for a saved token…")
        self.token_label.setObjectName("pref-hub-token-state")
        self.token_label.setWordWrap(True)
        self.remove_token_button = QPushButton("Remove")
        self.remove_token_button.setObjectName("pref-hub-token-remove")
        self.remove_token_button.setToolTip("Forget the saved token (at OK or Apply).")
        self.remove_token_button.clicked.connect(self._on_remove_token)
        self.remove_token_button.setVisible(False)
        row.addWidget(self.token_label, 1)
        row.addWidget(self.remove_token_button, 0, Qt.AlignmentFlag.AlignTop)
        form.addRow("", row)
        layout.addLayout(form)
        hint = QLabel(
            "Gated and private models need a token of an account with access: create one "
            "(read access is enough) under Settings -> Access Tokens on huggingface.co, and "
            "accept the model's licence on its page."
        )
        hint.setWordWrap(True)
        layout.addWidget(hint)
        layout.addStretch(1)
        return page

    # -- values ---------------------------------------------------------------------------

    def show_preferences(self, prefs: Preferences) -> None:
        """Show ``prefs`` in the editors (nothing is applied)."""
        index = self.theme_combo.findData(prefs.theme)
        self.theme_combo.setCurrentIndex(max(0, index))
        self.font_spin.setValue(prefs.font_size)
        (self.enter_sends if prefs.send_with_enter else self.ctrl_enter_sends).setChecked(True)
        self.restore_check.setChecked(prefs.restore_tabs)
        self.system_prompt.setPlainText(prefs.default_system_prompt)
        self._show_sampling(prefs.default_sampling)
        self.quota_spin.setValue(prefs.state_quota_bytes / _GIB)
        self._shown["quota"] = (round(self.quota_spin.value() * _GIB), prefs.state_quota_bytes)
        self.endpoint_edit.setText(prefs.hub_endpoint)

    def _show_sampling(self, sampling: SamplingDefaults) -> None:
        values = sampling.to_dict()
        for name, editor in self.sampling.items():
            write_editor(SAMPLING_FIELDS[name], editor, values[name])
            self._shown[name] = (read_editor(editor), values[name])
        self.stop_edit.setPlainText("\n".join(values["stop"]))

    def _kept(self, name: str, value: Any) -> Any:
        """The stored value if the editor still shows it: a spin box rounds (0.333 shows
        as 0.33, a quota to 0.01 GiB), and opening and OK must not change a value."""
        shown = self._shown.get(name)
        return shown[1] if shown is not None and shown[0] == value else value

    def preferences(self) -> Preferences:
        """The values shown now (not checked: :meth:`Preferences.problems` says)."""
        values = {
            name: self._kept(name, read_editor(editor)) for name, editor in self.sampling.items()
        }
        stops = [line for line in self.stop_edit.toPlainText().split("\n") if line]
        sampling = SamplingDefaults(**values, stop=stops)
        return Preferences(
            theme=cast(Theme, str(self.theme_combo.currentData())),
            font_size=int(self.font_spin.value()),
            send_with_enter=self.enter_sends.isChecked(),
            restore_tabs=self.restore_check.isChecked(),
            default_system_prompt=self.system_prompt.toPlainText(),
            default_sampling=sampling,
            # whole bytes; the spin box has two decimals of a GiB
            state_quota_bytes=self._kept("quota", round(self.quota_spin.value() * _GIB)),
            hub_endpoint=self.endpoint_edit.text().strip().rstrip("/"),
        )

    @Slot()
    def _reset_sampling(self) -> None:
        self._show_sampling(SamplingDefaults())

    # -- OK / Apply / Cancel --------------------------------------------------------------

    @Slot()
    def apply(self) -> bool:
        """Check, store and announce the values; False (with a sentence) if one is wrong."""
        new = self.preferences()
        problems = new.problems()
        if problems:
            self._say(problems[0], error=True)
            return False
        old = Preferences.of(self._settings)
        new.apply_to(self._settings)
        try:
            self._save(self._settings)
        except LlamaDeskError as exc:
            old.apply_to(self._settings)  # nothing half-applied
            self._say(str(exc), error=True)
            return False
        self._apply_token()
        change = PreferencesChange(old, new)
        self._say("Saved." if change.changed else "Saved (nothing had changed).")
        self.applied.emit(change)
        return True

    def accept(self) -> None:
        if not self.apply():
            return
        if self._token_busy:
            self._close_when_done = True  # closes when the token is stored
            self._set_buttons_enabled(False)
            return
        super().accept()

    def _set_buttons_enabled(self, enabled: bool) -> None:
        for button in (self.ok_button, self.apply_button):
            button.setEnabled(enabled)

    def _say(self, text: str, error: bool = False) -> None:
        self.status.setText(text)
        self.status.setStyleSheet(f"color: {colors(self).error};" if error else "")

    # -- the token ------------------------------------------------------------------------

    def token_state(self) -> TokenState | None:
        """What is known of the saved token (None until the first answer)."""
        return self._token_state

    def token_busy(self) -> bool:
        return self._token_busy > 0

    @Slot(str)
    def _on_token_typed(self, text: str) -> None:
        if text:
            self._remove_token = False

    @Slot()
    def _on_remove_token(self) -> None:
        self._remove_token = True
        self.token_edit.clear()
        self.token_label.setText("The saved token will be removed at OK or Apply.")
        self.remove_token_button.setVisible(False)

    def _apply_token(self) -> None:
        token = self.token_edit.text().strip()
        # Out of the widget at once: the dialog holds the token only until the job runs.
        self.token_edit.clear()
        if token:
            self._remove_token = False
            self._token_job(lambda store: store.set(token))
        elif self._remove_token:
            self._remove_token = False
            self._token_job(lambda store: store.clear())

    def _ask_token_state(self) -> None:
        self._token_job(None)

    def _token_job(self, action: Callable[[config.TokenStore], None] | None) -> None:
        self._token_busy += 1
        bridge = self._bridge  # held by the job: see devices_plan.PlanLabel.show_plan
        dialog_store = self._store

        def job() -> None:
            error: str | None = None
            try:
                store = dialog_store or config.TokenStore()
            except Exception as exc:  # a keyring that fails to load
                _emit(bridge.token, TokenState(False, "", False, f"The token store failed: {exc}"))
                return
            if action is not None:
                try:
                    action(store)
                except OSError as exc:
                    # The message names the file, never the token.
                    error = f"The token could not be saved in {store.where}: {exc.strerror}."
            try:
                saved = store.has_saved()
            except Exception:
                saved = False
            env = bool(os.environ.get("HF_TOKEN"))
            _emit(bridge.token, TokenState(saved, store.where, env, error))

        _jobs.submit(job)

    @Slot(object)
    def _on_token_state(self, state: object) -> None:
        if not isinstance(state, TokenState):
            return
        self._token_busy = max(0, self._token_busy - 1)
        self._token_state = state
        if state.error:
            self.token_label.setText(state.error)
            self.token_label.setStyleSheet(f"color: {colors(self).error};")
            self._close_when_done = False
            self._set_buttons_enabled(True)
            return
        self.token_label.setStyleSheet("")
        if state.saved:
            text = f"A token is saved (in {state.where})."
        else:
            text = "No token is saved."
            if state.env:
                text += " HF_TOKEN from the environment is used."
        if self._remove_token:
            text = "The saved token will be removed at OK or Apply."
        self.token_label.setText(text)
        self.remove_token_button.setVisible(state.saved and not self._remove_token)
        if self._close_when_done and not self._token_busy:
            self._close_when_done = False
            self._set_buttons_enabled(True)
            super().accept()

    # -- usage ----------------------------------------------------------------------------

    def _ask_usage(self) -> None:
        usage = self._state_usage
        if usage is None:
            self.usage_label.setText("Not measured")
            return
        bridge = self._bridge  # held by the job: see devices_plan.PlanLabel.show_plan

        def job() -> None:
            try:
                value: int | None = int(usage())
            except Exception as exc:
                log.info("state cache usage: %s", exc)
                value = None
            _emit(bridge.usage, value)

        _jobs.submit(job)

    @Slot(object)
    def _on_usage(self, value: object) -> None:
        if isinstance(value, int):
            self.usage_label.setText(format_bytes(value))
        else:
            self.usage_label.setText("Could not be measured")


def open_preferences(
    parent: QWidget,
    settings: AppSettings,
    on_applied: Callable[[PreferencesChange], None],
    *,
    state_usage: Callable[[], int] | None = None,
) -> PreferencesDialog:
    """Open the dialog window-modal with ``open()`` (never ``exec()``: the window's event
    loop keeps running); ``on_applied`` (a slot of the window) gets each Apply / OK."""
    dialog = PreferencesDialog(settings, parent, state_usage=state_usage)
    dialog.applied.connect(on_applied)
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    dialog.open()
    return dialog
