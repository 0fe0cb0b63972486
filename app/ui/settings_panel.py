"""The context settings dialog: every ``ContextSettings`` field, explained and validated.

The panel never changes anything by itself. It edits a copy of the settings it was given
and emits :attr:`SettingsPanel.applyRequested` with a new, validated
:class:`~app.engine.settings.ContextSettings`; the main window applies it (threads live,
anything else by rebuilding the context while keeping every tab) and reports back with
:meth:`SettingsPanel.set_applying`, then :meth:`SettingsPanel.show_applied` (with the
:class:`~app.session.LoadedModel` the context really got) or
:meth:`SettingsPanel.show_failed`. While replies are being written the window says so with
:meth:`SettingsPanel.set_generating`: Apply then reads "Stop all and apply".

Its parts: the fields' editors (:mod:`app.ui.settings_fields`), the preset row
(:mod:`app.ui.settings_presets`) and the sentences it shows (:mod:`app.ui.settings_texts`).

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
from collections.abc import Callable
from typing import Any, ClassVar

from PySide6.QtCore import QEvent, Qt, Signal, Slot
from PySide6.QtGui import QFont, QPalette, QShowEvent
from PySide6.QtWidgets import (
    QDialog,
    QFrame,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QScrollArea,
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
    FROM_MODEL,
    Apply,
    FieldSpec,
    format_bytes,
)
from app.ui.dialog_geometry import fit_to_screen
from app.ui.settings_fields import FIELDS, FieldEditors, WheelGuard
from app.ui.settings_presets import PresetRow
from app.ui.settings_texts import (
    ADVANCED_TEXT,
    LIVE_MARK,
    REBUILD_MARK,
    applied_text,
    apply_button,
    estimate_text,
    generating_note,
    model_text,
    running_text,
)
from app.ui.template_picker import TemplatePicker
from app.ui.theme import colors

# What other modules import from here (the names before the split into modules).
__all__ = ["FIELDS", "FROM_MODEL", "SettingsPanel", "applied_text", "format_bytes", "running_text"]


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
        presets: dict[str, dict[str, Any]] | None = None,
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
        self._applying = False
        self._rebuild_pending = False  # the edits shown need a new context
        self._problem: str | None = None
        self._wheel_guard = WheelGuard(self)
        self._fields = FieldEditors(self._wheel_guard)
        self._editors = self._fields.editors
        self._labels = self._fields.labels
        self._marks = self._fields.marks
        self._flagged: set[str] = set()
        self._build()
        self.set_settings(settings)
        self.set_presets(dict(presets or {}))
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
        self._threads_label.setStyleSheet(f"color: {c.warn};")
        for name, mark in self._marks.items():
            live = FIELDS[name].apply is Apply.LIVE
            mark.setStyleSheet(f"color: {c.ok if live else c.warn};")
        for name, label in self._labels.items():
            label.setStyleSheet(f"color: {c.error};" if name in self._flagged else "")
        muted = self.palette().color(QPalette.ColorRole.PlaceholderText)
        for label in self._fields.secondary:
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
        # the model's own setting, apart from the context's (no Apply: the next reply)
        self.template_picker = TemplatePicker(self)
        self._wheel_guard.guard(self.template_picker.combo)
        # the stored choice of a model file (the window's; "" until it says)
        self.template_value: Callable[[str], str] = lambda _path: ""
        outer.addWidget(self.template_picker)

        note = QLabel(
            f"Fields marked “{LIVE_MARK}” take effect at once. Fields marked "
            f"“{REBUILD_MARK}” create a new context: every open tab is kept (saved, then "
            "restored)."
        )
        note.setWordWrap(True)
        outer.addWidget(note)

        self._presets = PresetRow(self, self._wheel_guard)
        self._presets.chosen.connect(self._show_preset)
        self._presets.saveRequested.connect(self._save_preset_as)
        self._presets.deleteRequested.connect(self.presetDeleteRequested)
        outer.addLayout(self._presets.row)

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
        from app.ui.devices_page import DevicesPage  # the Devices section (its own module)

        info, original = self._model_info, self._original  # (no reference back to the panel)
        self.devices_page = DevicesPage(str(info.path) if info else None, lambda: original)
        fields_layout.addWidget(self.devices_page)
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

        # said before Apply: thread counts that can make every reply crawl
        self._threads_label = QLabel()
        self._threads_label.setObjectName("threadsWarning")
        self._threads_label.setWordWrap(True)
        self._threads_label.hide()
        outer.addWidget(self._threads_label)

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

    def _build_group(self, title: str, group: list[FieldSpec]) -> QGroupBox:
        return self._fields.build_group(title, group, self._running_label, self._on_edited)

    def _write_editors(self, values: dict[str, Any]) -> list[str]:
        """Show ``values`` (field -> value); returns the fields whose value was unusable."""
        return self._fields.write(values)

    def _read_editors(self) -> ContextSettings:
        return self._fields.read()

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
        self.template_picker.set_model(
            model.chat_template if model is not None else None,
            self.template_value(model.path) if model is not None else "",
        )
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

    def set_presets(self, presets: dict[str, dict[str, Any]]) -> None:
        """The loaded model's presets, by name (after the window saved or deleted one)."""
        self._presets.set_presets(presets)

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
        self._presets.combo.setEnabled(not active)
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
        if self._fields.loading:
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
        warnings = self._fields.thread_notes() + edited.thread_warnings()
        self._threads_label.setText(" ".join(warnings))
        self._threads_label.setVisible(bool(warnings))

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
        self._model_label.setText(model_text(self._model_info))
        self._update_running(edited)
        self._estimate_label.setText(estimate_text(edited, self._model_info))
        changed_advanced = sum(
            getattr(edited, name) != getattr(self._original, name)
            for name, spec in FIELDS.items()
            if spec.advanced
        )
        self._advanced_toggle.setText(
            f"{ADVANCED_TEXT} ({changed_advanced} changed)" if changed_advanced else ADVANCED_TEXT
        )

        changed_any = edited != self._original
        rebuild = self._original.needs_rebuild(edited)
        self._rebuild_pending = changed_any and rebuild
        text, tip = apply_button(changed_any, rebuild, self._generating)
        self._apply_button.setText(text)
        self._apply_button.setToolTip(tip)
        self._apply_button.setEnabled(not self._applying and self._problem is None and changed_any)
        if self._generating and not self._applying:
            self._generating_label.setText(generating_note(self._rebuild_pending))
        self._generating_label.setVisible(self._generating and not self._applying)
        self._presets.update(self._applying, self._model_info is not None, self._problem is None)

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

    # -- presets (the row asks; see PresetRow) -------------------------------------------

    @Slot(str, dict)
    def _show_preset(self, name: str, values: dict[str, Any]) -> None:
        skipped = self._write_editors(values)
        self._on_edited()
        if skipped:
            self._error_label.setText(
                f"The preset “{name}” has unusable values for {', '.join(skipped)}; "
                "those fields were left as they were."
            )
            self._error_label.show()

    @Slot(str)
    def _save_preset_as(self, name: str) -> None:
        edited = self._read_editors()
        if self._validate(edited) is None:
            self.presetSaveRequested.emit(name, edited.to_dict())
