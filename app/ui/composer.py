"""The message composer and the per-conversation settings (system prompt, sampling)."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal
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

from app.storage import SamplingDefaults


class Composer(QPlainTextEdit):
    """Enter sends, Shift+Enter is a new line, Esc stops (or cancels an edit)."""

    sendRequested = Signal()
    stopRequested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setPlaceholderText("Write a message… (Enter sends, Shift+Enter for a new line)")
        self.setTabChangesFocus(True)
        self.document().setDocumentMargin(6)
        self._fit()
        self.textChanged.connect(self._fit)

    def _fit(self) -> None:
        lines = max(1, min(8, int(self.document().size().height())))
        metrics = self.fontMetrics()
        self.setFixedHeight(lines * metrics.lineSpacing() + 20)

    def keyPressEvent(self, e: QKeyEvent) -> None:
        key = e.key()
        if key in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            if e.modifiers() & Qt.KeyboardModifier.ShiftModifier:
                self.insertPlainText("\n")
            else:
                self.sendRequested.emit()
            e.accept()
            return
        if key == Qt.Key.Key_Escape:
            self.stopRequested.emit()
            e.accept()
            return
        super().keyPressEvent(e)


_SPINS: list[tuple[str, str, float, float, float, int]] = [
    # field, label, min, max, step, decimals (0 = integer)
    ("temperature", "Temperature", 0.0, 5.0, 0.05, 2),
    ("top_k", "Top-k", 0, 1000, 1, 0),
    ("top_p", "Top-p", 0.0, 1.0, 0.01, 2),
    ("min_p", "Min-p", 0.0, 1.0, 0.01, 2),
    ("repeat_penalty", "Repeat penalty", 0.01, 5.0, 0.05, 2),
    ("frequency_penalty", "Frequency penalty", -2.0, 2.0, 0.05, 2),
    ("presence_penalty", "Presence penalty", -2.0, 2.0, 0.05, 2),
    ("seed", "Seed (-1 random)", -1, 2**31 - 1, 1, 0),
    ("max_tokens", "Max tokens", 1, 1_000_000, 16, 0),
]

_TIPS = {
    "temperature": "Randomness: 0 always picks the likeliest token, higher is more varied.",
    "top_k": "Sample only among the k likeliest tokens (0: no limit).",
    "top_p": "Sample among the likeliest tokens whose probabilities add up to p.",
    "min_p": "Drop tokens less likely than this fraction of the likeliest one.",
    "repeat_penalty": "Above 1 discourages repeating recent tokens.",
    "frequency_penalty": "Discourages tokens in proportion to how often they appeared.",
    "presence_penalty": "Discourages tokens that appeared at all.",
    "seed": "The same seed and settings give the same reply; -1 picks a new one each time.",
    "max_tokens": "The longest reply, in tokens.",
}


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
        grid = QGridLayout()
        self.spins: dict[str, QSpinBox | QDoubleSpinBox] = {}
        for i, (name, label, low, high, step, decimals) in enumerate(_SPINS):
            spin: QSpinBox | QDoubleSpinBox
            if decimals:
                dspin = QDoubleSpinBox()
                dspin.setDecimals(decimals)
                dspin.setRange(low, high)
                dspin.setSingleStep(step)
                dspin.valueChanged.connect(self.changed)
                spin = dspin
            else:
                ispin = QSpinBox()
                ispin.setRange(int(low), int(high))
                ispin.setSingleStep(int(step))
                ispin.valueChanged.connect(self.changed)
                spin = ispin
            spin.setObjectName(name)
            spin.setToolTip(_TIPS.get(name, ""))
            title = QLabel(label)
            title.setToolTip(_TIPS.get(name, ""))
            row, col = divmod(i, 3)
            grid.addWidget(title, row, col * 2)
            grid.addWidget(spin, row, col * 2 + 1)
            self.spins[name] = spin
        layout.addLayout(grid)

    def set_values(self, system_prompt: str, sampling: dict[str, Any]) -> None:
        defaults = SamplingDefaults().to_dict()
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

    def set_extra(self, key: str, value: Any) -> None:
        """A conversation setting without an editor here (kept with the sampling dict)."""
        extra = dict(getattr(self, "_extra", {}))
        extra[key] = value
        self._extra = extra

    def values(self) -> tuple[str, dict[str, Any]]:
        sampling: dict[str, Any] = dict(getattr(self, "_extra", {}))
        for name, spin in self.spins.items():
            sampling[name] = spin.value()
        return self.system_prompt.toPlainText(), sampling
