"""A conversation's own stop strings, edited in its settings (:class:`StopStrings`).

The schema's ``stop`` sampling field, one string a line. A stop string may need a line
break or a tab (a base model's reply often should end at ``\\nUser:``): they are written
``\\n`` and ``\\t`` (and a backslash ``\\\\``). The strings are kept with the conversation's
sampling settings (``ConversationSettings.set_extra``) and go to the engine with each turn,
beside the template's own end markers, which always stop a reply.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Slot
from PySide6.QtWidgets import QPlainTextEdit

from app.settings_schema import SAMPLING_FIELDS

if TYPE_CHECKING:
    from app.ui.composer import ConversationSettings

STOP_KEY = "stop"
_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\"}


def decode_line(line: str) -> str:
    """A line as typed, with ``\\n``, ``\\t`` and ``\\\\`` read as what they stand for
    (any other backslash stays as it is)."""
    out: list[str] = []
    i = 0
    while i < len(line):
        char = line[i]
        if char == "\\" and i + 1 < len(line) and line[i + 1] in _ESCAPES:
            out.append(_ESCAPES[line[i + 1]])
            i += 2
            continue
        out.append(char)
        i += 1
    return "".join(out)


def encode_string(text: str) -> str:
    """A stop string as one line of the editor (the reverse of :func:`decode_line`)."""
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t")


def parse_lines(text: str) -> list[str]:
    """The stop strings of the editor's text: one a line, empty lines left out, each
    once, in order."""
    found: list[str] = []
    for line in text.split("\n"):
        value = decode_line(line)
        if value and value not in found:
            found.append(value)
    return found


def stored_strings(sampling: dict[str, Any]) -> list[str]:
    """A conversation's stored stop strings (anything else stored there reads as none)."""
    value = sampling.get(STOP_KEY)
    if not isinstance(value, list):
        return []
    return [s for s in value if isinstance(s, str) and s]


class StopStrings(QPlainTextEdit):
    """The editor; it writes into ``settings`` (its ``changed`` then stores them)."""

    def __init__(self, settings: ConversationSettings, sampling: dict[str, Any]) -> None:
        super().__init__()
        self._settings = settings
        self.setObjectName("stop-strings")
        spec = SAMPLING_FIELDS[STOP_KEY]
        self.setToolTip(
            f"{spec.help} One a line; write a line break as \\n and a tab as \\t. "
            "The chat template's own end markers always stop a reply."
        )
        self.setPlaceholderText("Stop strings, one a line (\\n: a line break), e.g. \\nUser:")
        self.setFixedHeight(self.fontMetrics().lineSpacing() * 3 + 12)
        self.show_strings(stored_strings(sampling))
        self.textChanged.connect(self._on_changed)

    def strings(self) -> list[str]:
        return parse_lines(self.toPlainText())

    def show_strings(self, strings: list[str]) -> None:
        self.blockSignals(True)
        try:
            self.setPlainText("\n".join(encode_string(s) for s in strings))
        finally:
            self.blockSignals(False)

    @Slot()
    def _on_changed(self) -> None:
        self._settings.set_extra(STOP_KEY, self.strings())
        self._settings.changed.emit()
