"""Editors built from :class:`~app.settings_schema.FieldSpec`: the settings panel's fields
and the chat's sampling controls both come from here, so a range is set in one place."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import QCheckBox, QComboBox, QDoubleSpinBox, QSpinBox, QWidget

from app.settings_schema import FieldSpec
from app.ui.wording import shown_help

__all__ = [
    "SpecComboBox",
    "SpecSpinBox",
    "make_editor",
    "read_editor",
    "tooltip",
    "write_editor",
]


class SpecSpinBox(QSpinBox):
    """A spin box whose arrows step over the gap between a field's special value and its
    range (``max_tokens``: -1 "No limit", then 1; never the invalid 0)."""

    def __init__(self, spec: FieldSpec, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._spec = spec

    def stepBy(self, steps: int) -> None:
        spec = self._spec
        target = self.value() + steps * self.singleStep()
        if spec.special is not None and spec.minimum is not None and spec.in_gap(target):
            target = int(spec.minimum) if steps > 0 else int(spec.special.value)
            self.setValue(target)
            return
        if spec.special is None and spec.minimum is not None and target < spec.minimum:
            # an editor that takes a typed value below the range (thread counts: a typed 0
            # gets a sentence) does not step there
            self.setValue(max(self.value(), int(spec.minimum)))
            return
        super().stepBy(steps)


class SpecComboBox(QComboBox):
    """A combo box of a choice field: each item holds its value (item data) and explains
    itself in its tooltip; the box's tooltip explains the choice shown.

    :attr:`chosen` is emitted only when the user picks an item, with its value; showing a
    stored value with :meth:`set_value` emits nothing, so loading never looks like an edit.
    """

    chosen = Signal(str)

    def __init__(self, spec: FieldSpec, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._spec = spec
        for value, text in spec.choices:
            self.addItem(text, value)
            item_help = spec.help_for_choice(value)
            if item_help:
                self.setItemData(self.count() - 1, item_help, Qt.ItemDataRole.ToolTipRole)
        self.currentIndexChanged.connect(self._update_tooltip)
        self.activated.connect(self._on_activated)
        self._update_tooltip()

    @property
    def spec(self) -> FieldSpec:
        return self._spec

    def value(self) -> str:
        return str(self.currentData())

    def set_value(self, value: str) -> bool:
        """Show ``value`` without emitting :attr:`chosen`; ``False`` (nothing changed) if it
        is not one of the field's choices."""
        index = self.findData(value)
        if index < 0:
            return False
        self.setCurrentIndex(index)
        return True

    @Slot()
    def _update_tooltip(self) -> None:
        parts = [shown_help(self._spec.help)]
        item_help = self._spec.help_for_choice(str(self.currentData()))
        if item_help:
            parts.append(f"{self.currentText()}: {item_help}")
        self.setToolTip("\n\n".join(parts))

    @Slot(int)
    def _on_activated(self, index: int) -> None:
        self.chosen.emit(str(self.itemData(index)))


def tooltip(spec: FieldSpec) -> str:
    """The help text with the valid range and unit."""
    parts = [shown_help(spec.help)]
    if spec.range_text():
        unit = f" {spec.unit}" if spec.unit else ""
        parts.append(f"Valid: {spec.range_text()}{unit}.")
    return " ".join(parts)


def make_editor(spec: FieldSpec, special_format: str = "{value} — {text}") -> QWidget:
    """A spin box, check box or combo box for ``spec`` (its range, step and special value).

    The caller connects the change signal it needs and sets the object name."""
    special = (
        special_format.format(value=spec.special.value, text=spec.special.text)
        if spec.special is not None and spec.special.value == spec.editor_minimum
        else ""
    )
    if spec.kind == "int":
        spin = SpecSpinBox(spec)
        spin.setRange(int(spec.editor_minimum), int(spec.maximum or 0))
        spin.setSingleStep(int(spec.step))
        spin.setGroupSeparatorShown(True)
        if special:
            spin.setSpecialValueText(special)
        return spin
    if spec.kind == "float":
        dspin = QDoubleSpinBox()
        dspin.setDecimals(spec.decimals)
        dspin.setRange(spec.editor_minimum, spec.maximum or 0.0)
        dspin.setSingleStep(spec.step)
        if special:
            dspin.setSpecialValueText(special)
        return dspin
    if spec.kind == "bool":
        return QCheckBox()
    if spec.kind == "choice":
        return SpecComboBox(spec)
    raise ValueError(f"no editor for the {spec.kind} field {spec.name}")


def write_editor(spec: FieldSpec, editor: QWidget, value: Any) -> bool:
    """Show ``value``; ``False`` (and nothing shown) if it is of the wrong type."""
    if isinstance(editor, QSpinBox):
        if isinstance(value, bool) or not isinstance(value, int):
            return False
        editor.setValue(value)
    elif isinstance(editor, QDoubleSpinBox):
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        editor.setValue(float(value))
    elif isinstance(editor, QCheckBox):
        if not isinstance(value, bool):
            return False
        editor.setChecked(value)
    elif isinstance(editor, QComboBox):
        if not isinstance(value, str):
            return False
        index = editor.findData(value)
        if index < 0:
            # Keep an unknown value visible so validation names it; never drop it.
            editor.addItem(f"{value} (not a valid choice)", value)
            index = editor.count() - 1
        editor.setCurrentIndex(index)
    else:
        return False
    return True


def read_editor(editor: QWidget) -> Any:
    if isinstance(editor, QSpinBox):
        return int(editor.value())
    if isinstance(editor, QDoubleSpinBox):
        return float(editor.value())
    if isinstance(editor, QCheckBox):
        return bool(editor.isChecked())
    if isinstance(editor, QComboBox):
        return str(editor.currentData())
    raise TypeError(f"not a field editor: {editor!r}")
