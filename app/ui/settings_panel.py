"""The context settings dialog: every ``ContextSettings`` field, explained and validated.

The panel never changes anything by itself. It edits a copy of the settings it was given
and emits :attr:`SettingsPanel.applyRequested` with a new, validated
:class:`~app.engine.settings.ContextSettings`; the main window applies it (threads live,
anything else by rebuilding the context while keeping every tab) and reports back with
:meth:`SettingsPanel.set_applying`, then :meth:`SettingsPanel.show_applied` (with the
:class:`~app.session.LoadedModel` the context really got) or
:meth:`SettingsPanel.show_failed`. While replies are being written the window says so with
:meth:`SettingsPanel.set_generating`: Apply then reads "Stop all and apply".

The fields come in two sections, from the schema's ``advanced`` mark: the few most people
change (context size, resident tabs, batch, threads), and the rest under "Advanced". Under
the context size the panel says what the loaded model really runs at (llama.cpp holds the
context to the model's training length, and rounds it), not only what was asked for.

Presets are only requested here (:attr:`presetSaveRequested`,
:attr:`presetDeleteRequested`); the main window stores them and calls
:meth:`SettingsPanel.set_presets` with the new list.
"""

from __future__ import annotations

import dataclasses
import html
from typing import Any, ClassVar

from PySide6.QtCore import QEvent, QObject, Qt, Signal, Slot
from PySide6.QtGui import QFont, QPalette, QShowEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDoubleSpinBox,
    QFrame,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.engine.errors import ContextError
from app.engine.metadata import ModelInfo
from app.engine.settings import ContextSettings, SettingsError
from app.session import LoadedModel
from app.settings_schema import (
    ADVANCED_CONTEXT_GROUPS,
    BASIC_CONTEXT_FIELDS,
    CONTEXT_FIELDS,
    FROM_MODEL,
    Apply,
    FieldSpec,
    format_bytes,
)
from app.ui.dialog_geometry import fit_to_screen
from app.ui.field_editors import make_editor, read_editor, write_editor
from app.ui.theme import colors

__all__ = ["FROM_MODEL", "SettingsPanel", "format_bytes"]

# The fields and their groups, from the schema (app/settings_schema.py).
FIELDS: dict[str, FieldSpec] = CONTEXT_FIELDS
assert set(FIELDS) == {f.name for f in dataclasses.fields(ContextSettings)}, (
    "every ContextSettings field needs a spec"
)

_LIVE_MARK = "⚡ Applies live"
_REBUILD_MARK = "↻ Rebuilds context"
_REBUILD_TIP = (
    "Changing this creates a new context. Every open tab is kept: resident tabs are saved, "
    "the context is rebuilt and the tabs are restored (a tab may re-read its conversation)."
)
_LIVE_TIP = "Changing this takes effect immediately, without rebuilding the context."
_STOP_TIP = (
    "Replies are being written: applying stops them first (what they wrote so far is kept), "
    "then rebuilds the context. Every open tab is kept."
)
_ADVANCED_TEXT = "Advanced settings"


class _WheelGuard(QObject):
    """Scrolling the panel must never edit a value: a guarded editor takes the mouse wheel only
    when it has keyboard focus; otherwise the ignored event goes on to the scroll area."""

    def guard(self, widget: QWidget) -> None:
        widget.setFocusPolicy(Qt.FocusPolicy.StrongFocus)  # the wheel alone gives no focus
        widget.installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if (
            event.type() == QEvent.Type.Wheel
            and isinstance(watched, QWidget)
            and not watched.hasFocus()
        ):
            event.ignore()
            return True
        return False


class SettingsPanel(QDialog):
    """Edit :class:`ContextSettings`; see the module docstring for the protocol.

    The main window: connect the signals, ``show()`` the panel (it is not modal), keep it
    told whether replies are being written (``set_generating``) and which model runs
    (``set_loaded_model``); on ``applyRequested(settings)`` call ``set_applying(True, "…")``
    (stopping the replies first if the settings rebuild the context); when done,
    ``show_applied(model)`` (the new baseline and the figures the context really got), or
    ``show_failed(sentence)`` (the dialog stays open with the values entered).
    """

    # Whether the "Advanced" section was left open: the next panel opens the same way
    # (in-process only; the panel is recreated each time the window opens it).
    advanced_open: ClassVar[bool] = False

    applyRequested = Signal(object)  # ContextSettings, validated
    presetSaveRequested = Signal(str, dict)  # name, ContextSettings.to_dict()
    presetDeleteRequested = Signal(str)  # name

    def __init__(
        self,
        settings: ContextSettings,
        model_info: ModelInfo | None = None,
        presets: dict[str, dict] | None = None,
        parent: QWidget | None = None,
        *,
        loaded: LoadedModel | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Context settings")
        self.setModal(False)
        self._original = dataclasses.replace(settings)
        self._loaded = loaded
        self._model_info = loaded.info if loaded is not None else model_info
        self._generating = False
        self._presets: dict[str, dict[str, Any]] = dict(presets or {})
        self._applying = False
        self._rebuild_pending = False  # the edits shown need a new context
        self._loading_values = False
        self._problem: str | None = None
        self._editors: dict[str, QWidget] = {}
        self._labels: dict[str, QLabel] = {}
        self._marks: dict[str, QLabel] = {}
        self._secondary: list[QLabel] = []
        self._flagged: set[str] = set()
        self._preset_dialog: QInputDialog | None = None
        self._wheel_guard = _WheelGuard(self)
        self._build()
        self.set_settings(settings)
        self.set_presets(self._presets)
        self.setSizeGripEnabled(True)
        self.resize(720, 720)
        self._fitted = False

    # -- size and colours ----------------------------------------------------------------

    def fit_to_screen(self) -> None:
        """At most 90% of the screen's free area (the fields scroll), and inside it;
        centred on the window the first time."""
        fit_to_screen(self, centre=self.parentWidget() is not None and not self._fitted)
        self._fitted = True

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        if not self._fitted:
            self.fit_to_screen()

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange and hasattr(self, "_error_label"):
            self._apply_colours()

    def _apply_colours(self) -> None:
        """Colours that read well on the current theme (redone when it changes)."""
        c = colors(self)
        self._problem_label.setStyleSheet(f"color: {c.error};")
        self._error_label.setStyleSheet(f"color: {c.error}; font-weight: bold;")
        self._applied_label.setStyleSheet(f"color: {c.ok}; font-weight: bold;")
        self._generating_label.setStyleSheet(f"color: {c.warn};")
        for name, mark in self._marks.items():
            live = FIELDS[name].apply is Apply.LIVE
            mark.setStyleSheet(f"color: {c.ok if live else c.warn};")
        for name, label in self._labels.items():
            label.setStyleSheet(f"color: {c.error};" if name in self._flagged else "")
        muted = self.palette().color(QPalette.ColorRole.PlaceholderText)
        for label in self._secondary:
            palette = label.palette()
            palette.setColor(QPalette.ColorRole.WindowText, muted)
            label.setPalette(palette)

    # -- construction --------------------------------------------------------------------

    def _build(self) -> None:
        outer = QVBoxLayout(self)

        self._model_label = QLabel()
        self._model_label.setObjectName("modelLabel")
        self._model_label.setWordWrap(True)
        outer.addWidget(self._model_label)

        note = QLabel(
            f"Fields marked “{_LIVE_MARK}” take effect at once. Fields marked "
            f"“{_REBUILD_MARK}” create a new context: every open tab is kept (saved, then "
            "restored)."
        )
        note.setWordWrap(True)
        outer.addWidget(note)

        outer.addLayout(self._build_presets())

        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self._fields_widget = QWidget()
        fields_layout = QVBoxLayout(self._fields_widget)
        self._running_label = QLabel()
        self._running_label.setObjectName("runningLabel")
        self._running_label.setWordWrap(True)
        self._running_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        basic = self._build_group("Basic", [FIELDS[n] for n in BASIC_CONTEXT_FIELDS])
        basic.setObjectName("basicSection")
        fields_layout.addWidget(basic)

        self._advanced_toggle = QToolButton()
        self._advanced_toggle.setObjectName("advancedToggle")
        self._advanced_toggle.setCheckable(True)
        self._advanced_toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self._advanced_toggle.setAutoRaise(True)
        self._advanced_toggle.setToolTip(
            "Cache types, attention, RoPE/YaRN, micro-batches, prompt threads, embeddings."
        )
        self._advanced_toggle.toggled.connect(self._on_advanced_toggled)
        fields_layout.addWidget(self._advanced_toggle)
        self._advanced_section = QWidget()
        self._advanced_section.setObjectName("advancedSection")
        advanced_layout = QVBoxLayout(self._advanced_section)
        advanced_layout.setContentsMargins(0, 0, 0, 0)
        for title, names in ADVANCED_CONTEXT_GROUPS:
            advanced_layout.addWidget(self._build_group(title, [FIELDS[n] for n in names]))
        fields_layout.addWidget(self._advanced_section)
        fields_layout.addStretch(1)
        scroll.setWidget(self._fields_widget)
        outer.addWidget(scroll, 1)
        self._set_advanced_open(SettingsPanel.advanced_open)

        estimate_box = QGroupBox("Memory for the context (KV cache)")
        estimate_layout = QVBoxLayout(estimate_box)
        self._estimate_label = QLabel()
        self._estimate_label.setObjectName("estimateLabel")
        self._estimate_label.setWordWrap(True)
        self._estimate_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        estimate_layout.addWidget(self._estimate_label)
        outer.addWidget(estimate_box)

        self._problem_label = QLabel()
        self._problem_label.setObjectName("problemLabel")
        self._problem_label.setWordWrap(True)
        self._problem_label.hide()
        outer.addWidget(self._problem_label)

        self._error_label = QLabel()
        self._error_label.setObjectName("errorLabel")
        self._error_label.setWordWrap(True)
        self._error_label.hide()
        outer.addWidget(self._error_label)

        self._applied_label = QLabel()
        self._applied_label.setObjectName("appliedLabel")
        self._applied_label.setWordWrap(True)
        self._applied_label.hide()
        outer.addWidget(self._applied_label)

        self._generating_label = QLabel()
        self._generating_label.setObjectName("generatingNote")
        self._generating_label.setWordWrap(True)
        self._generating_label.hide()
        outer.addWidget(self._generating_label)

        busy = QHBoxLayout()
        self._busy_bar = QProgressBar()
        self._busy_bar.setObjectName("busyBar")
        self._busy_bar.setRange(0, 0)  # indeterminate
        self._busy_bar.setMaximumWidth(160)
        self._busy_bar.setTextVisible(False)
        self._busy_label = QLabel()
        self._busy_label.setObjectName("busyLabel")
        self._busy_label.setWordWrap(True)
        busy.addWidget(self._busy_bar)
        busy.addWidget(self._busy_label, 1)
        self._busy_bar.hide()
        self._busy_label.hide()
        outer.addLayout(busy)

        buttons = QHBoxLayout()
        self._reset_button = QPushButton("Reset to defaults")
        self._reset_button.setObjectName("resetButton")
        self._reset_button.setToolTip(
            "Put every field back to LlamaDesk's defaults (not applied yet)."
        )
        self._reset_button.clicked.connect(self._on_reset)
        self._close_button = QPushButton("Close")
        self._close_button.setObjectName("closeButton")
        self._close_button.setToolTip("Close without applying unapplied changes.")
        self._close_button.clicked.connect(self.reject)
        self._apply_button = QPushButton("Apply")
        self._apply_button.setObjectName("applyButton")
        self._apply_button.clicked.connect(self._on_apply)
        for button in (self._reset_button, self._close_button, self._apply_button):
            button.setAutoDefault(False)
            button.setDefault(False)
        buttons.addWidget(self._reset_button)
        buttons.addStretch(1)
        buttons.addWidget(self._close_button)
        buttons.addWidget(self._apply_button)
        outer.addLayout(buttons)

    def _build_presets(self) -> QHBoxLayout:
        row = QHBoxLayout()
        row.addWidget(QLabel("Preset:"))
        self._preset_combo = QComboBox()
        self._wheel_guard.guard(self._preset_combo)
        self._preset_combo.setObjectName("presetCombo")
        self._preset_combo.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        self._preset_combo.activated.connect(self._on_preset_chosen)
        self._preset_combo.currentIndexChanged.connect(self._update_preset_buttons)
        row.addWidget(self._preset_combo, 1)
        self._save_preset_button = QPushButton("Save as preset…")
        self._save_preset_button.setObjectName("savePresetButton")
        self._save_preset_button.clicked.connect(self._on_save_preset)
        row.addWidget(self._save_preset_button)
        self._delete_preset_button = QPushButton("Delete preset")
        self._delete_preset_button.setObjectName("deletePresetButton")
        self._delete_preset_button.clicked.connect(self._on_delete_preset)
        row.addWidget(self._delete_preset_button)
        for button in (self._save_preset_button, self._delete_preset_button):
            button.setAutoDefault(False)
        return row

    def _build_group(self, title: str, group: list[FieldSpec]) -> QGroupBox:
        box = QGroupBox(title.replace("&", "&&"))  # "Attention & cache": no mnemonic
        grid = QGridLayout(box)
        # Room for the longest label at 640 px (labels wrap rather than push the editors).
        grid.setColumnMinimumWidth(0, 140)
        grid.setColumnStretch(3, 1)
        row = 0
        for spec in group:
            label = QLabel(spec.label)
            label.setObjectName(f"label_{spec.name}")
            label.setToolTip(spec.name)
            label.setWordWrap(True)
            editor = self._make_editor(spec)
            editor.setObjectName(f"field_{spec.name}")
            label.setBuddy(editor)
            live = spec.apply is Apply.LIVE
            mark = QLabel(_LIVE_MARK if live else _REBUILD_MARK)
            mark.setObjectName(f"mark_{spec.name}")
            mark.setToolTip(_LIVE_TIP if live else _REBUILD_TIP)
            self._marks[spec.name] = mark
            help_label = QLabel(f"{spec.help} {self._range_text(spec)}".strip())
            help_label.setObjectName(f"help_{spec.name}")
            help_label.setWordWrap(True)
            _make_secondary(help_label)
            self._secondary.append(help_label)
            editor.setMinimumWidth(180)
            editor.setMaximumWidth(320)
            grid.addWidget(label, row, 0)
            grid.addWidget(editor, row, 1)
            grid.addWidget(mark, row, 2)
            grid.addWidget(help_label, row + 1, 1, 1, 3)
            row += 2
            if spec.name == "n_ctx":  # what the loaded model really runs at, right below
                grid.addWidget(self._running_label, row, 1, 1, 3)
                row += 1
            self._editors[spec.name] = editor
            self._labels[spec.name] = label
        return box

    @staticmethod
    def _range_text(spec: FieldSpec) -> str:
        text = spec.range_text()
        return f"Valid: {text}." if text else ""

    def _make_editor(self, spec: FieldSpec) -> QWidget:
        editor = make_editor(spec)
        if isinstance(editor, QSpinBox | QDoubleSpinBox):
            self._wheel_guard.guard(editor)
            editor.valueChanged.connect(self._on_edited)
        elif isinstance(editor, QCheckBox):
            editor.toggled.connect(self._on_edited)
        elif isinstance(editor, QComboBox):
            self._wheel_guard.guard(editor)
            editor.currentIndexChanged.connect(self._on_edited)
        return editor

    # -- reading and writing the editors -------------------------------------------------

    def _write_editors(self, values: dict[str, Any]) -> list[str]:
        """Show ``values`` (field -> value); returns the fields whose value was unusable."""
        skipped: list[str] = []
        self._loading_values = True
        try:
            for name, value in values.items():
                spec = FIELDS.get(name)
                if spec is None:
                    continue
                if not write_editor(spec, self._editors[name], value):
                    skipped.append(name)
        finally:
            self._loading_values = False
        return skipped

    def _read_editors(self) -> ContextSettings:
        return ContextSettings(
            **{name: read_editor(editor) for name, editor in self._editors.items()}
        )

    # -- public interface ----------------------------------------------------------------

    def current_settings(self) -> ContextSettings:
        """The values shown now (not necessarily valid: Apply is what checks them)."""
        return self._read_editors()

    def set_settings(self, settings: ContextSettings) -> None:
        """Show ``settings`` and make them the baseline (what the context runs with now)."""
        self._original = dataclasses.replace(settings)
        self._error_label.hide()
        self._applied_label.hide()
        self._write_editors(settings.to_dict())
        self._update_state()

    def set_model_info(self, info: ModelInfo | None) -> None:
        """The model the checks and the estimate use (no context figures: a model that is
        not the loaded one's forgets them; see :meth:`set_loaded_model`)."""
        self._model_info = info
        if self._loaded is not None and self._loaded.info != info:
            self._loaded = None
        self._update_state()

    def set_loaded_model(self, model: LoadedModel | None) -> None:
        """The model that runs now, with the context it really got (``None``: unloaded)."""
        self._loaded = model
        self._model_info = model.info if model is not None else None
        self._update_state()

    def set_generating(self, active: bool) -> None:
        """Whether replies are being written: applying settings that rebuild the context
        stops them, and the Apply button and a note say so."""
        self._generating = active
        self._update_state()

    def is_advanced_open(self) -> bool:
        return self._advanced_toggle.isChecked()

    def show_applied(self, model: LoadedModel) -> None:
        """Applying worked: ``model``'s settings become the baseline, and the dialog says
        what the model now runs with (the real context size, which may be less than asked)."""
        self.set_applying(False)
        self._loaded = model
        self._model_info = model.info
        self.set_settings(model.settings)
        self._applied_label.setText(applied_text(model))
        self._applied_label.show()

    def show_failed(self, message: str) -> None:
        """Applying failed: ``message`` is shown; the values entered stay for another try."""
        sentence = message.strip() or "The settings could not be applied."
        self.show_error(
            f"Not applied: {sentence} The values you entered are still here; change them "
            "and apply again, or close to keep the running settings."
        )

    def set_presets(self, presets: dict[str, dict]) -> None:
        self._presets = {str(k): dict(v) for k, v in presets.items()}
        current = self._selected_preset()
        self._preset_combo.blockSignals(True)
        try:
            self._preset_combo.clear()
            self._preset_combo.addItem(
                "Choose a preset…" if self._presets else "No presets for this model", None
            )
            for name in sorted(self._presets, key=str.casefold):
                self._preset_combo.addItem(name, name)
            index = self._preset_combo.findData(current) if current else 0
            self._preset_combo.setCurrentIndex(max(index, 0))
        finally:
            self._preset_combo.blockSignals(False)
        self._update_preset_buttons()

    def set_applying(self, active: bool, message: str = "") -> None:
        """Busy state while the main window applies: inputs off, progress and ``message``."""
        self._applying = active
        if active:
            self._error_label.hide()
            self._applied_label.hide()
        self._busy_bar.setVisible(active)
        self._busy_label.setVisible(active and bool(message))
        self._busy_label.setText(message)
        self._fields_widget.setEnabled(not active)
        self._reset_button.setEnabled(not active)
        self._preset_combo.setEnabled(not active)
        self._update_state()

    def show_error(self, message: str | BaseException) -> None:
        """Show why applying failed (a sentence, or the engine's error: a
        :class:`SettingsError` also highlights its fields); ends the busy state."""
        self.set_applying(False)
        self._error_label.setText(str(message))
        self._error_label.show()
        if isinstance(message, SettingsError):
            self._flagged = set(message.fields) & set(FIELDS)
            self._apply_colours()

    # -- reacting to edits ---------------------------------------------------------------

    @Slot()
    def _on_edited(self) -> None:
        if self._loading_values:
            return
        self._error_label.hide()
        self._applied_label.hide()
        self._update_state()

    def _check(self, settings: ContextSettings) -> ContextError | None:
        try:
            settings.validate(self._model_info)
        except ContextError as exc:
            return exc
        return None

    def _validate(self, settings: ContextSettings) -> str | None:
        problem = self._check(settings)
        return None if problem is None else str(problem)

    def _update_state(self) -> None:
        edited = self._read_editors()
        error = self._check(edited)
        self._problem = None if error is None else str(error)
        self._problem_label.setText(self._problem or "")
        self._problem_label.setVisible(self._problem is not None)

        # The error names its fields: no reading of its sentence.
        flagged = set(error.fields) & set(FIELDS) if isinstance(error, SettingsError) else set()
        for name, label in self._labels.items():
            changed = getattr(edited, name) != getattr(self._original, name)
            font = QFont(label.font())
            font.setBold(changed)
            label.setFont(font)

        self._flagged = flagged
        if flagged and any(FIELDS[name].advanced for name in flagged):
            self._set_advanced_open(True)  # a problem is never hidden in a closed section
        self._apply_colours()
        self._update_model_label()
        self._update_running(edited)
        self._update_estimate(edited)
        changed_advanced = sum(
            getattr(edited, name) != getattr(self._original, name)
            for name, spec in FIELDS.items()
            if spec.advanced
        )
        self._advanced_toggle.setText(
            f"{_ADVANCED_TEXT} ({changed_advanced} changed)" if changed_advanced else _ADVANCED_TEXT
        )

        changed_any = edited != self._original
        rebuild = self._original.needs_rebuild(edited)
        self._rebuild_pending = changed_any and rebuild
        if not changed_any:
            text = "Apply"
            tip = "Nothing has changed yet."
        elif rebuild and self._generating:
            text = "Stop all and apply"
            tip = _STOP_TIP
        elif rebuild:
            text = "Apply and rebuild context"
            tip = _REBUILD_TIP
        else:
            text = "Apply (threads only, live)"
            tip = _LIVE_TIP
        self._apply_button.setText(text)
        self._apply_button.setToolTip(tip)
        self._apply_button.setEnabled(not self._applying and self._problem is None and changed_any)
        if self._generating and not self._applying:
            self._generating_label.setText(
                "Replies are being written. Applying these settings stops them first (what "
                "they wrote so far is kept), then rebuilds the context."
                if self._rebuild_pending
                else "Replies are being written. Thread counts change without stopping them; "
                "settings that rebuild the context stop them when applied."
            )
        self._generating_label.setVisible(self._generating and not self._applying)
        self._update_preset_buttons()

    def _update_running(self, edited: ContextSettings) -> None:
        """Under the context size: what the loaded model really runs at, and what the value
        being edited would give (llama.cpp holds it to the training length)."""
        text = running_text(self._loaded, self._original, edited, self._model_info)
        self._running_label.setText(text)
        self._running_label.setVisible(bool(text))

    # -- the advanced section --------------------------------------------------------------

    def _set_advanced_open(self, open_: bool) -> None:
        self._advanced_toggle.setChecked(open_)  # toggled -> _on_advanced_toggled
        self._show_advanced(open_)

    def _show_advanced(self, open_: bool) -> None:
        self._advanced_section.setVisible(open_)
        self._advanced_toggle.setArrowType(
            Qt.ArrowType.DownArrow if open_ else Qt.ArrowType.RightArrow
        )

    @Slot(bool)
    def _on_advanced_toggled(self, open_: bool) -> None:
        self._show_advanced(open_)
        SettingsPanel.advanced_open = open_

    def _update_model_label(self) -> None:
        info = self._model_info
        if info is None:
            self._model_label.setText(
                "<b>No model loaded.</b> Checks that depend on the model run when one is loaded."
            )
            return
        parts = [f"<b>{html.escape(info.display_name)}</b>"]
        if info.architecture:
            parts.append(html.escape(info.architecture))
        if info.n_params:
            parts.append(f"{info.params_label} parameters")
        if info.n_ctx_train:
            parts.append(f"trained for {info.n_ctx_train:,} tokens of context")
        self._model_label.setText(" · ".join(parts))

    def _update_estimate(self, settings: ContextSettings) -> None:
        info = self._model_info
        if info is None:
            self._estimate_label.setText(
                "The memory estimate needs a loaded model: load one to see how much memory "
                "these settings take."
            )
            return
        memory = settings.memory_estimate(info)
        if not info.n_layer or not (
            info.n_embd_k_gqa or info.n_embd_v_gqa or memory.recurrent_bytes
        ):
            self._estimate_label.setText(
                "This model's file does not describe its layers, so no estimate is possible."
            )
            return
        n_ctx = settings.effective_n_ctx(info)
        per_token = settings.kv_bytes_per_token(info)
        total = settings.kv_bytes(info)
        lines = [
            f"<b>{format_bytes(total)}</b> for {n_ctx:,} tokens "
            f"({format_bytes(per_token)} per token)."
            if per_token
            else "No attention layers: this model keeps no per-token cache."
        ]
        if memory.recurrent_bytes:
            n_seq = max(1, settings.n_seq_max)
            lines.append(
                f"Recurrent state: <b>{format_bytes(memory.recurrent_bytes)}</b> "
                f"({format_bytes(memory.recurrent_bytes // n_seq)} for each of {n_seq} resident "
                "tabs, whatever their length)."
            )
        if memory.checkpoint_bytes:
            lines.append(
                f"Checkpoints at message boundaries (so edits and regenerations need not "
                f"re-read the chat): up to {format_bytes(memory.checkpoint_bytes)}."
            )
        if settings.n_ctx == 0:
            lines.append(f"Context size 0 uses the model's {n_ctx:,} tokens.")
        elif n_ctx < settings.n_ctx:
            lines.append(
                f"The model was trained for {n_ctx:,} tokens: the context is held to that "
                "(positions past it give garbage, not a longer memory) unless RoPE scaling "
                "is on."
            )
        n_seq = max(1, settings.n_seq_max)
        if settings.kv_unified:
            lines.append(
                f"All {n_seq} resident tab{'s' if n_seq != 1 else ''} share this pool; "
                "a long conversation may use most of it."
            )
        else:
            share = n_ctx // n_seq
            lines.append(
                f"Split cache: each of the {n_seq} resident tabs gets {share:,} tokens "
                f"({format_bytes(per_token * share)})."
            )
        if info.size_bytes:
            lines.append(f"The model's weights add {format_bytes(info.size_bytes)}.")
        self._estimate_label.setText("<br>".join(lines))

    # -- buttons -------------------------------------------------------------------------

    @Slot()
    def _on_apply(self) -> None:
        if self._applying:
            return
        edited = self._read_editors()
        problem = self._validate(edited)
        if problem is not None:  # the button is disabled then; a guard all the same
            self._update_state()
            return
        self.applyRequested.emit(dataclasses.replace(edited))

    @Slot()
    def _on_reset(self) -> None:
        self._write_editors(ContextSettings().to_dict())
        self._on_edited()

    def _selected_preset(self) -> str | None:
        data = self._preset_combo.currentData()
        return data if isinstance(data, str) else None

    @Slot()
    def _update_preset_buttons(self) -> None:
        has_model = self._model_info is not None
        enabled = not self._applying and has_model
        self._preset_combo.setEnabled(not self._applying and bool(self._presets))
        self._save_preset_button.setEnabled(enabled and self._problem is None)
        self._delete_preset_button.setEnabled(enabled and self._selected_preset() is not None)
        tip = "" if has_model else "Presets belong to a model: load one first."
        self._save_preset_button.setToolTip(tip or "Save the values shown under a name.")
        self._delete_preset_button.setToolTip(tip or "Delete the chosen preset.")

    @Slot(int)
    def _on_preset_chosen(self, index: int) -> None:
        name = self._preset_combo.itemData(index)
        if not isinstance(name, str) or name not in self._presets:
            return
        skipped = self._write_editors(self._presets[name])
        self._on_edited()
        if skipped:
            self._error_label.setText(
                f"The preset “{name}” has unusable values for {', '.join(skipped)}; "
                "those fields were left as they were."
            )
            self._error_label.show()

    @Slot()
    def _on_save_preset(self) -> None:
        if self._preset_dialog is None:
            dialog = QInputDialog(self)
            dialog.setObjectName("presetNameDialog")
            dialog.setWindowTitle("Save preset")
            dialog.setLabelText(
                "Name for the settings shown (a preset with the same name is replaced):"
            )
            dialog.setInputMode(QInputDialog.InputMode.TextInput)
            dialog.textValueSelected.connect(self._on_preset_name)
            self._preset_dialog = dialog
        self._preset_dialog.setTextValue(self._selected_preset() or "")
        self._preset_dialog.open()

    @Slot(str)
    def _on_preset_name(self, name: str) -> None:
        name = name.strip()
        if not name:
            return
        edited = self._read_editors()
        if self._validate(edited) is not None:
            return
        self.presetSaveRequested.emit(name, edited.to_dict())

    @Slot()
    def _on_delete_preset(self) -> None:
        name = self._selected_preset()
        if name is not None:
            self.presetDeleteRequested.emit(name)


def _make_secondary(label: QLabel) -> None:
    """Smaller text in the theme's placeholder colour, for one-line explanations."""
    font = QFont(label.font())
    if font.pointSizeF() > 0:
        font.setPointSizeF(font.pointSizeF() * 0.9)
    label.setFont(font)
    palette = label.palette()
    palette.setColor(
        QPalette.ColorRole.WindowText, palette.color(QPalette.ColorRole.PlaceholderText)
    )
    label.setPalette(palette)


def _tokens(n: int) -> str:
    return f"{n:,} token{'s' if n != 1 else ''}"


def running_text(
    loaded: LoadedModel | None,
    baseline: ContextSettings,
    edited: ContextSettings,
    info: ModelInfo | None,
) -> str:
    """What the model runs at now and, when the context size is being changed, what the new
    value would give; ``""`` when there is nothing to say (no model at all)."""
    parts: list[str] = []
    if loaded is not None:
        actual, asked = loaded.n_ctx, loaded.settings.n_ctx
        train = loaded.info.n_ctx_train
        limit = f"its training limit is {train:,}" if train else "its training limit is unknown"
        if asked == 0:
            parts.append(f"The model runs at {_tokens(actual)}: {limit}.")
        elif actual < asked:
            why = (
                f"its training limit is {train:,} (RoPE scaling would stretch it)"
                if train and actual >= train
                else "llama.cpp gave it less"
            )
            parts.append(
                f"The model runs at <b>{_tokens(actual)}</b>, not the {asked:,} asked for: {why}."
            )
        elif actual > asked:
            parts.append(
                f"The model runs at {_tokens(actual)} (llama.cpp rounds the {asked:,} asked "
                f"for up to a multiple of 256; {limit})."
            )
        else:
            parts.append(f"The model runs at {_tokens(actual)} ({limit}).")
        if not loaded.settings.kv_unified and loaded.settings.n_seq_max > 1:
            parts.append(f"Each resident tab gets {loaded.n_ctx_seq:,} of them (split cache).")
    if info is not None and (
        edited.n_ctx != baseline.n_ctx or edited.rope_scaled != baseline.rope_scaled
    ):
        will = edited.effective_n_ctx(info)
        if edited.n_ctx == 0:
            parts.append(f"Applying 0 gives the model's own length, {_tokens(will)}.")
        elif will < edited.n_ctx:
            parts.append(
                f"Applying {edited.n_ctx:,} would give {_tokens(will)}: the model's training "
                "limit (turn on RoPE scaling to go past it)."
            )
        elif loaded is not None:
            parts.append(f"Applying gives {_tokens(will)}.")
    return " ".join(parts)


def applied_text(model: LoadedModel) -> str:
    """The sentence after a successful Apply: the context the model really got."""
    settings = model.settings
    n_seq = settings.n_seq_max
    tabs = f"{n_seq} resident tab{'s' if n_seq != 1 else ''}"
    share = (
        f"shared by {tabs}"
        if settings.kv_unified or n_seq == 1
        else f"{model.n_ctx_seq:,} for each of {tabs}"
    )
    text = f"Applied: the model now runs with a {model.n_ctx:,}-token context ({share})"
    asked = settings.n_ctx
    if asked and model.n_ctx < asked:
        text += f", not the {asked:,} asked for: that is as far as this model goes"
    return (
        f"{text}, {settings.n_threads} generation thread"
        f"{'s' if settings.n_threads != 1 else ''}. Every open tab was kept."
    )
