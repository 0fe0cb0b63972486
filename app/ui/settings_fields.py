"""The context settings dialog's fields: one editor per ``ContextSettings`` field, with its
label, its "applies live" or "rebuilds context" mark and its help, in titled groups
(:class:`FieldEditors`); and the guard that keeps the mouse wheel from editing a value
while the dialog scrolls (:class:`WheelGuard`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QFont, QPalette
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QGridLayout,
    QGroupBox,
    QLabel,
    QSpinBox,
    QWidget,
)

from app.engine.settings import ContextSettings
from app.engine.threads import clamp_threads
from app.settings_schema import CONTEXT_FIELDS, Apply, FieldSpec
from app.ui.field_editors import make_editor, read_editor, write_editor
from app.ui.settings_texts import LIVE_MARK, LIVE_TIP, REBUILD_MARK, REBUILD_TIP
from app.ui.wording import shown_help

# The fields and their groups, from the schema (app/settings_schema.py).
FIELDS: dict[str, FieldSpec] = CONTEXT_FIELDS
assert set(FIELDS) == {f.name for f in dataclasses.fields(ContextSettings)}, (
    "every ContextSettings field needs a spec"
)
# Thread counts: a typed 0 (or less) is used as 1, and the dialog says so.
THREAD_FIELDS = ("n_threads", "n_threads_batch")


class WheelGuard(QObject):
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


def make_secondary(label: QLabel) -> None:
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


def range_text(spec: FieldSpec) -> str:
    text = spec.range_text()
    return f"Valid: {text}." if text else ""


class FieldEditors:
    """Every field's editor (``editors``), label (``labels``), mark (``marks``) and help
    (``secondary``), by field name. Each editor's change calls the ``on_edited`` given to
    :meth:`build_group` (a Qt connection: nothing here refers back to the dialog), also
    while :meth:`write` shows values: ``loading`` is true then."""

    def __init__(self, wheel_guard: WheelGuard) -> None:
        self.wheel_guard = wheel_guard
        self.editors: dict[str, QWidget] = {}
        self.labels: dict[str, QLabel] = {}
        self.marks: dict[str, QLabel] = {}
        self.secondary: list[QLabel] = []
        self.loading = False  # values are being written, not edited

    def build_group(
        self,
        title: str,
        group: list[FieldSpec],
        running: QLabel,
        on_edited: Callable[[], None],
    ) -> QGroupBox:
        """A titled group of fields (``running``: the line shown under the context size)."""
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
            editor = self._make_editor(spec, on_edited)
            editor.setObjectName(f"field_{spec.name}")
            label.setBuddy(editor)
            live = spec.apply is Apply.LIVE
            mark = QLabel(LIVE_MARK if live else REBUILD_MARK)
            mark.setObjectName(f"mark_{spec.name}")
            mark.setToolTip(LIVE_TIP if live else REBUILD_TIP)
            self.marks[spec.name] = mark
            help_label = QLabel(f"{shown_help(spec.help)} {range_text(spec)}".strip())
            help_label.setObjectName(f"help_{spec.name}")
            help_label.setWordWrap(True)
            make_secondary(help_label)
            self.secondary.append(help_label)
            editor.setMinimumWidth(180)
            editor.setMaximumWidth(320)
            grid.addWidget(label, row, 0)
            grid.addWidget(editor, row, 1)
            grid.addWidget(mark, row, 2)
            grid.addWidget(help_label, row + 1, 1, 1, 3)
            row += 2
            if spec.name == "n_ctx":  # what the loaded model really runs at, right below
                grid.addWidget(running, row, 1, 1, 3)
                row += 1
            self.editors[spec.name] = editor
            self.labels[spec.name] = label
        return box

    def _make_editor(self, spec: FieldSpec, on_edited: Callable[[], None]) -> QWidget:
        editor = make_editor(spec)
        if spec.name in THREAD_FIELDS and isinstance(editor, QSpinBox):
            # a typed 0 is taken and said to become 1 (:meth:`thread_notes`), not refused
            # by the spin box without a word
            editor.setMinimum(0)
        if isinstance(editor, QSpinBox | QDoubleSpinBox):
            self.wheel_guard.guard(editor)
            editor.valueChanged.connect(on_edited)
        elif isinstance(editor, QCheckBox):
            editor.toggled.connect(on_edited)
        elif isinstance(editor, QComboBox):
            self.wheel_guard.guard(editor)
            editor.currentIndexChanged.connect(on_edited)
        return editor

    def write(self, values: dict[str, Any]) -> list[str]:
        """Show ``values`` (field -> value); returns the fields whose value was unusable."""
        skipped: list[str] = []
        self.loading = True
        try:
            for name, value in values.items():
                spec = FIELDS.get(name)
                if spec is None:
                    continue
                if not write_editor(spec, self.editors[name], value):
                    skipped.append(name)
        finally:
            self.loading = False
        return skipped

    def read(self) -> ContextSettings:
        values = {name: read_editor(editor) for name, editor in self.editors.items()}
        for name in THREAD_FIELDS:
            values[name] = clamp_threads(values[name])[0]
        return ContextSettings(**values)

    def thread_notes(self) -> list[str]:
        """What became of a thread count below 1 typed in its editor (it is used as 1)."""
        notes = (clamp_threads(read_editor(self.editors[name]))[1] for name in THREAD_FIELDS)
        return [note for note in notes if note is not None]
