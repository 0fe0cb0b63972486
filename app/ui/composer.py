"""The message composer and the per-conversation settings (system prompt, sampling)."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import (
    QDoubleSpinBox,
    QFormLayout,
    QGridLayout,
    QLabel,
    QPlainTextEdit,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.settings_schema import SAMPLING_FIELDS, FieldSpec
from app.storage import SamplingDefaults
from app.storage.settings import migrate_sampling
from app.ui.field_editors import make_editor, tooltip


class Composer(QPlainTextEdit):
    """Enter sends and Shift+Enter is a new line (or, as a preference, Ctrl+Enter sends and
    Enter is a new line); Esc stops (or cancels an edit)."""

    sendRequested = Signal()
    stopRequested = Signal()

    def __init__(self, parent: QWidget | None = None, enter_sends: bool = True) -> None:
        super().__init__(parent)
        self.enter_sends = enter_sends
        self.placeholder = ""  # a mode's own placeholder ("": the message box's)
        self.set_enter_sends(enter_sends)
        self.setTabChangesFocus(True)
        self.document().setDocumentMargin(6)
        self._fit()
        self.textChanged.connect(self._fit)

    def refit(self) -> None:
        """Fit the height again (after a font change)."""
        self._fit()

    def _fit(self) -> None:
        lines = max(1, min(8, int(self.document().size().height())))
        metrics = self.fontMetrics()
        self.setFixedHeight(lines * metrics.lineSpacing() + 20)

    def set_enter_sends(self, enter_sends: bool) -> None:
        self.enter_sends = enter_sends
        if self.placeholder:  # text completion's (app.ui.text_completion)
            self.setPlaceholderText(self.placeholder)
            return
        self.setPlaceholderText(
            "Write a message… (Enter sends, Shift+Enter for a new line)"
            if enter_sends
            else "Write a message… (Ctrl+Enter sends, Enter for a new line)"
        )

    def keyPressEvent(self, e: QKeyEvent) -> None:
        key = e.key()
        if key in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            mods = e.modifiers()
            if self.enter_sends:
                send = not mods & Qt.KeyboardModifier.ShiftModifier
            else:
                send = bool(mods & Qt.KeyboardModifier.ControlModifier)
            if send:
                self.sendRequested.emit()
            else:
                self.insertPlainText("\n")
            e.accept()
            return
        if key == Qt.Key.Key_Escape:
            self.stopRequested.emit()
            e.accept()
            return
        super().keyPressEvent(e)


# The per-chat sampling controls: the schema's sampling fields marked ``chat``, in order.
# (numbers here; the chat tab edits the others, e.g. the stop strings, itself)
CHAT_FIELDS: tuple[FieldSpec, ...] = tuple(
    s for s in SAMPLING_FIELDS.values() if s.chat and s.kind in ("int", "float")
)


class ConversationSettings(QWidget):
    """System prompt and sampling of one conversation; ``changed`` when the user edits."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 4, 8, 4)
        form = QFormLayout()
        self.system_prompt = QPlainTextEdit()
        self.system_prompt.setObjectName("system-prompt")
        self.system_prompt.setPlaceholderText("System prompt for this conversation (optional)")
        self.system_prompt.setFixedHeight(60)
        self.system_prompt.textChanged.connect(self.changed)
        form.addRow("System prompt", self.system_prompt)
        layout.addLayout(form)
        self._form = form
        grid = QGridLayout()
        self.spins: dict[str, QSpinBox | QDoubleSpinBox] = {}
        for i, spec in enumerate(CHAT_FIELDS):
            spin = make_editor(spec, special_format="{text}")
            assert isinstance(spin, QSpinBox | QDoubleSpinBox), spec.name
            spin.valueChanged.connect(self.changed)
            spin.setObjectName(spec.name)
            tip = tooltip(spec)
            spin.setToolTip(tip)
            title = QLabel(spec.label)
            title.setToolTip(tip)
            row, col = divmod(i, 3)
            grid.addWidget(title, row, col * 2)
            grid.addWidget(spin, row, col * 2 + 1)
            self.spins[spec.name] = spin
        layout.addLayout(grid)
        self._extra: dict[str, Any] = {}
        # A migrated conversation is reported once control returns to the event loop, so
        # that a tab connecting ``changed`` right after ``set_values`` still stores the fix.
        self._migrated = QTimer(self)
        self._migrated.setSingleShot(True)
        self._migrated.setInterval(0)
        self._migrated.timeout.connect(self.changed)

    def add_row(self, label: str, widget: QWidget) -> None:
        """A conversation setting the tab edits itself (kept with the sampling, see
        ``set_extra``), shown with the others."""
        self._form.addRow(label, widget)

    def set_values(self, system_prompt: str, sampling: dict[str, Any]) -> None:
        """Show a conversation's settings. Stored sampling goes through the schema first:
        a value an older version allowed but the schema does not is clamped (or reset) and
        logged, and ``changed`` is emitted (from the event loop) so that the conversation
        stores the fix."""
        defaults = SamplingDefaults().to_dict()
        sampling, migrated = migrate_sampling(sampling)
        values = {**defaults, **sampling}
        self.blockSignals(True)
        try:
            self.system_prompt.blockSignals(True)
            self.system_prompt.setPlainText(system_prompt)
            self.system_prompt.blockSignals(False)
            for name, spin in self.spins.items():
                spin.blockSignals(True)
                value = values.get(name, defaults.get(name, 0))
                if isinstance(spin, QDoubleSpinBox):
                    spin.setValue(float(value))
                else:
                    spin.setValue(int(value))
                spin.blockSignals(False)
        finally:
            self.blockSignals(False)
        self._extra = {k: v for k, v in sampling.items() if k not in self.spins}
        if migrated:
            self._migrated.start()

    def set_extra(self, key: str, value: Any) -> None:
        """A conversation setting without an editor here (kept with the sampling dict)."""
        self._extra = {**self._extra, key: value}

    def values(self) -> tuple[str, dict[str, Any]]:
        sampling: dict[str, Any] = dict(self._extra)
        for name, spin in self.spins.items():
            sampling[name] = spin.value()
        return self.system_prompt.toPlainText(), sampling
