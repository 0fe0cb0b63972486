"""The loaded model's chat template: which is in use and why, and the user's choice.

The choice is the model's ``ModelSettings.chat_template`` (a bundled template's name, a
Jinja file, or "" for automatic: the model file's own, else one chosen by its
vocabulary or architecture). The window keeps it per model file and hands it to the
engine, which applies it from the next reply on; what the engine then uses, and why
(:class:`~app.engine.chat_template.TemplateChoice`), is shown here.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.engine.chat_template import TemplateChoice, TemplateSource, bundled_templates
from app.ui.tab_intro import is_base_choice as is_base_model_choice
from app.ui.tab_intro import template_label
from app.ui.text_completion import RAW_TEMPLATE, RAW_TEXT

AUTOMATIC_TEXT = "Automatic (the model's own, else by its vocabulary)"
FILE_TEXT = "A template file…"
_FILE = "\0file"  # the item that asks for a file (no template is named so)

SOURCE_TEXTS = {
    TemplateSource.GGUF: "the model file's own",
    TemplateSource.BUILTIN_BY_VOCABULARY: "built-in, chosen by the vocabulary",
    TemplateSource.BUILTIN_BY_ARCHITECTURE: "built-in, chosen by the architecture",
    TemplateSource.BUILTIN_DEFAULT: "built-in default",
    TemplateSource.USER_FILE: "your file",
    TemplateSource.USER_CHOICE: "your choice",
}


RAW_TIP = (
    "No template: a chat is one text the model continues (for base models, which were "
    "not trained to answer)"
)
RAW_IN_USE = (
    "In use: none, text completion. A chat is one text: the model continues it as it stands."
)
BASE_IN_USE = (
    "In use: none, text completion: this is a base model (its file has no chat "
    "template), so a chat is one text it continues. Choose a template to chat with it."
)


def in_use_text(choice: TemplateChoice | None) -> str:
    """The template in use in a few words, then why (empty without a model)."""
    if choice is None:
        return ""
    return f"In use: {template_label(choice)} ({SOURCE_TEXTS[choice.source]}). {choice.reason}"


class TemplatePicker(QWidget):
    """See the module docstring; ``chosen`` carries the new choice ("" is automatic)."""

    chosen = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        row = QHBoxLayout()
        title = QLabel("Chat template")
        self.combo = QComboBox()
        self.combo.setObjectName("chat-template")
        self.combo.setToolTip(
            "How a conversation is written for this model (kept for this model file; "
            "applies from the next reply). A model without a template of its own gets the "
            "one its vocabulary calls for; if its replies run on or show markers, choose."
        )
        row.addWidget(title)
        row.addWidget(self.combo, 1)
        layout.addLayout(row)
        self.in_use = QLabel()
        self.in_use.setObjectName("chat-template-in-use")
        self.in_use.setWordWrap(True)
        layout.addWidget(self.in_use)
        self.view_button = QPushButton("View…")
        self.view_button.setObjectName("chat-template-view")
        self.view_button.setToolTip("The Jinja text of the template in use (read only)")
        self.view_button.clicked.connect(self.view_template)
        row.addWidget(self.view_button)  # beside the choice: the panel keeps its height
        self._choice: TemplateChoice | None = None
        self.viewer: QDialog | None = None
        self._value = ""
        self._fill()
        self.combo.activated.connect(self._on_activated)
        self.set_model(None, "")

    def _fill(self) -> None:
        self.combo.blockSignals(True)
        try:
            self.combo.clear()
            self.combo.addItem(AUTOMATIC_TEXT, "")
            self.combo.addItem(RAW_TEXT, RAW_TEMPLATE)
            self.combo.setItemData(self.combo.count() - 1, RAW_TIP, 3)  # tooltip
            for name in sorted(bundled_templates()):
                self.combo.addItem(name, name)
            if self._value and self.combo.findData(self._value) < 0:
                self.combo.addItem(Path(self._value).name, self._value)
                self.combo.setItemData(self.combo.count() - 1, self._value, 3)  # tooltip
            self.combo.addItem(FILE_TEXT, _FILE)
            self.combo.setCurrentIndex(max(0, self.combo.findData(self._value)))
        finally:
            self.combo.blockSignals(False)

    def value(self) -> str:
        return self._value

    def set_model(self, choice: TemplateChoice | None, value: str) -> None:
        """The loaded model's template in use (None: no model) and the stored choice."""
        self._value = value
        self._choice = choice
        self._fill()
        self.combo.setEnabled(choice is not None)
        self.view_button.setEnabled(choice is not None and bool(choice.template))
        text = in_use_text(choice) or "No model is loaded."
        if choice is not None and value == RAW_TEMPLATE:
            text = RAW_IN_USE
        elif choice is not None and not value and is_base_model_choice(choice):
            # the automatic template is not in use: say so, and what a chat would get
            text = f"{BASE_IN_USE} {text.replace('In use:', 'A chat would get', 1)}"
        self.in_use.setText(text)

    @Slot()
    def view_template(self) -> QDialog | None:
        """The template in use, its text read only, in a window beside the settings."""
        choice = self._choice
        if choice is None or not choice.template:
            return None
        dialog = QDialog(self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.setObjectName("chat-template-viewer")
        dialog.setWindowTitle(f"Chat template: {choice.name}")
        layout = QVBoxLayout(dialog)
        text = QPlainTextEdit(choice.template)
        text.setObjectName("chat-template-text")
        text.setReadOnly(True)
        text.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        layout.addWidget(text)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(dialog.reject)
        layout.addWidget(buttons)
        dialog.resize(640, 480)
        self.viewer = dialog
        dialog.open()
        return dialog

    @Slot(int)
    def _on_activated(self, index: int) -> None:
        data = self.combo.itemData(index)
        if data == _FILE:
            path, _ = QFileDialog.getOpenFileName(
                self, "A chat template", "", "Jinja templates (*.jinja *.j2 *.txt);;All files (*)"
            )
            if not path:
                self.combo.setCurrentIndex(max(0, self.combo.findData(self._value)))
                return
            data = path
        if data != self._value:
            self.chosen.emit(str(data))
