"""A reasoning model's thinking, shown in a :class:`ReasoningBlock` above the answer:
expanded with "Thinking…" while it streams, collapsed ("Thought for 12 s") once the answer
starts; a click on its header opens it again. It is plain text (the model's text is
untrusted)."""

from __future__ import annotations

from PySide6.QtCore import Qt, Slot
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QFrame, QLabel, QSizePolicy, QVBoxLayout, QWidget

from app.ui.disclosure import disclosure_toggle, show_expanded
from app.ui.stream_chunks import CHUNK_CHARS, cut_point
from app.ui.text_label import TextLabel


class ReasoningBlock(QFrame):
    """A collapsible block with a reasoning model's thinking, as plain text.

    The header is a checkable :class:`QToolButton` with an arrow (checked: expanded). Long
    text is split into several labels at line breaks, like the answer, so only the last
    (short) one changes while it streams; nothing is laid out while the block is collapsed.
    """

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("reasoning")
        self.setFrameShape(QFrame.Shape.NoFrame)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 2)
        layout.setSpacing(2)
        self.toggle = disclosure_toggle(
            self, "reasoning-toggle", "Show or hide what the model thought before answering"
        )
        self.toggle.toggled.connect(self._on_toggled)
        layout.addWidget(self.toggle)
        self.body = QFrame(self)
        self.body.setObjectName("reasoning-body")
        self.body.setFrameShape(QFrame.Shape.NoFrame)
        self._body_layout = QVBoxLayout(self.body)
        self._body_layout.setContentsMargins(14, 0, 0, 0)
        self._body_layout.setSpacing(0)
        self._labels: list[QLabel] = [self._new_label()]
        self._body_layout.addWidget(self._labels[0])
        self.body.setVisible(False)
        layout.addWidget(self.body)
        self._text = ""
        self._shown = ""  # the text the labels hold
        self._frozen = 0  # characters held by the labels before the last one

    def _new_label(self) -> QLabel:
        label = TextLabel()
        label.setObjectName("reasoning-text")
        label.setTextFormat(Qt.TextFormat.PlainText)  # never HTML: untrusted text
        label.setWordWrap(True)
        label.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse
            | Qt.TextInteractionFlag.TextSelectableByKeyboard
        )
        label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        palette = label.palette()
        muted = palette.color(QPalette.ColorGroup.Disabled, QPalette.ColorRole.WindowText)
        palette.setColor(QPalette.ColorRole.WindowText, muted)
        label.setPalette(palette)
        return label

    @property
    def expanded(self) -> bool:
        return self.toggle.isChecked()

    def set_expanded(self, expanded: bool) -> None:
        self.toggle.setChecked(expanded)

    def title(self) -> str:
        return self.toggle.text()

    def set_title(self, title: str) -> None:
        if self.toggle.text() != title:
            self.toggle.setText(title)

    def text(self) -> str:
        return self._text

    def shown_text(self) -> str:
        """What the labels show (the text up to the last expansion or update)."""
        return "".join(label.text() for label in self._labels)

    def set_text(self, text: str) -> None:
        self._text = text
        if self.expanded:
            self._update_labels()

    @Slot(bool)
    def _on_toggled(self, expanded: bool) -> None:
        show_expanded(self.toggle, expanded)
        if expanded:
            self._update_labels()
        self.body.setVisible(expanded)

    def _update_labels(self) -> None:
        text = self._text
        if text == self._shown:
            return
        if not text.startswith(self._shown[: self._frozen]):
            for label in self._labels[:-1]:
                self._body_layout.removeWidget(label)
                label.deleteLater()
            self._labels = self._labels[-1:]
            self._frozen = 0
        while len(text) - self._frozen > CHUNK_CHARS:
            cut = cut_point(text, self._frozen)
            if cut is None:
                break
            label = self._new_label()
            label.setText(text[self._frozen : cut].rstrip("\n"))
            self._body_layout.insertWidget(len(self._labels) - 1, label)
            self._labels.insert(len(self._labels) - 1, label)
            self._frozen = cut
        self._labels[-1].setText(text[self._frozen :])
        self._shown = text
