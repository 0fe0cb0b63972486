"""The context settings dialog's preset row: choose a preset, "Save as preset…", "Delete
preset" (:class:`PresetRow`). The presets belong to the loaded model; the row only asks,
through its signals, for one to be shown, saved or deleted (the dialog does it)."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QPushButton,
    QSizePolicy,
    QWidget,
)

from app.ui.settings_fields import WheelGuard


class PresetRow(QObject):
    """The preset row (``row``, a layout) of the dialog ``parent`` (a child of it; no
    reference back, so the dialog goes when its last reference does)."""

    chosen = Signal(str, dict)  # name, values: show them in the editors (not applied)
    saveRequested = Signal(str)  # name: save the values shown under it (when valid)
    deleteRequested = Signal(str)  # name

    def __init__(self, parent: QWidget, wheel_guard: WheelGuard) -> None:
        super().__init__(parent)
        self.presets: dict[str, dict[str, Any]] = {}
        self._dialog: QInputDialog | None = None
        self._state = (False, False, True)  # (applying, a model is known, values valid)
        self.row = QHBoxLayout()
        self.row.addWidget(QLabel("Preset:"))
        self.combo = QComboBox()
        wheel_guard.guard(self.combo)
        self.combo.setObjectName("presetCombo")
        self.combo.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        self.combo.activated.connect(self._on_chosen)
        self.combo.currentIndexChanged.connect(lambda _index: self._update_buttons())
        self.row.addWidget(self.combo, 1)
        self.save_button = QPushButton("Save as preset…")
        self.save_button.setObjectName("savePresetButton")
        self.save_button.clicked.connect(self._on_save)
        self.row.addWidget(self.save_button)
        self.delete_button = QPushButton("Delete preset")
        self.delete_button.setObjectName("deletePresetButton")
        self.delete_button.clicked.connect(self._on_delete)
        self.row.addWidget(self.delete_button)
        for button in (self.save_button, self.delete_button):
            button.setAutoDefault(False)

    def set_presets(self, presets: dict[str, dict[str, Any]]) -> None:
        """The loaded model's presets by name (the one chosen stays chosen if still there)."""
        self.presets = {str(k): dict(v) for k, v in presets.items()}
        current = self.selected()
        self.combo.blockSignals(True)
        try:
            self.combo.clear()
            self.combo.addItem(
                "Choose a preset…" if self.presets else "No presets for this model", None
            )
            for name in sorted(self.presets, key=str.casefold):
                self.combo.addItem(name, name)
            index = self.combo.findData(current) if current else 0
            self.combo.setCurrentIndex(max(index, 0))
        finally:
            self.combo.blockSignals(False)
        self._update_buttons()

    def selected(self) -> str | None:
        data = self.combo.currentData()
        return data if isinstance(data, str) else None

    def update(self, applying: bool, has_model: bool, valid: bool) -> None:
        """The dialog's state: applying (all off), a model known (presets are a model's),
        the values shown valid (they can be saved)."""
        self._state = (applying, has_model, valid)
        self._update_buttons()

    def _update_buttons(self) -> None:
        applying, has_model, valid = self._state
        enabled = not applying and has_model
        self.combo.setEnabled(not applying and bool(self.presets))
        self.save_button.setEnabled(enabled and valid)
        self.delete_button.setEnabled(enabled and self.selected() is not None)
        tip = "" if has_model else "Presets belong to a model: load one first."
        self.save_button.setToolTip(tip or "Save the values shown under a name.")
        self.delete_button.setToolTip(tip or "Delete the chosen preset.")

    def _on_chosen(self, index: int) -> None:
        name = self.combo.itemData(index)
        if isinstance(name, str) and name in self.presets:
            self.chosen.emit(name, self.presets[name])

    def _on_save(self) -> None:
        if self._dialog is None:
            parent = self.parent()
            dialog = QInputDialog(parent if isinstance(parent, QWidget) else None)
            dialog.setObjectName("presetNameDialog")
            dialog.setWindowTitle("Save preset")
            dialog.setLabelText(
                "Name for the settings shown (a preset with the same name is replaced):"
            )
            dialog.setInputMode(QInputDialog.InputMode.TextInput)
            dialog.textValueSelected.connect(self._on_name)
            self._dialog = dialog
        self._dialog.setTextValue(self.selected() or "")
        self._dialog.open()

    def _on_name(self, name: str) -> None:
        name = name.strip()
        if name:
            self.saveRequested.emit(name)

    def _on_delete(self) -> None:
        name = self.selected()
        if name is not None:
            self.deleteRequested.emit(name)
